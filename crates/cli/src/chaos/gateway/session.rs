//! One session through the gateways: `initialize` on an instance picked at
//! random, then calls of `progress` (each judged against the child's own
//! numbering) and `tick` (the child's process and per-process counter),
//! each on an instance picked at random; then, once no instance is frozen,
//! how many of the processes that answered for the session still run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume_client::Xorshift64;
use mcp_resume_proto::headers as h;
use serde_json::{json, Value};
use tokio::time::sleep;

use super::call::{call, tool_call, Endpoints, Seen, PROTOCOL};
use super::judge::{forked, judge_answer, judge_call, parse_tick, result_text, CallEnd, Verdict};
use super::listen::{listen, Asked};

/// What every session of a run shares.
pub struct Shared {
    /// The instances' endpoints.
    pub endpoints: Endpoints,
    /// `progress` calls per session.
    pub calls: usize,
    /// Each session's server keeps per-process state for it (a gateway's
    /// child): `tick` after each call, and the processes counted at the end.
    /// A hosted handler runs on whichever instance a message reaches.
    pub ticks: bool,
    /// The bound on each call: past it the call is hung.
    pub bound: Duration,
    /// Instances frozen right now (SIGSTOP): their children cannot be
    /// stopped by them until they are thawed.
    pub frozen: AtomicUsize,
    /// How long a session waits for the processes that served it to settle
    /// to one (a new owner's child starts while the old one is stopping).
    pub settle: Duration,
}

/// One judged `progress` call.
pub struct Judged {
    /// The verdict.
    pub verdict: Verdict,
    /// Cuts the client made on purpose.
    pub cuts: u32,
    /// Resumes with `Last-Event-ID`.
    pub resumes: u32,
    /// From the POST to its end.
    pub ms: f64,
}

/// What one session came to.
#[derive(Default)]
pub struct SessionOutcome {
    /// Every `progress` call, judged.
    pub calls: Vec<Judged>,
    /// Every `confirm` call (an elicitation answered on an instance picked
    /// at random), judged.
    pub asks: Vec<Judged>,
    /// `tick` answers read.
    pub ticks: usize,
    /// `tick` calls that ended loudly (allowed).
    pub loud_ticks: usize,
    /// Two processes served the session, seen in the ticks.
    pub forked: Option<String>,
    /// More than one of its processes still ran after the settle time.
    pub two_children: Option<String>,
    /// The session could not be started: nothing was judged.
    pub harness_error: Option<String>,
}

/// Runs one session.
pub async fn session(shared: Arc<Shared>, mut rng: Xorshift64) -> SessionOutcome {
    let mut out = SessionOutcome::default();
    let sid = match initialize(&shared.endpoints, &mut rng).await {
        Ok(s) => s,
        Err(e) => {
            out.harness_error = Some(e);
            return out;
        }
    };
    // The session stream, where the child's own requests arrive.
    let asked = Asked::default();
    let listener = tokio::spawn(listen(
        shared.clone(),
        Xorshift64::new(rng.next_u64()),
        sid.clone(),
        asked.clone(),
    ));
    let mut ticks = Vec::new();
    let mut id = 0;
    for _ in 0..shared.calls {
        id += 1;
        let n = rng.range(3, 30);
        // Steps up to 10 ms apart: a call lasts long enough for a fault to
        // land in the middle of it.
        let interval = rng.range(0, 10);
        // A third of the calls are cut by the client once, mid-stream.
        let cut = (rng.range(0, 2) == 0).then(|| rng.range(1, n + 1) as usize);
        let started = Instant::now();
        let seen = call(
            &shared.endpoints,
            &mut rng,
            &sid,
            tool_call(id, "progress", json!({"n": n, "interval_ms": interval})),
            cut,
            &asked,
            shared.bound,
        )
        .await;
        out.calls.push(Judged {
            verdict: judge_call(n, &seen.steps, &seen.end),
            cuts: seen.cuts,
            resumes: seen.resumes,
            ms: started.elapsed().as_secs_f64() * 1e3,
        });
        // A third of the time the child asks the client something.
        if rng.range(0, 2) == 0 {
            id += 1;
            let token = format!("k{:x}", rng.next_u64());
            let started = Instant::now();
            let seen = call(
                &shared.endpoints,
                &mut rng,
                &sid,
                tool_call(id, "confirm", json!({"token": token})),
                None,
                &asked,
                shared.bound,
            )
            .await;
            let n = asked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&token)
                .copied()
                .unwrap_or(0);
            out.asks.push(Judged {
                verdict: judge_answer(&token, n, &seen.end),
                cuts: seen.cuts,
                resumes: seen.resumes,
                ms: started.elapsed().as_secs_f64() * 1e3,
            });
        }
        if !shared.ticks {
            continue;
        }
        id += 1;
        let Seen { end, .. } = call(
            &shared.endpoints,
            &mut rng,
            &sid,
            tool_call(id, "tick", json!({})),
            None,
            &asked,
            shared.bound,
        )
        .await;
        match end {
            CallEnd::Result(r) => match result_text(&r).and_then(parse_tick) {
                Some(t) => {
                    ticks.push(t);
                    out.ticks += 1;
                }
                None => out.loud_ticks += 1,
            },
            _ => out.loud_ticks += 1,
        }
    }
    listener.abort();
    out.forked = forked(&ticks);
    if shared.ticks {
        out.two_children = settle(&shared, &ticks).await;
    }
    end(&shared.endpoints, &mut rng, &sid).await;
    out
}

