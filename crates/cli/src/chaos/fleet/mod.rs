//! `mcp-resume chaos --fleet`: a deployment's day, on one machine. HAProxy
//! (`deploy/haproxy.cfg`, no stickiness) in front of instances of `serve`,
//! a hosted rmcp handler or `gateway -- CMD` on one Redis of the run's own
//! (`crate::fleet`); sessions that talk only to the balancer, each with a
//! reader of its session stream and a caller (notifications a call
//! promises, progress on request streams, an elicitation answered mid-call
//! through the balancer); and, while they run, the
//! operations of a deploy: graceful rolling restarts, scale-out and -in,
//! then the faults (kill -9, an instance frozen past its lease, Redis
//! restarted and stalled). The verdict: no silent gap, duplicate, lost
//! session or hung call ever; no failed call and no missing promised
//! notification at all when only graceful operations ran.

mod session;
mod tally;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use crate::fleet::{Fleet, Kind, Plan};
use tally::Tally;

/// The fleet mode's own flags.
#[derive(Args, Debug)]
pub struct FleetFlags {
    /// Run the fleet experiment: HAProxy in front of --instances (default 3)
    /// of `serve` (or `--hosted BIN`, or `gateway -- CMD`) on a Redis of its own.
    #[arg(long)]
    fleet: bool,

    /// --fleet: sessions, each with a reader and a caller, all through the balancer.
    #[arg(long, default_value_t = 12)]
    sessions: usize,

    /// --fleet: graceful rolling restarts of every instance (SIGTERM, wait, start again).
    #[arg(long, default_value_t = 2)]
    rolling_restarts: usize,

    /// --fleet: scale out to 5 instances, then in to 2 (gracefully).
    #[arg(long)]
    scale: bool,

    /// --fleet: instances killed with kill -9 (and started again).
    #[arg(long, default_value_t = 0)]
    kills: usize,

    /// --fleet: instances frozen (SIGSTOP) for --freeze-secs, past their lease.
    #[arg(long, default_value_t = 0)]
    freezes: usize,

    /// --fleet: Redis restarts (kill -9, then the same port and append-only file).
    #[arg(long, default_value_t = 0)]
    redis_restarts: usize,

    /// --fleet: Redis stalls (SIGSTOP for 3 to 15 s, then SIGCONT).
    #[arg(long, default_value_t = 0)]
    redis_stalls: usize,
}

impl FleetFlags {
    /// Whether the fleet mode was asked for.
    pub fn on(&self) -> bool {
        self.fleet
    }

    /// Whether the run has faults that may fail calls loudly.
    fn faults(&self) -> bool {
        self.kills + self.freezes + self.redis_restarts + self.redis_stalls > 0
    }
}

/// What the run needs from the rest of `chaos`'s arguments.
pub struct Context<'a> {
    pub instances: usize,
    pub hosted: Option<&'a std::path::Path>,
    pub command: &'a [String],
    pub seed: u64,
    pub freeze_secs: u64,
    pub report: Option<&'a std::path::Path>,
    pub chart: Option<&'a std::path::Path>,
}

