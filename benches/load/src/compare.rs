//! The `compare` subcommand: workloads (a)-(e) of issue 8 against
//! `mcp-resume serve` and, unless `--ours-only`, both official SDK servers.

use std::path::PathBuf;
use std::time::Duration;

use crate::{emit, root, servers, workloads, ws, Row};

/// Runs every workload against each server in turn; the table to `out` too.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    duration: u64,
    conns: usize,
    events: usize,
    sessions: usize,
    ws_conns: usize,
    ours_only: bool,
    h2: bool,
    out: Option<PathBuf>,
) {
    let root = root();
    let bin = servers::our_binary();
    let mut rows = Vec::new();
    let mut starters: Vec<Box<dyn Fn() -> servers::Server>> =
        vec![Box::new(|| servers::ours(&bin, &[]))];
    if !ours_only {
        starters.push(Box::new(|| servers::node(&root)));
        starters.push(Box::new(|| servers::python(&root)));
    }
    let mut ws_rss = None;
    let mut h2_rss = None;
    for start in &starters {
        let server = start();
        eprintln!("== {} at {}", server.name, server.url);
        let rps = workloads::echo_rps(&server.url, conns, Duration::from_secs(duration)).await;
        eprintln!("   (a) {rps:.0} tools/call per s");
        let d = workloads::delivery(&server.url, events).await;
        eprintln!(
            "   (b) {:.0} notifications/s ({} of {events}); (c) resume {:.1} ms, {} events",
            d.per_sec, d.delivered, d.resume_ms, d.resumed
        );
        let rss = workloads::rss_per_idle_session(&server, sessions, false).await;
        eprintln!("   (d) {rss:.0} bytes per idle session");
        if server.name == "mcp-resume" && h2 {
            let r = workloads::rss_per_idle_session(&server, sessions, true).await;
            eprintln!("   (d, HTTP/2) {r:.0} bytes per idle session");
            h2_rss = Some(r);
        }
        if server.name == "mcp-resume" && ws_conns > 0 {
            let r = ws::rss_per_idle_ws(&server, ws_conns).await;
            eprintln!("   (e) {r:.0} bytes per idle WebSocket");
            ws_rss = Some(r);
        }
        rows.push(Row {
            name: server.name,
            rps,
            notif: d.per_sec,
            delivered: d.delivered,
            resume_ms: d.resume_ms,
            resume_ok: if d.resumed == 0 {
                "NOTHING REPLAYED".into()
            } else {
                format!(
                    "{}{}",
                    if d.resume_complete {
                        "complete"
                    } else {
                        "INCOMPLETE"
                    },
                    if d.resume_in_order {
                        ", in order"
                    } else {
                        ", OUT OF ORDER"
                    }
                )
            },
            rss_session: rss,
        });
    }
    let mut md = String::new();
    emit(&mut md, format!("conns {conns}, {duration} s; {events} notifications; {sessions} idle sessions; {ws_conns} idle WebSockets; loopback, disk log on"));
    emit(&mut md, String::new());
    emit(&mut md, "| server | (a) tools/call/s | (b) notifications/s | (c) resume from event 1 | (c) replay | (d) RSS/idle session |".into());
    emit(&mut md, "| --- | --- | --- | --- | --- | --- |".into());
    for r in &rows {
        emit(
            &mut md,
            format!(
                "| {} | {:.0} | {:.0} ({} delivered) | {:.1} ms | {} | {:.1} KiB |",
                r.name,
                r.rps,
                r.notif,
                r.delivered,
                r.resume_ms,
                r.resume_ok,
                r.rss_session / 1024.0
            ),
        );
    }
    if rows.len() > 1 {
        let ours = &rows[0];
        let peers = &rows[1..];
        let best = |f: &dyn Fn(&Row) -> f64, higher: bool| {
            peers
                .iter()
                .map(f)
                .fold(if higher { 0.0 } else { f64::INFINITY }, |a, b| {
                    if higher {
                        a.max(b)
                    } else {
                        a.min(b)
                    }
                })
        };
        let complete_peers: Vec<&Row> = peers
            .iter()
            .filter(|r| r.resume_ok == "complete, in order")
            .collect();
        let best_resume = complete_peers
            .iter()
            .map(|r| r.resume_ms)
            .fold(f64::INFINITY, f64::min);
        emit(
            &mut md,
            format!(
                "| ratio vs better peer | {:.1}x | {:.1}x | {} | | {:.2}x the memory |",
                ours.rps / best(&|r| r.rps, true),
                ours.notif / best(&|r| r.notif, true),
                if best_resume.is_finite() {
                    format!("{:.1}x faster", best_resume / ours.resume_ms)
                } else {
                    "no peer replayed completely and in order".into()
                },
                ours.rss_session / best(&|r| r.rss_session, false),
            ),
        );
    }
    if let Some(r) = h2_rss {
        emit(&mut md, String::new());
        emit(&mut md, format!("(d) mcp-resume over HTTP/2 (h2c, 100 sessions' GET streams per connection): {:.1} KiB RSS per idle session", r / 1024.0));
    }
    if let Some(r) = ws_rss {
        emit(&mut md, String::new());
        emit(&mut md, format!("(e) mcp-resume: {:.1} KiB RSS per idle upgraded WebSocket ({ws_conns} connections); Centrifugo publishes 27 KB default, 11.6 KB tuned", r / 1024.0));
    }
    if let Some(p) = out {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        std::fs::write(&p, md).expect("write --out");
    }
}
