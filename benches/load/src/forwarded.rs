//! Between two gateways on one Redis: a `tools/call` forwarded from the
//! instance the client talks to (B) to the one that runs the session's child
//! (A), and what idle sessions cost Redis, for this build and, with
//! `--baseline`, a previous release's `mcp-resume`, in alternating rounds.
//! The child is the Python SDK stdio server of the gateway tests (its `add`
//! tool); calls are sequential, so the numbers are latencies.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::gateway::{add, post, session};
use crate::{emit, pct, servers};

/// One build's numbers in one round.
struct Measured {
    lat: Vec<f64>,
    /// Redis commands in the median idle second.
    idle_median: f64,
    /// Redis commands per idle second on average, maintenance passes included.
    idle_mean: f64,
}

/// One `add` call; its answer comes as JSON, or (forwarded to the owner)
/// as the call's request stream, which ends with the response.
async fn call(http: &reqwest::Client, url: &str, sid: &str, i: u64) {
    let r = post(http, url, Some(sid), add(i)).await;
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let body = r.text().await.unwrap();
    let v: Value = if sse {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&body).unwrap_or(Value::Null)
    };
    assert_eq!(v["result"]["structuredContent"]["result"], i + 1, "{v}");
}

/// Two gateways of `bin` on a Redis of their own: `calls` forwarded calls,
/// then `idle` more sessions owned by A and the Redis commands/s of the
/// whole idle fleet.
async fn once(bin: &Path, child: &[&str], calls: usize, idle: usize) -> Measured {
    let redis = mcp_resume_testkit::RedisServer::start();
    let cap = (idle + 8).to_string();
    let extra = [
        "--store",
        redis.url.as_str(),
        "--max-children",
        cap.as_str(),
    ];
    let a = servers::gateway(bin, &extra, child);
    let b = servers::gateway(bin, &extra, child);
    let http = reqwest::Client::new();
    let sid = session(&http, &a.url).await;
    call(&http, &a.url, &sid, 0).await; // A starts the child: A owns it
    let mut lat = Vec::with_capacity(calls);
    for i in 0..calls + 20 {
        let started = Instant::now();
        call(&http, &b.url, &sid, i as u64).await;
        if i >= 20 {
            lat.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for _ in 0..idle {
        let s = session(&http, &a.url).await;
        call(&http, &a.url, &s, 1).await;
    }
    // 40 one-second samples: the median is the steady cost; the mean also
    // counts the maintenance passes (every 30 s per instance) that fall in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seconds: Vec<f64> = redis
        .commands_per_second(40)
        .into_iter()
        .map(|n| n as f64)
        .collect();
    let idle_mean = seconds.iter().sum::<f64>() / seconds.len() as f64;
    Measured {
        lat,
        idle_median: pct(&seconds, 0.5),
        idle_mean,
    }
}

/// The `forwarded` subcommand.
pub async fn run(
    root: &Path,
    baseline: Option<PathBuf>,
    rounds: usize,
    calls: usize,
    idle: usize,
    lean_child: bool,
    out: Option<PathBuf>,
) {
    let (child, about) = if lean_child {
        let me = std::env::current_exe().expect("this executable");
        (
            [me.display().to_string(), "stdio-child".into()],
            "`mcp-resume-load stdio-child` (a minimal stdio MCP server)",
        )
    } else {
        let python = root.join("interop/python/.venv/bin/python");
        let script = root.join("interop/python/stdio_server.py");
        assert!(
            python.exists(),
            "the Python SDK is not installed: run scripts/test's setup (interop/python/.venv)"
        );
        (
            [python.display().to_string(), script.display().to_string()],
            "the Python SDK stdio server",
        )
    };
    let child = child.each_ref().map(String::as_str);
    let mut builds = vec![("this build", servers::our_binary())];
    if let Some(b) = baseline {
        builds.push(("baseline", b));
    }
    let mut text = String::new();
    emit(
        &mut text,
        format!("Two gateways on one Redis, {about} behind them; {calls} sequential `tools/call add` through B, forwarded to A; then {idle} more idle sessions owned by A.\n"),
    );
    emit(
        &mut text,
        "| round | build | forwarded p50 ms | p99 ms | max ms | idle Redis commands/s, median second | mean, maintenance passes included |".into(),
    );
    emit(
        &mut text,
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |".into(),
    );
    let mut all: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); builds.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..builds.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (name, bin) = &builds[i];
            let m = once(bin, &child, calls, idle).await;
            emit(
                &mut text,
                format!(
                    "| {} | {name} | {:.3} | {:.3} | {:.3} | {:.1} | {:.1} |",
                    round + 1,
                    pct(&m.lat, 0.5),
                    pct(&m.lat, 0.99),
                    pct(&m.lat, 1.0),
                    m.idle_median,
                    m.idle_mean
                ),
            );
            all[i].0.extend(m.lat);
            all[i].1.push(m.idle_median);
        }
    }
    if all.len() == 2 {
        let (new, old) = (&all[0], &all[1]);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        emit(
            &mut text,
            format!(
                "\nthis build / baseline, all rounds: forwarded p50 {:.3}x ({:.3} vs {:.3} ms), p99 {:.3}x; idle Redis commands/s (median second) {:.1} vs {:.1}",
                pct(&new.0, 0.5) / pct(&old.0, 0.5),
                pct(&new.0, 0.5),
                pct(&old.0, 0.5),
                pct(&new.0, 0.99) / pct(&old.0, 0.99),
                mean(&new.1),
                mean(&old.1)
            ),
        );
    }
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}
