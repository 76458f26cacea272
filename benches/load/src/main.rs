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

mod balancer;
mod bare;
mod baseline;
mod caller;
mod compare;
mod cross;
mod forwarded;
mod gateway;
mod hosted;
mod paths;
mod scale;
mod servers;
mod stateless;
mod stdio_child;
mod task_events;
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
    /// alternating in one run: tools/call round trips/s (a), notifications/s
    /// to one SSE reader (b) and RSS per idle session with a GET stream (c),
    /// with the ratio this/baseline.
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
        /// Idle sessions, each with a GET stream, for RSS per session (c); 0 skips it.
        #[arg(long, default_value_t = 1_000)]
        idle_sessions: usize,
        /// Extra arguments for both servers' `serve` (e.g. `--bearer-token x`), space-separated.
        #[arg(long, default_value = "")]
        serve_args: String,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The gateway's cost: tools/call latency through `mcp-resume gateway`
    /// against the same stdio server driven directly, and the gateway's
    /// memory per session (the Python SDK stdio server of the gateway tests),
    /// beside the same client's round trip to bare hyper (the HTTP floor).
    Gateway {
        /// The stdio server: `python` (the Python SDK's, as users run) or
        /// `lean` (this tool's `stdio-child`, whose own time is negligible).
        #[arg(long, default_value = "python", value_parser = ["python", "lean"])]
        child: String,
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
    /// Two gateways on one Redis: a call forwarded to the session's owner
    /// (p50, p99) and the Redis commands/s of idle sessions, this build
    /// against `--baseline` (a previous release's mcp-resume) alternating.
    Forwarded {
        /// A previous release's `mcp-resume` binary to compare with.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Rounds; each runs every build once, alternating the order.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Sequential forwarded calls per run.
        #[arg(long, default_value_t = 500)]
        calls: usize,
        /// Idle sessions (each with its child) for the Redis commands/s.
        #[arg(long, default_value_t = 100)]
        idle: usize,
        /// The child behind the gateways: this tool's own `stdio-child` (a
        /// few MiB each, for a thousand idle sessions) instead of the
        /// Python SDK stdio server.
        #[arg(long)]
        lean_child: bool,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The leanest MCP server over stdio (`initialize`, `ping`,
    /// `tools/list`, `tools/call add`), for the gateway benchmarks to run
    /// by the thousand; not a benchmark itself.
    StdioChild,
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
        /// Instead: stateless calls directly to the example against the same
        /// through `mcp-resume gateway --upstream` in front of it.
        #[arg(long)]
        gateway: bool,
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
    /// Resumable task event streams (SEP-2694) on the `conformance` example
    /// (disk log): events/s to one `tasks/stream` reader, and the latency
    /// from the work's `event()` to the client at a paced rate.
    TaskEvents {
        /// Events of the throughput run.
        #[arg(long, default_value_t = 100_000)]
        events: u64,
        /// Events of the latency run (1 ms apart).
        #[arg(long, default_value_t = 2_000)]
        paced: u64,
        /// Rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Many live sessions on `serve`, each with an open GET stream (HTTP/2,
    /// 100 per connection), then events at a steady rate to random sessions:
    /// every event delivered to its reader exactly once (the last line names
    /// `lost` and `duplicates`), with RSS per session, delivery latency, CPU
    /// per 1,000 events, Redis memory and commands/s, maintenance pass time.
    Scale(scale::Args),
    /// What the balancer of a fleet adds: `mcp-resume fleet` (HAProxy from
    /// deploy/haproxy.cfg in front of instances on one Redis) answering echo
    /// through the balancer and directly, rounds alternating.
    Balancer {
        /// Instances behind the balancer.
        #[arg(long, default_value_t = 2)]
        instances: usize,
        /// Connections (each a session of its own).
        #[arg(long, default_value_t = 32)]
        conns: usize,
        /// Seconds of each measurement.
        #[arg(long, default_value_t = 5)]
        secs: u64,
        /// Rounds, the order alternating.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Append the table to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Every deployed path side by side with the same client (bare hyper,
    /// the TypeScript SDK, rmcp alone, native `serve`, rmcp hosted, rmcp on
    /// our stores): echo/s and p50, notifications/s, idle KiB per session,
    /// and issue 24's goals judged from the medians.
    Paths(paths::Args),
    /// The ceiling `paths` measures against: bare hyper + serde_json
    /// answering echo on a free port; not a benchmark itself.
    BareServer,
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

fn main() {
    let cli = Cli::parse();
    // The child runs by the thousand: no async runtime, no threads.
    if let Cmd::StdioChild = cli.cmd {
        return stdio_child::run();
    }
    tokio::runtime::Runtime::new()
        .expect("an async runtime")
        .block_on(run(cli));
}

async fn run(cli: Cli) {
    match cli.cmd {
        Cmd::StdioChild => unreachable!("served before the runtime starts"),
        Cmd::TaskEvents {
            events,
            paced,
            rounds,
            out,
        } => task_events::run(events, paced, rounds, out).await,
        Cmd::Scale(args) => scale::run(args).await,
        Cmd::Balancer {
            instances,
            conns,
            secs,
            rounds,
            out,
        } => balancer::run(instances, conns, secs, rounds, out).await,
        Cmd::Paths(args) => paths::run(args).await,
        Cmd::BareServer => bare::run().await,
        Cmd::Stateless {
            rounds,
            duration,
            conns,
            gateway: true,
            out,
        } => stateless::run_gateway(rounds, Duration::from_secs(duration), conns, out).await,
        Cmd::Stateless {
            rounds,
            duration,
            conns,
            gateway: false,
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
            child,
            calls,
            sessions,
            out,
        } => gateway::run(&root(), &child, calls, sessions, out).await,
        Cmd::Forwarded {
            baseline,
            rounds,
            calls,
            idle,
            lean_child,
            out,
        } => forwarded::run(&root(), baseline, rounds, calls, idle, lean_child, out).await,
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
            idle_sessions,
            serve_args,
            out,
        } => {
            let w = baseline::Workloads {
                rounds,
                duration,
                conns,
                events,
                idle_sessions,
            };
            baseline::run(baseline_bin, w, serve_args, out).await
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
            compare::run(
                duration, conns, events, sessions, ws_conns, ours_only, h2, out,
            )
            .await
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
