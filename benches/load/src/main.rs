//! `mcp-resume-load`: the benchmarks of issues 3, 4 and 8, run on this machine.
//!
//! `compare` starts `mcp-resume serve` (disk log), the official TypeScript SDK
//! server and the official Python SDK server one after another and runs the
//! same workloads against each; `upgrade` times the safe upgrade against the
//! legacy one in the same run. Build in release mode:
//!
//! ```sh
//! scripts/bench-setup && cargo build --release -p mcp-resume -p mcp-resume-load
//! ulimit -n 200000; target/release/mcp-resume-load compare --out benches/results/compare.md
//! ```

mod baseline;
mod cross;
mod gateway;
mod hosted;
mod servers;
mod stateless;
mod workloads;
mod ws;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Benchmarks: mcp-resume side by side with the official SDK servers")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Workloads (a)-(e) of issue 8 against ours and, unless --ours-only, both SDK servers.
    Compare {
        /// Seconds of (a).
        #[arg(long, default_value_t = 15)]
        duration: u64,
        /// Connections of (a).
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Notifications of (b) and (c).
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Sessions of (d).
        #[arg(long, default_value_t = 2_000)]
        sessions: usize,
        /// WebSockets of (e); 0 skips it. Each side needs one descriptor per socket,
        /// and this machine caps a process at 20,000, hence 18,000.
        #[arg(long, default_value_t = 18_000)]
        ws_conns: usize,
        /// Skip the SDK servers.
        #[arg(long)]
        ours_only: bool,
        /// Also measure (d) for ours with the GET streams multiplexed over HTTP/2 (100 per connection).
        #[arg(long)]
        h2: bool,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Delivery across instances: tools/call on instance A to the event on an SSE
    /// reader on instance B (two `serve` processes on one Redis of its own), beside
    /// the same within one instance on Redis and on the disk log.
    Cross {
        /// Probes per session.
        #[arg(long, default_value_t = 1000)]
        probes: usize,
        /// Sessions probing at once, in the loaded rows.
        #[arg(long, default_value_t = 64)]
        sessions: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// This build against a baseline binary (an older commit's `mcp-resume`),
    /// alternating in one run: tools/call round trips/s (a) and notifications/s
    /// to one SSE reader (b), with the ratio this/baseline.
    Baseline {
        /// The baseline `mcp-resume` binary.
        #[arg(long)]
        baseline_bin: PathBuf,
        /// Rounds; each runs both binaries once, in alternating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds of (a) per run.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Connections of (a).
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Notifications of (b).
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Extra arguments for both servers' `serve` (e.g. `--bearer-token x`), space-separated.
        #[arg(long, default_value = "")]
        serve_args: String,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The gateway's cost: tools/call latency through `mcp-resume gateway`
    /// against the same stdio server driven directly, and the gateway's
    /// memory per session (the Python SDK stdio server of the gateway tests).
    Gateway {
        /// Sequential calls measured on each path.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// Sessions (each with its child) for the memory per session.
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// MCP 2026-07-28's stateless tools/call beside the 2025 session path,
    /// alternating in one run, on the `conformance` example (both eras at one
    /// URL): round trips/s and the ratio stateless/session.
    Stateless {
        /// Rounds; each runs both paths once, in alternating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds per path per round.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Connections.
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// An rmcp handler hosted on mcp-resume (`rmcp_durable --transport mcp-resume`)
    /// beside the native tools, per build directory (each with `mcp-resume` and
    /// `rmcp_durable`), alternating: echo round trips/s and notifications/s.
    Hosted {
        /// Build directories, e.g. target/release/examples-and-bin copies; comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        builds: Vec<PathBuf>,
        /// Rounds; each runs every row once, alternating the order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Notifications per run.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Seconds of echo per run.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Echo connections.
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Upgrade time to first live frame, safe vs legacy; events/s over WebSocket vs SSE.
    Upgrade {
        /// Upgrades per mode.
        #[arg(long, default_value_t = 300)]
        iterations: usize,
        /// Events for the WebSocket vs SSE rate.
        #[arg(long, default_value_t = 50_000)]
        events: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

struct Row {
    name: &'static str,
    rps: f64,
    notif: f64,
    delivered: usize,
    resume_ms: f64,
    resume_ok: String,
    rss_session: f64,
}

fn emit(out: &mut String, line: String) {
    println!("{line}");
    let _ = writeln!(out, "{line}");
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Stateless {
            rounds,
            duration,
            conns,
            out,
        } => stateless::run(rounds, Duration::from_secs(duration), conns, out).await,
        Cmd::Hosted {
            builds,
            rounds,
            events,
            duration,
            conns,
            out,
        } => {
            hosted::run(
                builds,
                rounds,
                events,
                Duration::from_secs(duration),
                conns,
                out,
            )
            .await
        }
        Cmd::Gateway {
            calls,
            sessions,
            out,
        } => gateway::run(&root(), calls, sessions, out).await,
        Cmd::Cross {
            probes,
            sessions,
            out,
        } => {
            let bin = servers::our_binary();
            let redis = mcp_resume_testkit::RedisServer::start();
            let store = ["--store", redis.url.as_str()];
            let disk = servers::ours(&bin, &[]);
            let a = servers::ours(&bin, &store);
            let b = servers::ours(&bin, &store);
            let mut text = String::new();
            emit(
                &mut text,
                "| setup | sessions at once | probes | p50 ms | p99 ms | max ms |".into(),
            );
            emit(
                &mut text,
                "| --- | ---: | ---: | ---: | ---: | ---: |".into(),
            );
            for n in [1, sessions] {
                let per = if n == 1 { probes } else { (probes / 4).max(50) };
                for (name, w, r) in [
                    ("disk log, one instance", &disk.url, &disk.url),
                    ("redis, one instance", &a.url, &a.url),
                    ("redis, POST on A, reader on B", &a.url, &b.url),
                ] {
                    let lat = cross::probe(w, r, n, per).await;
                    emit(
                        &mut text,
                        format!(
                            "| {name} | {n} | {} | {:.3} | {:.3} | {:.3} |",
                            lat.len(),
                            pct(&lat, 0.5),
                            pct(&lat, 0.99),
                            pct(&lat, 1.0)
                        ),
                    );
                }
            }
            if let Some(p) = out {
                std::fs::write(&p, text).unwrap();
            }
        }
        Cmd::Baseline {
            baseline_bin,
            rounds,
            duration,
            conns,
            events,
            serve_args,
            out,
        } => {
            baseline::run(
                baseline_bin,
                rounds,
                duration,
                conns,
                events,
                serve_args,
                out,
            )
            .await
        }
        Cmd::Compare {
            duration,
            conns,
            events,
            sessions,
            ws_conns,
            ours_only,
            h2,
            out,
        } => {
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
                let rps =
                    workloads::echo_rps(&server.url, conns, Duration::from_secs(duration)).await;
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
                let best =
                    |f: &dyn Fn(&Row) -> f64, higher: bool| {
                        peers.iter().map(f).fold(
                            if higher { 0.0 } else { f64::INFINITY },
                            |a, b| if higher { a.max(b) } else { a.min(b) },
                        )
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
        Cmd::Upgrade {
            iterations,
            events,
            out,
        } => {
            let bin = servers::our_binary();
            let safe = servers::ours(&bin, &[]);
            let legacy = servers::ours(&bin, &["--unsafe-legacy-upgrade"]);
            // Interleave the two so both see the same machine conditions.
            let mut s_times = Vec::new();
            let mut l_times = Vec::new();
            for _ in 0..4 {
                s_times.extend(ws::upgrade_times(&safe.url, iterations / 4).await);
                l_times.extend(ws::upgrade_times(&legacy.url, iterations / 4).await);
            }
            let (ws_rate, sse_rate) = ws::ws_vs_sse(&safe.url, events).await;
            let mut md = String::new();
            emit(&mut md, format!("upgrade time to first live frame, {} upgrades per mode, events every 1 ms, disk log, loopback", s_times.len()));
            emit(&mut md, String::new());
            emit(&mut md, "| mode | p50 ms | p99 ms |".into());
            emit(&mut md, "| --- | --- | --- |".into());
            emit(
                &mut md,
                format!(
                    "| safe (echo + replay + gate) | {:.3} | {:.3} |",
                    pct(&s_times, 0.5),
                    pct(&s_times, 0.99)
                ),
            );
            emit(
                &mut md,
                format!(
                    "| legacy (unsafe) | {:.3} | {:.3} |",
                    pct(&l_times, 0.5),
                    pct(&l_times, 0.99)
                ),
            );
            emit(
                &mut md,
                format!(
                    "| safe - legacy | {:+.3} | {:+.3} |",
                    pct(&s_times, 0.5) - pct(&l_times, 0.5),
                    pct(&s_times, 0.99) - pct(&l_times, 0.99)
                ),
            );
            emit(&mut md, String::new());
            emit(&mut md, format!("events/s to one reader, {events} events: WebSocket {ws_rate:.0}, SSE {sse_rate:.0}"));
            if let Some(p) = out {
                if let Some(dir) = p.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                std::fs::write(&p, md).expect("write --out");
            }
        }
    }
}