/// Runs the fleet experiment; whether it found nothing wrong.
pub async fn run(flags: &FleetFlags, cx: &Context<'_>) -> Result<bool, String> {
    let kind = match (cx.hosted, cx.command.is_empty()) {
        (Some(bin), _) => Kind::Hosted(bin.to_owned()),
        (None, false) => Kind::Gateway(cx.command.to_vec()),
        (None, true) => Kind::Serve,
    };
    // The instances run this binary; MCPR_FLEET_INSTANCE_BIN names another
    // (an earlier build), to measure a change against it with one harness.
    let exe = match std::env::var_os("MCPR_FLEET_INSTANCE_BIN") {
        Some(bin) => std::path::PathBuf::from(bin),
        None => std::env::current_exe().map_err(|e| format!("locating mcp-resume: {e}"))?,
    };
    let instances = cx.instances.max(1);
    let mut fleet = Fleet::start(Plan {
        listen: "127.0.0.1:0".into(),
        instances,
        slots: if flags.scale {
            instances.max(5)
        } else {
            instances
        },
        store: None,
        kind: kind.clone(),
        exe,
        grace_secs: 10,
    })?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let client = session::Client {
        http: reqwest::Client::builder()
            .pool_max_idle_per_host(4)
            .build()
            .map_err(|e| e.to_string())?,
        url: fleet.url.clone(),
    };
    let mut sessions = Vec::new();
    for _ in 0..flags.sessions.max(1) {
        let sid = session::open(&client).await?;
        let seen = Arc::new(Mutex::new(session::Read::default()));
        let promised = Arc::new(Mutex::new(0u64));
        let reader = tokio::spawn(session::read(
            client.clone(),
            sid.clone(),
            seen.clone(),
            tally.clone(),
            stop.clone(),
        ));
        let caller_stop = Arc::new(AtomicBool::new(false));
        let caller = tokio::spawn(session::call_loop(
            client.clone(),
            sid,
            kind.clone(),
            promised.clone(),
            tally.clone(),
            caller_stop.clone(),
        ));
        sessions.push((reader, caller, caller_stop, seen, promised));
    }
    let began = Instant::now();
    operate(&mut fleet, flags, cx, &tally).await;
    // Calls stop; readers catch up with what the answered calls promised.
    for (_, _, caller_stop, ..) in &sessions {
        caller_stop.store(true, Ordering::Release);
    }
    for s in &mut sessions {
        let _ = (&mut s.1).await;
    }
    // (Lost work is reported once another instance sweeps the dead one's
    // sessions: its heartbeat expires in 10 s, and the survivors look for
    // an instance gone every 2 s.)
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let behind = sessions.iter().any(|(_, _, _, seen, promised)| {
            let seen = seen.lock().unwrap();
            seen.promised_seen < *promised.lock().unwrap() && !seen.work_lost
        });
        if !behind {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Release);
    for (reader, _, _, seen, promised) in sessions {
        let _ = reader.await;
        let seen = seen.lock().unwrap();
        tally.promises(
            *promised.lock().unwrap(),
            seen.promised_seen,
            seen.work_lost,
        );
    }
    let about = json!({
        "kind": kind.name(),
        "instances": instances,
        "sessions": flags.sessions,
        "rolling_restarts": flags.rolling_restarts,
        "scale": flags.scale,
        "kills": flags.kills,
        "freezes": flags.freezes,
        "freeze_secs": cx.freeze_secs,
        "redis_restarts": flags.redis_restarts,
        "redis_stalls": flags.redis_stalls,
        "seed": cx.seed,
        "seconds": began.elapsed().as_secs(),
        "balancer": "haproxy (deploy/haproxy.cfg)",
    });
    tally.print(&format!("{}, {instances} instances", kind.name()));
    if let Some(p) = cx.report {
        let text = serde_json::to_string_pretty(&tally.json(about)).unwrap_or_default();
        std::fs::write(p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    if let Some(p) = cx.chart {
        std::fs::write(p, tally.svg()).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    fleet.stop_all().await;
    let failures = tally.failures(flags.faults());
    for f in &failures {
        eprintln!("mcp-resume chaos --fleet: {f}");
    }
    Ok(failures.is_empty())
}

/// The operations, one after the other, while the sessions run.
async fn operate(fleet: &mut Fleet, flags: &FleetFlags, cx: &Context<'_>, tally: &Tally) {
    let settle = Duration::from_secs(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..flags.rolling_restarts {
        for i in fleet.running() {
            let (took, graceful) = fleet.stop_slot(i).await;
            let started = fleet.start_slot(i).await;
            tally.op(
                json!({"op": "rolling-restart", "round": round + 1, "slot": i,
                "stop_ms": took.as_millis() as u64, "exited_by_itself": graceful,
                "started": started.is_ok()}),
            );
            tokio::time::sleep(settle).await;
        }
    }
    if flags.scale {
        for i in 0..fleet.slots.len() {
            if fleet.slots[i].child.is_none() {
                let started = fleet.start_slot(i).await;
                tally.op(json!({"op": "scale-out", "slot": i, "started": started.is_ok()}));
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let running = fleet.running();
        for i in running.iter().take(running.len().saturating_sub(2)) {
            let (took, graceful) = fleet.stop_slot(*i).await;
            tally.op(
                json!({"op": "scale-in", "slot": i, "stop_ms": took.as_millis() as u64,
                "exited_by_itself": graceful}),
            );
        }
    }
    let mut pick = cx.seed;
    let mut next = |n: usize| {
        pick = pick
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((pick >> 33) as usize) % n.max(1)
    };
    for _ in 0..flags.kills {
        let running = fleet.running();
        let i = running[next(running.len())];
        fleet.kill_slot(i);
        let started = fleet.start_slot(i).await;
        tally.op(json!({"op": "kill-9", "slot": i, "started": started.is_ok()}));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for _ in 0..flags.freezes {
        let running = fleet.running();
        let i = running[next(running.len())];
        let _ = fleet.signal_slot(i, libc::SIGSTOP);
        tokio::time::sleep(Duration::from_secs(cx.freeze_secs)).await;
        let _ = fleet.signal_slot(i, libc::SIGCONT);
        tally.op(json!({"op": "freeze", "slot": i, "secs": cx.freeze_secs}));
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    for _ in 0..flags.redis_restarts {
        if let Some(r) = fleet.redis.as_mut() {
            let ok = r.restart().is_ok();
            tally.op(json!({"op": "redis-restart", "restarted": ok}));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    for _ in 0..flags.redis_stalls {
        let secs = 3 + next(13) as u64;
        if let Some(r) = fleet.redis.as_ref() {
            let _ = r.signal(libc::SIGSTOP);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            let _ = r.signal(libc::SIGCONT);
            tally.op(json!({"op": "redis-stall", "secs": secs}));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
}
