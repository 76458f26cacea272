//! The bounds of a task's event stream (docs/protocol.md 3.9) against what
//! a client may send: a cursor, an `after` or an ack at u64::MAX is past the
//! head (after-ahead, or 4409 on the socket), never a wrap to the start of
//! the stream or a panic; the task socket refuses a frame over the session
//! socket's limit and sends heartbeats.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use mcp_resume_log::{Log, MemoryLog};
use mcp_resume_server::demo::demo_tools;
use mcp_resume_server::tasks::{Caller, TaskContext, TaskEnd, TaskStore};
use mcp_resume_server::{McpServer, ServerConfig};
use serde_json::{json, Value};
use tokio::sync::oneshot;

async fn server_with(config: ServerConfig) -> (TestServer, TaskStore) {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::default());
    let store = TaskStore::new(log.clone());
    let server = McpServer::new(log, demo_tools(), config).with_tasks(store.clone());
    (TestServer::start_server(server, "/mcp").await, store)
}

/// A task that emits `n` events, then waits for `go`, then completes.
async fn counting(store: &TaskStore, n: u64, go: oneshot::Receiver<()>) -> String {
    let created = store
        .spawn(Caller::default(), move |ctx: TaskContext| async move {
            for i in 1..=n {
                ctx.event("com.example.count", json!({"n": i}))
                    .await
                    .unwrap();
            }
            let _ = go.await;
            TaskEnd::Completed(json!({"content": []}))
        })
        .await
        .unwrap();
    created["taskId"].as_str().unwrap().to_owned()
}

/// `tasks/stream` for `task` after `after` (any JSON): the raw answer text.
async fn stream_raw(url: &str, task: &str, after: Value) -> String {
    let params = json!({"taskId": task, "after": after, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}});
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tasks/stream")
        .header("mcp-name", task)
        .body(
            json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/stream", "params": params})
                .to_string(),
        )
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .expect("the server answers");
    match tokio::time::timeout(Duration::from_secs(2), resp.text()).await {
        Ok(Ok(t)) => t,
        // An SSE stream that stays open: what was sent so far.
        _ => String::from("(a stream that stayed open)"),
    }
}

#[tokio::test]
async fn an_after_at_u64_max_is_past_the_head_never_a_replay_from_the_start() {
    let (s, store) = server_with(ServerConfig::default()).await;
    let (_go, wait) = oneshot::channel();
    let task = counting(&store, 3, wait).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = stream_raw(&s.url, &task, json!(u64::MAX)).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(v["error"]["data"]["reason"], "after-ahead", "{v}");
    assert_eq!(v["error"]["data"]["latestSeq"], 3, "{v}");
    // One below is past the head as well.
    let text = stream_raw(&s.url, &task, json!(u64::MAX - 1)).await;
    assert!(text.contains("after-ahead"), "{text}");
    // So is the same cursor by GET (Last-Event-ID and the query).
    let base = format!("{}/tasks/{task}/events", s.url);
    for req in [
        reqwest::Client::new()
            .get(&base)
            .header("last-event-id", u64::MAX.to_string()),
        reqwest::Client::new().get(format!("{base}?last_event_id={}", u64::MAX)),
    ] {
        let r = req
            .header("accept", "text/event-stream")
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .expect("the server answers");
        let text = r.text().await.unwrap_or_default();
        assert!(text.contains("after-ahead"), "{text}");
        assert!(!text.contains("com.example.count"), "{text}");
    }
    // And a cursor that does not fit in u64 is an invalid cursor.
    let r = reqwest::Client::new()
        .get(&base)
        .header("last-event-id", "18446744073709551616")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn a_cursor_ack_at_u64_max_closes_the_task_socket_with_4409() {
    let (s, store) = server_with(ServerConfig::default()).await;
    let (_go, wait) = oneshot::channel();
    let task = counting(&store, 2, wait).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let url = format!("{}/tasks/{task}/events", s.url.replacen("http", "ws", 1));
    let (mut ws, c) = common::ws_upgrade(&url, Some(0)).await;
    assert_eq!(c, 2);
    for want in 1..=2 {
        match common::next_frame(&mut ws, 2_000).await {
            common::Frame::Event(seq, _) => assert_eq!(seq, want),
            other => panic!("{other:?}"),
        }
    }
    common::send_text(
        &mut ws,
        &json!({"type": "cursor-ack", "cursor": u64::MAX}).to_string(),
    )
    .await;
    assert_eq!(
        common::next_frame(&mut ws, 2_000).await,
        common::Frame::Close(4409)
    );
}

/// A task socket after seq 2 of a task with seqs 0 ..= 2, acked.
async fn acked_socket(keepalive: Duration) -> (TestServer, common::Ws) {
    let mut config = ServerConfig::default();
    config.keepalive = keepalive;
    let (s, store) = server_with(config).await;
    let (go, wait) = oneshot::channel();
    std::mem::forget(go);
    let task = counting(&store, 2, wait).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let url = format!("{}/tasks/{task}/events", s.url.replacen("http", "ws", 1));
    let (mut ws, c) = common::ws_upgrade(&url, Some(2)).await;
    assert_eq!(c, 2);
    // No heartbeat before the ack.
    assert_eq!(
        common::next_frame(&mut ws, 1_500).await,
        common::Frame::Timeout
    );
    common::send_text(
        &mut ws,
        &json!({"type": "cursor-ack", "cursor": c}).to_string(),
    )
    .await;
    (s, ws)
}

#[tokio::test]
async fn the_task_socket_sends_heartbeats_naming_the_latest_seq() {
    let (_s, mut ws) = acked_socket(Duration::from_millis(300)).await;
    for _ in 0..2 {
        assert_eq!(
            common::next_frame(&mut ws, 3_000).await,
            common::Frame::Heartbeat(2)
        );
    }
}

#[tokio::test]
async fn a_frame_over_the_session_socket_s_limit_closes_the_task_socket_with_1009() {
    let (_s, mut ws) = acked_socket(Duration::from_secs(15)).await;
    let big = json!({"type": "cursor-ack", "pad": "x".repeat(5 << 20)}).to_string();
    let _ = futures_util::SinkExt::send(
        &mut ws,
        tokio_tungstenite::tungstenite::Message::Text(big.into()),
    )
    .await;
    assert_eq!(
        common::next_frame(&mut ws, 3_000).await,
        common::Frame::Close(1009)
    );
}

/// `tasks/stream` of `task` after `after`: the events' seqs and the response.
async fn stream(url: &str, task: &str, after: Option<u64>) -> (Vec<u64>, Value) {
    let text = stream_raw(url, task, after.map_or(Value::Null, |a| json!(a))).await;
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return (Vec::new(), v);
    }
    let mut seqs = Vec::new();
    let mut end = Value::Null;
    for line in text.lines() {
        let Some(v) = line
            .strip_prefix("data:")
            .and_then(|d| serde_json::from_str::<Value>(d.trim()).ok())
        else {
            continue;
        };
        if v["method"] == "notifications/tasks/event" {
            seqs.push(v["params"]["seq"].as_u64().unwrap());
        } else if v["id"] == 9 {
            end = v;
        }
    }
    (seqs, end)
}

