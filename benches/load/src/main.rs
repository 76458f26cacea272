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

mod affinity;
mod balancer;
mod bare;
mod baseline;
mod caller;
mod cli;
mod compare;
mod cross;
mod forwarded;
mod gateway;
mod hosted;
mod paths;
mod quota;
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

use clap::Parser;

use cli::{Cli, Cmd};

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
    // `balancer --instances-cpus`: this process (the client) and what it
    // starts run on the other CPUs, its runtime sized to them.
    let mut cpus = None;
    if let Cmd::Balancer {
        instances_cpus: Some(list),
        ..
    } = &cli.cmd
    {
        let bind = affinity::allowed()
            .and_then(|allowed| affinity::split(list, &allowed))
            .and_then(|(theirs, ours)| affinity::pin(std::process::id(), &ours).map(|()| theirs));
        cpus = Some(bind.unwrap_or_else(|e| panic!("--instances-cpus {list}: {e}")));
    }
    tokio::runtime::Runtime::new()
        .expect("an async runtime")
        .block_on(run(cli, cpus));
}

/// `cpus`: the instances' CPUs of `balancer --instances-cpus`, parsed
/// (this process already bound to the others).
async fn run(cli: Cli, cpus: Option<Vec<usize>>) {
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
            instances_cpu,
            instances_cpus: _,
            out,
        } => {
            let place = balancer::Placement {
                cores: instances_cpu,
                cpus,
            };
            balancer::run(instances, conns, secs, rounds, place, out).await
        }
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
