//! MCP 2026-07-28's stateless `tools/call` beside the 2025 session path, on
//! one server in the same run: the `conformance` example (an rmcp handler on
//! mcp-resume's transport, the disk log), which serves both eras at one URL.
//!
//! The session path is mcp-resume's own: a session record in the log, its
//! route and backend kept per session, the call answered as JSON. The
//! stateless path hands each request whole to rmcp's stateless service: a
//! handler per request, nothing logged. Rounds alternate the order.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::workloads::session;

/// `tools/call test_simple_text` round trips/s over `conns` connections,
/// each with a 2025 session of its own.
pub async fn session_rps(url: &str, conns: usize, duration: Duration) -> f64 {
    let mut sessions = Vec::new();
    for _ in 0..conns {
        sessions.push(session(url).await);
    }
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let start = Instant::now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .map(|s| {
            let done = done.clone();
            tokio::spawn(async move {
                let mut i = 1;
                while Instant::now() < deadline {
                    let body = s.call(i, "test_simple_text", json!({})).await;
                    if body.contains("simple text response") {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// The same calls without a session: each carries the 2026-07-28 `_meta`
/// and headers.
pub async fn stateless_rps(url: &str, conns: usize, duration: Duration) -> f64 {
    stateless_calls(url, conns, duration).await.0
}

/// [`stateless_rps`] with each call's latency: (round trips/s, p50 ms, p99 ms).
pub async fn stateless_calls(url: &str, conns: usize, duration: Duration) -> (f64, f64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let start = Instant::now();
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let done = done.clone();
            let url = url.to_owned();
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .pool_max_idle_per_host(1)
                    .build()
                    .unwrap();
                let mut took = Vec::new();
                let mut i = 1u64;
                while Instant::now() < deadline {
                    let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                    "name": "test_simple_text", "arguments": {},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "1"}
                    }}});
                    let t0 = Instant::now();
                    let resp = http
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("accept", "application/json, text/event-stream")
                        .header("mcp-protocol-version", "2026-07-28")
                        .header("mcp-method", "tools/call")
                        .header("mcp-name", "test_simple_text")
                        .body(body.to_string())
                        .send()
                        .await;
                    if let Ok(r) = resp {
                        if r.text()
                            .await
                            .is_ok_and(|t| t.contains("simple text response"))
                        {
                            done.fetch_add(1, Ordering::Relaxed);
                            took.push(t0.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                    i += 1;
                }
                took
            })
        })
        .collect();
    let mut took = Vec::new();
    for t in tasks {
        took.extend(t.await.unwrap_or_default());
    }
    let rps = done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    assert!(!took.is_empty(), "no stateless call to {url} was answered");
    (rps, crate::pct(&took, 0.5), crate::pct(&took, 0.99))
}

/// The `stateless --gateway` run: stateless calls to the `conformance`
/// example directly and through `mcp-resume gateway --upstream` in front of
/// it, `rounds` times in alternating order; medians of round trips/s, p50
/// and p99.
pub async fn run_gateway(
    rounds: usize,
    duration: Duration,
    conns: usize,
    out: Option<std::path::PathBuf>,
) {
    let upstream = crate::servers::conformance_example();
    let gw = crate::servers::upstream_gateway(&crate::servers::our_binary(), &upstream.url);
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for direct_first in [round % 2 == 0, round % 2 != 0] {
            if direct_first {
                direct.push(stateless_calls(&upstream.url, conns, duration).await);
            } else {
                through.push(stateless_calls(&gw.url, conns, duration).await);
            }
        }
        let (d, t) = (direct.last().unwrap(), through.last().unwrap());
        eprintln!(
            "round {round}: direct {:.0}/s p50 {:.2} ms, through the gateway {:.0}/s p50 {:.2} ms",
            d.0, d.1, t.0, t.1
        );
    }
    let med = |v: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| {
        crate::pct(&v.iter().map(f).collect::<Vec<_>>(), 0.5)
    };
    let row = |name: &str, v: &[(f64, f64, f64)]| {
        format!(
            "| {name} | {:.0} | {:.2} | {:.2} |\n",
            med(v, |x| x.0),
            med(v, |x| x.1),
            med(v, |x| x.2)
        )
    };
    let text = format!(
        "| stateless tools/call `test_simple_text` ({conns} connections, {} s, median of {rounds}) | round trips/s | p50 ms | p99 ms |\n| --- | ---: | ---: | ---: |\n{}{}\n\
         through/direct: throughput {:.3}, p50 {:.2}x\n",
        duration.as_secs(),
        row("directly to the `conformance` example", &direct),
        row("through `mcp-resume gateway --upstream` (disk log)", &through),
        med(&through, |x| x.0) / med(&direct, |x| x.0),
        med(&through, |x| x.1) / med(&direct, |x| x.1),
    );
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}

/// The `stateless` subcommand: both paths on one `conformance` example,
/// `rounds` times in alternating order; prints (and writes to `out`) the
/// medians and their ratio.
pub async fn run(rounds: usize, duration: Duration, conns: usize, out: Option<std::path::PathBuf>) {
    let server = crate::servers::conformance_example();
    let (mut sess, mut free) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for session_first in [round % 2 == 0, round % 2 != 0] {
            if session_first {
                sess.push(session_rps(&server.url, conns, duration).await);
            } else {
                free.push(stateless_rps(&server.url, conns, duration).await);
            }
        }
        eprintln!(
            "round {round}: session {:.0}/s, stateless {:.0}/s",
            sess.last().unwrap(),
            free.last().unwrap()
        );
    }
    let med = |v: &[f64]| crate::pct(v, 0.5);
    let text = format!(
        "| tools/call `test_simple_text` ({conns} connections, {} s, median of {rounds}) | round trips/s |\n| --- | ---: |\n\
         | 2025-11-25 session (mcp-resume's route) | {:.0} |\n\
         | 2026-07-28 stateless (a handler of its own per request) | {:.0} |\n\n\
         stateless/session: {:.3}\n",
        duration.as_secs(),
        med(&sess),
        med(&free),
        med(&free) / med(&sess)
    );
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}
