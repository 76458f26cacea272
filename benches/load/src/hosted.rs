//! An rmcp handler hosted on mcp-resume's transport beside the native demo
//! tools, for one or more builds, in one run: `tools/call echo` round
//! trips/s and `emit` notifications/s to one SSE reader (issue 24's first
//! rows). Each build directory holds `mcp-resume` and `rmcp_durable` (its
//! `--transport mcp-resume`); both on a disk log of their own. Rounds
//! alternate the order of the builds.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::servers::{ours, rmcp_durable};
use crate::workloads::{delivery, echo_rps};

/// Runs every row for every build; prints and returns the table.
pub async fn run(
    dirs: Vec<PathBuf>,
    rounds: usize,
    events: usize,
    duration: Duration,
    conns: usize,
    out: Option<PathBuf>,
) {
    // (build, path) -> (echo/s, notifications/s) per round
    let mut rows: Vec<(String, &str, Vec<f64>, Vec<f64>)> = Vec::new();
    for d in &dirs {
        for path in ["native", "rmcp hosted"] {
            rows.push((d.display().to_string(), path, Vec::new(), Vec::new()));
        }
    }
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let dir = PathBuf::from(&rows[i].0);
            let server = match rows[i].1 {
                "native" => ours(&dir.join("mcp-resume"), &[]),
                _ => rmcp_durable("rmcp hosted", &dir.join("rmcp_durable"), "mcp-resume"),
            };
            let rps = echo_rps(&server.url, conns, duration).await;
            let eps = delivery(&server.url, events).await.per_sec;
            eprintln!(
                "round {} {} {}: {rps:.0} echo/s, {eps:.0} notifications/s",
                round + 1,
                rows[i].0,
                rows[i].1
            );
            rows[i].2.push(rps);
            rows[i].3.push(eps);
            drop(server);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut table = format!(
        "| build | path | tools/call echo/s ({conns} connections) | notifications/s ({events} to one SSE reader) |\n| --- | --- | --- | --- |\n"
    );
    for (build, path, rps, eps) in &rows {
        let _ = writeln!(
            table,
            "| {build} | {path} | {:.0} | {:.0} |",
            mean(rps),
            mean(eps)
        );
    }
    println!("{table}");
    if let Some(out) = out {
        std::fs::write(&out, &table).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    }
}
