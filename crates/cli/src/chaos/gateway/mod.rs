//! `mcp-resume chaos --gateway -- CMD`: the deployed path under faults.
//!
//! Several `mcp-resume gateway` instances on one shared store run CMD, an
//! MCP server over stdio, one child per session. Sessions (a few at once)
//! each make `progress` calls, judged against the child's own numbering,
//! `tick` calls, which name the child's process and a counter only that
//! process keeps, and now and then `confirm`, where the child asks the
//! client (elicitation) and the answer, POSTed to an instance picked at
//! random, must come back unchanged. Meanwhile a fault loop kills a random
//! instance with `kill -9` (restarted on its address and store), freezes
//! one with `SIGSTOP` past its lease and thaws it, or (`--spawn-redis`)
//! restarts the Redis; a third of the calls are cut by the client
//! mid-stream and resumed with `Last-Event-ID` on an instance picked at
//! random. A call is complete or loud; never a silent gap, a
//! duplicate, a reorder, a foreign step or a hang (no end within the bound);
//! a session is never served by two processes at once (its ticks), and
//! when it ends no two of its processes still run.
//!
//! The hosted mode (`--hosted BIN`) runs the same sessions against
//! `rmcp_durable --transport mcp-resume` instances (rmcp handlers hosted on
//! mcp-resume's transport, which run wherever a message lands): the same
//! `progress` and `confirm` judgement, without `tick`.

mod call;
mod judge;
mod listen;
mod report;
mod session;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume_client::Xorshift64;
use tokio::sync::watch;

use super::target::Target;
use crate::fleet::redis::OwnRedis;
pub use report::{print_table, write_json, Tally};
use session::{session, Shared};

/// Run settings of the gateway mode.
pub struct Options {
    /// `progress` calls to make in all.
    pub calls: usize,
    /// `progress` calls per session.
    pub calls_per_session: usize,
    /// The servers keep per-process state per session (gateways: `tick`
    /// and the children counted); not so for hosted rmcp handlers.
    pub ticks: bool,
    /// Sessions at once.
    pub parallel: usize,
    /// Seed of the random choices.
    pub seed: u64,
    /// Stop starting sessions after this long.
    pub max: Duration,
    /// How long a freeze lasts.
    pub freeze: Duration,
    /// Time between two faults (0: no faults).
    pub fault_every: Duration,
    /// The bound on each call.
    pub bound: Duration,
    /// No progress lines.
    pub quiet: bool,
}

/// Runs sessions until `opts.calls` calls were made, faults alongside.
pub async fn run(target: Target, redis: Option<OwnRedis>, opts: &Options) -> Result<Tally, String> {
    let shared = Arc::new(Shared {
        endpoints: call::Endpoints {
            urls: target.urls.clone(),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .build()
                .map_err(|e| e.to_string())?,
        },
        calls: opts.calls_per_session.max(1),
        ticks: opts.ticks,
        bound: opts.bound,
        frozen: Default::default(),
        // Past the lease (10 s) a frozen owner needs to notice it lost.
        settle: Duration::from_secs(15),
    });
    let mut rng = Xorshift64::new(opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (stop_tx, stop_rx) = watch::channel(false);
    let faults = tokio::spawn(fault_loop(
        target,
        redis,
        shared.clone(),
        Xorshift64::new(rng.next_u64()),
        opts.freeze,
        opts.fault_every,
        stop_rx,
    ));
    let mut tally = Tally::default();
    let start = Instant::now();
    let sessions = opts.calls.div_ceil(shared.calls);
    let mut started = 0;
    let mut set = tokio::task::JoinSet::new();
    loop {
        while set.len() < opts.parallel.max(1) && started < sessions && start.elapsed() < opts.max {
            started += 1;
            set.spawn(session(shared.clone(), Xorshift64::new(rng.next_u64())));
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        let line = match done {
            Ok(outcome) => tally.record(outcome),
            Err(e) => tally.harness_error(format!("a session's task failed: {e}")),
        };
        if let Some(line) = line {
            eprintln!("{line}");
        }
        if !opts.quiet {
            eprintln!("{}", tally.progress(sessions));
        }
    }
    let _ = stop_tx.send(true);
    let (target, redis, injected) = faults.await.map_err(|e| e.to_string())?;
    drop(target);
    drop(redis);
    tally.faults = injected;
    tally.elapsed = start.elapsed();
    if tally.sessions < sessions {
        eprintln!(
            "mcp-resume chaos: ran {} of {sessions} sessions within --max-secs",
            tally.sessions
        );
    }
    Ok(tally)
}

/// Faults until told to stop: every `every`, `kill -9` of a random instance
/// (restarted), a freeze of one for `freeze`, or, with a Redis of our own, a
/// restart of that. Gives the servers back to be stopped, with how many of
/// each fault it made.
async fn fault_loop(
    mut target: Target,
    mut redis: Option<OwnRedis>,
    shared: Arc<Shared>,
    mut rng: Xorshift64,
    freeze: Duration,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> (Target, Option<OwnRedis>, report::Faults) {
    let mut made = report::Faults::default();
    let n = target.killable();
    if every.is_zero() || n == 0 {
        let _ = stop.wait_for(|s| *s).await;
        return (target, redis, made);
    }
    let kinds = if redis.is_some() { 3 } else { 2 };
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return (target, redis, made),
            _ = tokio::time::sleep(every) => {}
        }
        let i = rng.range(0, n as u64 - 1) as usize;
        match (rng.range(0, kinds - 1), redis.as_mut()) {
            (0, _) => {
                // The restart waits for the new process's first line.
                match tokio::task::block_in_place(|| target.kill_and_restart(i)) {
                    Ok(()) => made.kills += 1,
                    Err(e) => made.errors.push(e),
                }
            }
            (2, Some(r)) => match tokio::task::block_in_place(|| r.restart()) {
                Ok(()) => made.redis_restarts += 1,
                Err(e) => made.errors.push(e),
            },
            _ => {
                if let Err(e) = target.signal(i, libc::SIGSTOP) {
                    made.errors.push(e);
                    continue;
                }
                shared.frozen.fetch_add(1, Ordering::SeqCst);
                // A freeze is always thawed, even when the run ends meanwhile.
                let _ = tokio::time::timeout(freeze, stop.wait_for(|s| *s)).await;
                if let Err(e) = target.signal(i, libc::SIGCONT) {
                    made.errors.push(e);
                }
                shared.frozen.fetch_sub(1, Ordering::SeqCst);
                made.freezes += 1;
            }
        }
    }
}
