//! Resumable task event streams (SEP-2694) on the `conformance` example
//! (disk log): events/s to one streaming client (`McpClient::stream_task`)
//! while the task emits as fast as it can, and the latency from
//! `DurableTaskContext::event` to the client at a paced rate (the event's
//! `t_us` against the client's clock: one machine, one clock).

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use mcp_resume_client::McpClient;
use serde_json::json;

/// Starts `stream_events {count, interval_ms}` as a task; its id.
async fn start(url: &str, count: u64, interval_ms: u64) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "stream_events", "arguments": {"count": count, "interval_ms": interval_ms},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "1"}}}});
    let v: serde_json::Value = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "stream_events")
        .body(body.to_string())
        .send()
        .await
        .expect("tools/call")
        .json()
        .await
        .expect("a JSON answer");
    v["result"]["taskId"].as_str().expect("a task").to_owned()
}

/// Reads the task's whole stream: (events, seconds from the first event
/// to the end, latencies in ms of the emitted ones).
async fn read(url: &str, task: &str) -> (u64, f64, Vec<f64>) {
    let mut stream = McpClient::new(url)
        .stream_task(task, None)
        .await
        .expect("tasks/stream");
    let mut n = 0;
    let mut first = None;
    let mut lat = Vec::new();
    while let Some(e) = stream.next().await.expect("an unbroken stream") {
        first.get_or_insert_with(Instant::now);
        n += 1;
        if let Some(t) = e.payload["t_us"].as_u64() {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64;
            lat.push(now.saturating_sub(t) as f64 / 1000.0);
        }
    }
    (n, first.map_or(0.0, |f| f.elapsed().as_secs_f64()), lat)
}

/// The `task-events` subcommand.
pub async fn run(events: u64, paced: u64, rounds: usize, out: Option<std::path::PathBuf>) {
    let server = crate::servers::conformance_example();
    let (mut rates, mut p50s, mut p99s) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let task = start(&server.url, events, 0).await;
        let (n, secs, _) = read(&server.url, &task).await;
        assert_eq!(
            n,
            events + 2,
            "every event once (the start, {events}, the end)"
        );
        rates.push(n as f64 / secs);
        let task = start(&server.url, paced, 1).await;
        let (_, _, lat) = read(&server.url, &task).await;
        p50s.push(crate::pct(&lat, 0.5));
        p99s.push(crate::pct(&lat, 0.99));
        eprintln!(
            "round {round}: {:.0} events/s; paced p50 {:.2} ms, p99 {:.2} ms",
            rates.last().unwrap(),
            p50s.last().unwrap(),
            p99s.last().unwrap()
        );
    }
    let med = |v: &[f64]| crate::pct(v, 0.5);
    let text = format!(
        "| task events (`conformance` example, disk log, one `tasks/stream` reader; median of {rounds}) | |\n| --- | ---: |\n\
         | events/s, {events} emitted as fast as the work can | {:.0} |\n\
         | `event()` to client, p50, {paced} events 1 ms apart | {:.2} ms |\n\
         | `event()` to client, p99 | {:.2} ms |\n",
        med(&rates),
        med(&p50s),
        med(&p99s)
    );
    print!("{text}");
    if let Some(p) = out {
        std::fs::write(&p, text).unwrap();
    }
}