#[tokio::test]
async fn a_lost_range_of_a_task_stream_is_events_gone_naming_where_to_resume() {
    use common::faulty::{Faults, FaultyLog};
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    });
    let store = TaskStore::new(log.clone());
    let server =
        McpServer::new(log, demo_tools(), ServerConfig::default()).with_tasks(store.clone());
    let s = TestServer::start_server(server, "/mcp").await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, 8, wait).await;
    go.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Wire seqs 0 ..= 9 (working, 8 counts, completed); log seqs 3 ..= 5
    // (wire 2 ..= 4) lost to damaged storage.
    *faults.lost_range.lock().unwrap() = Some((3, 5));
    // A reader from the start is served what comes before the range, then
    // told, as -32010, what is lost and where to resume.
    let (seqs, end) = stream(&s.url, &task, None).await;
    assert_eq!(seqs, [0, 1], "{end}");
    let err = &end["error"];
    assert_eq!(err["code"], -32010, "{end}");
    assert_eq!(err["data"]["reason"], "events_gone", "{end}");
    assert_eq!(
        (&err["data"]["lostFrom"], &err["data"]["lostTo"]),
        (&json!(2), &json!(4)),
        "{end}"
    );
    assert_eq!(err["data"]["resumeAfter"], 4, "{end}");
    assert_eq!(err["data"]["earliestSeq"], 5, "{end}");
    // A cursor inside the range: the same, never earliestSeq 0.
    let (_, end) = stream(&s.url, &task, Some(2)).await;
    assert_eq!(end["error"]["code"], -32010, "{end}");
    assert_eq!(end["error"]["data"]["resumeAfter"], 4, "{end}");
    assert_eq!(end["error"]["data"]["earliestSeq"], 5, "{end}");
    // Resuming where it says: the rest, to the end.
    let (seqs, end) = stream(&s.url, &task, Some(4)).await;
    assert_eq!(seqs, [5, 6, 7, 8, 9], "{end}");
    assert!(end.get("result").is_some(), "{end}");
    // Over the WebSocket: what comes before the range, then 4409 (a gap),
    // never 1001 (which sends a client back into the same hole).
    let url = format!("{}/tasks/{task}/events", s.url.replacen("http", "ws", 1));
    let (mut ws, _) = common::ws_upgrade(&url, Some(0)).await;
    match common::next_frame(&mut ws, 2_000).await {
        common::Frame::Event(seq, _) => assert_eq!(seq, 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        common::next_frame(&mut ws, 2_000).await,
        common::Frame::Close(4409)
    );
}

#[tokio::test]
async fn a_task_that_emits_without_end_keeps_a_bounded_window_of_its_last_events() {
    // The log's own count retention is far below the task's cap: the
    // task's pin is what holds its events, and only its last ones.
    let mut retention = mcp_resume_log::Retention::default();
    retention.max_events = 100;
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(retention));
    let store = TaskStore::new(log.clone());
    let server =
        McpServer::new(log, demo_tools(), ServerConfig::default()).with_tasks(store.clone());
    let s = TestServer::start_server(server, "/mcp").await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, 12_000, wait).await;
    go.send(()).unwrap();
    let mut last = (Vec::new(), Value::Null);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        last = stream(&s.url, &task, None).await;
        if last.1.get("result").is_some() {
            break;
        }
    }
    let (seqs, end) = last;
    assert!(end.get("result").is_some(), "{end}");
    let first = seqs[0];
    // 12,002 events in all; the default cap keeps the last 10,000 (moved
    // in steps of 1,250).
    assert!(
        (2_002 - 1_250..=2_002).contains(&first),
        "the stream starts at {first}"
    );
    assert_eq!(seqs, (first..=12_001).collect::<Vec<_>>());
    // What the task dropped is events_gone, naming the earliest it has.
    let (_, end) = stream(&s.url, &task, Some(10)).await;
    assert_eq!(end["error"]["code"], -32010, "{end}");
    assert_eq!(end["error"]["data"]["earliestSeq"], first, "{end}");
    assert_eq!(end["error"]["data"]["resumeAfter"], first - 1, "{end}");
}
