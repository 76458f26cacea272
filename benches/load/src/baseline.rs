//! This build against a baseline binary (an older commit's `mcp-resume`),
//! alternating in one run: `tools/call` round trips/s, notifications/s to
//! one SSE reader and RSS per idle session with a GET stream, with the ratio
//! this/baseline.

use std::path::PathBuf;
use std::time::Duration;

/// What one A/B run measures, and how much.
pub struct Workloads {
    /// Rounds; each runs both binaries once, in alternating order.
    pub rounds: usize,
    /// Seconds of tools/call per run.
    pub duration: u64,
    /// Connections of tools/call.
    pub conns: usize,
    /// Notifications delivered to one SSE reader.
    pub events: usize,
    /// Idle sessions with a GET stream, for RSS per session (0: skipped).
    pub idle_sessions: usize,
}

/// Runs the alternating rounds and prints (and writes to `out`) the table.
pub async fn run(baseline_bin: PathBuf, w: Workloads, serve_args: String, out: Option<PathBuf>) {
    let Workloads {
        rounds,
        duration,
        conns,
        events,
        idle_sessions,
    } = w;
    let this = crate::servers::our_binary();
    let extra: Vec<&str> = serve_args.split_whitespace().collect();
    let mut rps = [Vec::new(), Vec::new()];
    let mut eps = [Vec::new(), Vec::new()];
    let mut rss = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let bin = if which == 0 { &this } else { &baseline_bin };
            let server = crate::servers::ours(bin, &extra);
            let r =
                crate::workloads::echo_rps(&server.url, conns, Duration::from_secs(duration)).await;
            let d = crate::workloads::delivery(&server.url, events).await;
            eprintln!(
                "round {round} {}: {r:.0} tools/call/s, {:.0} notifications/s",
                if which == 0 { "this" } else { "baseline" },
                d.per_sec
            );
            rps[which].push(r);
            eps[which].push(d.per_sec);
            if idle_sessions > 0 {
                // A server of its own: nothing the other workloads left behind.
                let idle = crate::servers::ours(bin, &extra);
                let bytes =
                    crate::workloads::rss_per_idle_session(&idle, idle_sessions, false).await;
                eprintln!(
                    "   {:.1} KiB per idle session with a GET stream",
                    bytes / 1024.0
                );
                rss[which].push(bytes / 1024.0);
            }
        }
    }
    let med = |v: &[f64]| crate::pct(v, 0.5);
    let text = format!(
        "| workload | this build | baseline | this/baseline |\n| --- | --- | --- | --- |\n\
         | tools/call round trips/s ({conns} connections, {duration} s, median of {rounds}) | {:.0} | {:.0} | {:.3} |\n\
         | notifications/s to one SSE reader ({events} events, median of {rounds}) | {:.0} | {:.0} | {:.3} |\n\
         {}\n\
         baseline: `{}`; serve args: `{serve_args}`\n",
        med(&rps[0]),
        med(&rps[1]),
        med(&rps[0]) / med(&rps[1]),
        med(&eps[0]),
        med(&eps[1]),
        med(&eps[0]) / med(&eps[1]),
        if idle_sessions > 0 {
            format!(
                "| KiB of RSS per idle session with a GET stream ({idle_sessions} sessions, median of {rounds}; lower is better) | {:.1} | {:.1} | {:.3} |\n",
                med(&rss[0]),
                med(&rss[1]),
                med(&rss[0]) / med(&rss[1]),
            )
        } else {
            String::new()
        },
        baseline_bin.display(),
    );
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}
