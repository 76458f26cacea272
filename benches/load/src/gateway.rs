//! What `mcp-resume gateway` costs: a `tools/call` through the gateway (HTTP,
//! the session's route, the child's stdio) against the same stdio server
//! driven directly over its stdin and stdout, and the gateway's own memory per
//! session (its children are processes of their own, not counted).
//!
//! The server is the Python SDK stdio server of the gateway tests
//! (`interop/python/stdio_server.py`, its `add` tool), or with `--child
//! lean` this tool's own `stdio-child` (the same `add`, answered in
//! microseconds, so the child's own noise does not hide the gateway's);
//! calls are sequential, so the numbers are latencies, not throughput.
//!
//! A third row is the floor of any HTTP transport: the same client, the same
//! sequential POSTs, answered by the bare hyper server (`bare-server`: one
//! loopback round trip, the body parsed and answered, nothing behind it).
//! What the gateway adds above that floor is what its own layers cost.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{pct, servers};

/// Latencies (ms) of `calls` sequential `tools/call add` over the child's own stdio.
pub async fn direct(command: &[String], calls: usize) -> Vec<f64> {
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the stdio server {command:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut rpc = async |m: Value, wait: bool| {
        let mut line = m.to_string().into_bytes();
        line.push(b'\n');
        stdin.write_all(&line).await.unwrap();
        stdin.flush().await.unwrap();
        if !wait {
            return Value::Null;
        }
        loop {
            let l = lines
                .next_line()
                .await
                .unwrap()
                .expect("the server closed stdout");
            let v: Value = serde_json::from_str(&l).unwrap_or(Value::Null);
            if v.get("id") == m.get("id") {
                return v;
            }
        }
    };
    rpc(init_message(), true).await;
    rpc(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        false,
    )
    .await;
    let mut lat = Vec::with_capacity(calls);
    for i in 0..calls + 20 {
        let started = Instant::now();
        let v = rpc(add(i as u64), true).await;
        assert_eq!(
            v["result"]["structuredContent"]["result"],
            i as u64 + 1,
            "{v}"
        );
        if i >= 20 {
            lat.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    lat
}

pub(crate) fn init_message() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "load", "version": "0"}}})
}

pub(crate) fn add(i: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": i, "b": 1}}})
}

pub(crate) async fn post(
    http: &reqwest::Client,
    url: &str,
    sid: Option<&str>,
    m: Value,
) -> reqwest::Response {
    let mut rb = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = sid {
        rb = rb.header("mcp-session-id", s);
    }
    let r = rb
        .body(m.to_string())
        .send()
        .await
        .expect("POST to the gateway");
    assert!(r.status().is_success(), "{}", r.status());
    r
}

