//! MCP 2026-07-28's stateless `tools/call` beside the 2025 session path, on
//! one server in the same run: the `conformance` example (an rmcp handler on
//! mcp-resume's transport, the disk log), which serves both eras at one URL.
//!
//! The session path is mcp-resume's own: a session record in the log, its
//! route and backend kept per session, the call answered as JSON. The
//! stateless path hands each request whole to rmcp's stateless service: a
//! handler per request, nothing logged. Rounds alternate the order.

use std::time::Duration;

use crate::caller::{all_round_trips, in_new_sessions, Caller};

/// What a call of `test_simple_text` answers.
const ANSWER: &[u8] = b"simple text response";

/// `tools/call test_simple_text` round trips/s over `conns` connections,
/// each with a 2025 session of its own (opened with `reqwest`, called
/// through a [`Caller`], as the stateless calls are).
pub async fn session_rps(url: &str, conns: usize, duration: Duration) -> f64 {
    let callers = in_new_sessions(url, conns).await;
    let body = |i| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"test_simple_text","arguments":{{}}}}}}"#
        )
    };
    let label = format!("session calls {url}");
    let (took, elapsed) = all_round_trips(&label, callers, duration, body, &[ANSWER]).await;
    took.len() as f64 / elapsed.as_secs_f64()
}

/// The same calls without a session: each carries the 2026-07-28 `_meta`
/// and headers.
pub async fn stateless_rps(url: &str, conns: usize, duration: Duration) -> f64 {
    stateless_calls(url, conns, duration).await.0
}

/// [`stateless_rps`] with each call's latency: (round trips/s, p50 ms, p99 ms).
pub async fn stateless_calls(url: &str, conns: usize, duration: Duration) -> (f64, f64, f64) {
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_simple_text"),
    ];
    let mut callers = Vec::new();
    for _ in 0..conns {
        let caller = Caller::connect(url, &headers)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e:?}"));
        callers.push(caller);
    }
    // Written as the session path's body is, so both cost the client alike.
    let body = |i| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"test_simple_text","arguments":{{}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}},"io.modelcontextprotocol/clientInfo":{{"name":"load","version":"1"}}}}}}}}"#
        )
    };
    let label = format!("stateless calls {url}");
    let (took, elapsed) = all_round_trips(&label, callers, duration, body, &[ANSWER]).await;
    let rps = took.len() as f64 / elapsed.as_secs_f64();
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