/// `initialize` and `notifications/initialized`, each retried on another
/// instance while instances are down; the session id.
async fn initialize(ep: &Endpoints, rng: &mut Xorshift64) -> Result<String, String> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": PROTOCOL, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "mcp-resume-chaos", "version": env!("CARGO_PKG_VERSION")}}});
    let mut last = String::new();
    for _ in 0..20 {
        match try_initialize(ep, rng, &body).await {
            Ok(sid) => return Ok(sid),
            Err(e) => last = e,
        }
        sleep(Duration::from_millis(250)).await;
    }
    Err(format!("could not start a session: {last}"))
}

async fn try_initialize(
    ep: &Endpoints,
    rng: &mut Xorshift64,
    body: &Value,
) -> Result<String, String> {
    let resp = ep
        .http
        .post(ep.pick(rng))
        .header("accept", "application/json, text/event-stream")
        .json(body)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!("initialize: HTTP {}", resp.status()));
    }
    let sid = resp
        .headers()
        .get(h::MCP_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .ok_or("initialize answered without a session id")?
        .to_owned();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    // A JSON body, or an SSE body whose data line holds the answer.
    let answered = text
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|v| v.get("result").is_some());
    if !answered {
        return Err(format!("initialize: no result in {text:?}"));
    }
    let r = ep
        .post(
            rng,
            &sid,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !r.status().is_success() {
        return Err(format!("notifications/initialized: HTTP {}", r.status()));
    }
    Ok(sid)
}

/// Whether a process runs (a zombie waiting for its parent does not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Waits until no instance is frozen, then up to `settle` for at most one
/// of the processes that answered for the session to run; says how many
/// still do if more than one.
async fn settle(shared: &Shared, ticks: &[(u32, u64)]) -> Option<String> {
    let mut pids: Vec<u32> = ticks.iter().map(|t| t.0).collect();
    pids.sort_unstable();
    pids.dedup();
    while shared.frozen.load(Ordering::SeqCst) > 0 {
        sleep(Duration::from_millis(200)).await;
    }
    let step = Duration::from_millis(200);
    let mut until = Instant::now() + shared.settle;
    loop {
        let live: Vec<u32> = pids.iter().copied().filter(|p| running(*p)).collect();
        if live.len() <= 1 {
            return None;
        }
        if Instant::now() >= until {
            return Some(format!("processes {live:?} all still serve one session"));
        }
        // Time frozen does not count: a frozen owner cannot stop its child.
        if shared.frozen.load(Ordering::SeqCst) > 0 {
            until += step;
        }
        sleep(step).await;
    }
}

/// Ends the session (`DELETE`), best effort: its child is then stopped.
async fn end(ep: &Endpoints, rng: &mut Xorshift64, sid: &str) {
    let _ = ep
        .http
        .delete(ep.pick(rng))
        .header(h::MCP_SESSION_ID, sid)
        .header(h::MCP_PROTOCOL_VERSION, PROTOCOL)
        .timeout(Duration::from_secs(10))
        .send()
        .await;
}