/// A session on the gateway, its child started and initialized.
pub(crate) async fn session(http: &reqwest::Client, url: &str) -> String {
    let r = post(http, url, None, init_message()).await;
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    post(
        http,
        url,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    sid
}

/// The gateway's numbers: call latencies (ms) and KiB of RSS per session.
pub struct Gateway {
    pub lat: Vec<f64>,
    pub kib_per_session: f64,
    pub sessions: usize,
}

/// Latencies (ms) of `calls` sequential POSTs of the same `tools/call`,
/// with the same client, to the bare hyper server: one HTTP round trip and
/// nothing behind it, the floor under any HTTP transport's figure.
pub async fn floor(calls: usize) -> Vec<f64> {
    let bare = servers::bare();
    let http = reqwest::Client::new();
    let sid = session(&http, &bare.url).await;
    // The bare server answers with the request's id and no tool.
    timed_calls(&http, &bare.url, &sid, calls, |i, v| {
        assert_eq!(v["id"], i + 1, "{v}")
    })
    .await
}

/// Latencies (ms) of `calls` sequential `tools/call add` on session `sid`
/// at `url` (after 20 unmeasured), each answer checked by `check`.
async fn timed_calls(
    http: &reqwest::Client,
    url: &str,
    sid: &str,
    calls: usize,
    check: impl Fn(u64, &Value),
) -> Vec<f64> {
    let mut lat = Vec::with_capacity(calls);
    for i in 0..calls as u64 + 20 {
        let started = Instant::now();
        let v: Value = post(http, url, Some(sid), add(i))
            .await
            .json()
            .await
            .unwrap();
        check(i, &v);
        if i >= 20 {
            lat.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    lat
}

/// Runs the gateway in front of the stdio server `command`: `calls`
/// sequential calls on one session, then `sessions` more sessions for the
/// memory per session.
pub async fn through(command: &[String], calls: usize, sessions: usize) -> Gateway {
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    let gw = servers::gateway(
        &servers::our_binary(),
        &["--max-children", &(sessions + 8).to_string()],
        &command,
    );
    let http = reqwest::Client::new();
    let sid = session(&http, &gw.url).await;
    let lat = timed_calls(&http, &gw.url, &sid, calls, |i, v| {
        assert_eq!(v["result"]["structuredContent"]["result"], i + 1, "{v}")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = gw.rss_kib();
    let mut ids = Vec::new();
    for _ in 0..sessions {
        let s = session(&http, &gw.url).await;
        let v: Value = post(&http, &gw.url, Some(&s), add(1))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(v["result"]["structuredContent"]["result"], 2, "{v}");
        // Each session holds a GET stream open, as an idle client does
        // (the measure of issue 24 item 4): the stream's response is kept,
        // unread, for as long as the memory is measured.
        let stream = http
            .get(&gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &s)
            .send()
            .await
            .expect("GET stream");
        assert!(stream.status().is_success(), "{}", stream.status());
        ids.push((s, stream));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = gw.rss_kib();
    Gateway {
        lat,
        kib_per_session: (after.saturating_sub(before)) as f64 / sessions.max(1) as f64,
        sessions,
    }
}

/// The table: latency through the gateway, directly, and the HTTP floor,
/// with what the gateway adds over the child's stdio and over the floor.
pub fn table(child: &str, direct: &[f64], floor: &[f64], gw: &Gateway) -> String {
    let row = |name: &str, v: &[f64]| {
        format!(
            "| {name} | {} | {:.3} | {:.3} | {:.3} |\n",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.99),
            pct(v, 1.0)
        )
    };
    let added = pct(&gw.lat, 0.5) - pct(direct, 0.5);
    let http = pct(floor, 0.5);
    format!(
        "| tools/call `add`, sequential ({child} child) | calls | p50 ms | p99 ms | max ms |\n| --- | ---: | ---: | ---: | ---: |\n{}{}{}\n\
         gateway/direct: p50 {:.2}x, p99 {:.2}x (the gateway adds {:.3} ms at p50)\n\n\
         of which one HTTP round trip with this client (bare hyper) is {:.3} ms: \
         the gateway's own layers add {:.3} ms at p50\n\n\
         gateway RSS per session with a GET stream open (child not counted): {:.1} KiB over {} sessions\n",
        row("the stdio server's own stdin/stdout", direct),
        row("the same client to bare hyper (the HTTP floor, no child)", floor),
        row("through `mcp-resume gateway` (disk log)", &gw.lat),
        pct(&gw.lat, 0.5) / pct(direct, 0.5),
        pct(&gw.lat, 0.99) / pct(direct, 0.99),
        added,
        http,
        added - http,
        gw.kib_per_session,
        gw.sessions
    )
}

/// The `gateway` subcommand: the three measurements with `child` (`python`:
/// the Python SDK stdio server of the repository at `root`; `lean`: this
/// tool's `stdio-child`), printed and written to `out`.
pub async fn run(
    root: &Path,
    child: &str,
    calls: usize,
    sessions: usize,
    out: Option<std::path::PathBuf>,
) {
    let command = match child {
        "lean" => vec![
            std::env::current_exe()
                .expect("this tool's path")
                .display()
                .to_string(),
            "stdio-child".to_owned(),
        ],
        _ => {
            let python = root.join("interop/python/.venv/bin/python");
            assert!(
                python.exists(),
                "the Python SDK is not installed: run scripts/test's setup (interop/python/.venv)"
            );
            let script = root.join("interop/python/stdio_server.py");
            vec![python.display().to_string(), script.display().to_string()]
        }
    };
    let direct = direct(&command, calls).await;
    let floor = floor(calls).await;
    let through = through(&command, calls, sessions).await;
    let text = table(child, &direct, &floor, &through);
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}
