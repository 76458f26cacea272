//! `tasks/stream` (SEP-2694, docs/protocol.md 3.9) on one server: a task's
//! events replayed and followed from a cursor, ending with the terminal
//! status event and the request's result; a cursor the log no longer holds
//! is `events_gone`, one past the latest is refused, another principal's
//! task is not found; events are queued, never shown before they are
//! committed.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::faulty::{Faults, FaultyLog};
use common::TestServer;
use mcp_resume_log::{Log, MemoryLog, Retention};
use mcp_resume_server::demo::demo_tools;
use mcp_resume_server::tasks::{Caller, TaskContext, TaskEnd, TaskStore};
use mcp_resume_server::{McpServer, ServerConfig};
use serde_json::{json, Value};
use tokio::sync::oneshot;

async fn server_on(log: Arc<dyn Log>) -> (TestServer, TaskStore) {
    let store = TaskStore::new(log.clone());
    let server =
        McpServer::new(log, demo_tools(), ServerConfig::default()).with_tasks(store.clone());
    (TestServer::start_server(server, "/mcp").await, store)
}

/// `tasks/stream` for `task` after `after`, read until its response or
/// `ms` of silence: the events' params and the response (if it came).
async fn stream(url: &str, task: &str, after: Option<u64>, ms: u64) -> (Vec<Value>, Option<Value>) {
    let mut params = json!({"taskId": task, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}});
    if let Some(a) = after {
        params["after"] = json!(a);
    }
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
        .send()
        .await
        .unwrap();
    let sse = resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream");
    if !sse {
        return (Vec::new(), Some(resp.json().await.unwrap()));
    }
    let mut events = Vec::new();
    let mut end = None;
    for e in common::read_sse(resp, usize::MAX, ms).await {
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            continue;
        };
        if v["method"] == "notifications/tasks/event" {
            assert_eq!(
                e.id.as_deref(),
                Some(v["params"]["seq"].to_string().as_str())
            );
            events.push(v["params"].clone());
        } else if v["id"] == 9 {
            end = Some(v);
        }
    }
    (events, end)
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// A task that emits `n` events, then waits for `go`, then completes.
async fn counting(store: &TaskStore, caller: Caller, n: u64, go: oneshot::Receiver<()>) -> String {
    let created = store
        .spawn(caller, move |ctx: TaskContext| async move {
            for i in 1..=n {
                ctx.event("com.example.count", json!({"n": i}))
                    .await
                    .unwrap();
            }
            let _ = go.await;
            TaskEnd::Completed(
                json!({"content": [{"type": "text", "text": format!("counted {n}")}]}),
            )
        })
        .await
        .unwrap();
    created["taskId"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_task_stream_replays_follows_and_ends_with_the_terminal_event() {
    let (s, store) = server_on(Arc::new(MemoryLog::default())).await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, Caller::default(), 5, wait).await;
    // Live: the first events, then the end once the work completes.
    let reader = {
        let url = s.url.clone();
        let task = task.clone();
        tokio::spawn(async move { stream(&url, &task, None, 5_000).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    go.send(()).unwrap();
    let (events, end) = reader.await.unwrap();
    assert_eq!(seqs(&events), (0..=6).collect::<Vec<_>>(), "{events:?}");
    assert_eq!(events[0]["type"], "dev.mcp-resume/task/working");
    assert_eq!(events[0]["payload"]["taskId"], task);
    for (i, e) in events[1..6].iter().enumerate() {
        assert_eq!(e["type"], "com.example.count");
        assert_eq!(e["payload"]["n"], i as u64 + 1);
        assert_eq!(e["taskId"], task);
        assert_eq!(
            e["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            task
        );
    }
    assert_eq!(events[6]["type"], "dev.mcp-resume/task/completed");
    assert_eq!(
        events[6]["payload"]["result"]["content"][0]["text"],
        "counted 5"
    );
    assert_eq!(end.unwrap()["result"]["resultType"], "complete");
    // Resumed after 3: the rest, once; after the terminal one: at once, nothing.
    let (events, end) = stream(&s.url, &task, Some(3), 2_000).await;
    assert_eq!(seqs(&events), [4, 5, 6]);
    assert!(end.unwrap().get("result").is_some());
    let (events, end) = stream(&s.url, &task, Some(6), 2_000).await;
    assert!(events.is_empty(), "{events:?}");
    assert!(end.unwrap().get("result").is_some());
}

#[tokio::test]
async fn a_cursor_the_log_no_longer_holds_is_events_gone_and_one_ahead_is_refused() {
    let mut retention = Retention::default();
    retention.max_events = 10;
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(retention));
    // A task's events are pinned for its TTL (count retention does not
    // take them while it lives); a TTL this short lets the test see them go.
    let store = TaskStore::new(log.clone()).with_ttl(Duration::from_millis(300));
    let server =
        McpServer::new(log, demo_tools(), ServerConfig::default()).with_tasks(store.clone());
    let s = TestServer::start_server(server, "/mcp").await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, Caller::default(), 30, wait).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Held while pinned: everything from seq 0.
    let (events, _) = stream(&s.url, &task, None, 300).await;
    assert_eq!(seqs(&events), (0..=30).collect::<Vec<_>>());
    // The pin expires; the end's append trims to the last 10: 22 ..= 31.
    tokio::time::sleep(Duration::from_millis(400)).await;
    go.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, end) = stream(&s.url, &task, Some(5), 1_000).await;
    let err = &end.unwrap()["error"];
    assert_eq!(err["code"], -32010, "{err}");
    assert_eq!(err["data"]["reason"], "events_gone");
    assert_eq!(err["data"]["earliestSeq"], 22);
    assert_eq!(err["data"]["latestSeq"], 31);
    assert_eq!(err["data"]["taskId"], task);
    // The earliest retained onwards is served; without a cursor too.
    let (events, end) = stream(&s.url, &task, Some(21), 500).await;
    assert_eq!(seqs(&events), (22..=31).collect::<Vec<_>>());
    assert!(end.unwrap().get("result").is_some());
    let (events, _) = stream(&s.url, &task, None, 500).await;
    assert_eq!(seqs(&events), (22..=31).collect::<Vec<_>>());
    // Past the latest: refused, never a stream that waits for seqs that
    // may never exist.
    let (_, end) = stream(&s.url, &task, Some(32), 500).await;
    let end = end.unwrap();
    assert_eq!(end["error"]["code"], -32602, "{end}");
    assert_eq!(end["error"]["data"]["latestSeq"], 31, "{end}");
}

#[tokio::test]
async fn a_task_keeps_its_events_past_the_count_retention_while_it_lives() {
    let mut retention = Retention::default();
    retention.max_events = 10;
    let (s, store) = server_on(Arc::new(MemoryLog::new(retention))).await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, Caller::default(), 50, wait).await;
    go.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (events, end) = stream(&s.url, &task, None, 1_000).await;
    assert_eq!(seqs(&events), (0..=51).collect::<Vec<_>>());
    assert!(end.unwrap().get("result").is_some());
}

#[tokio::test]
async fn another_principals_task_cannot_be_streamed() {
    let (s, store) = server_on(Arc::new(MemoryLog::default())).await;
    let (_go, wait) = oneshot::channel();
    let task = counting(&store, Caller(Some("alice".into())), 3, wait).await;
    // The test's requests carry no credentials: not alice.
    let (events, end) = stream(&s.url, &task, None, 500).await;
    assert!(events.is_empty());
    let end = end.unwrap();
    assert_eq!(end["error"]["code"], -32602, "{end}");
    let (_, end) = stream(&s.url, &"0".repeat(64), None, 500).await;
    assert_eq!(end.unwrap()["error"]["code"], -32602);
}

#[tokio::test]
async fn an_emitted_event_is_queued_and_shown_only_once_committed() {
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    });
    let (s, store) = server_on(log).await;
    let (emitted_tx, emitted) = oneshot::channel();
    let created = store
        .spawn(Caller::default(), move |ctx: TaskContext| async move {
            let started = std::time::Instant::now();
            for i in 1..=100u64 {
                ctx.event("com.example.count", json!({"n": i}))
                    .await
                    .unwrap();
            }
            let _ = emitted_tx.send(started.elapsed());
            std::future::pending::<()>().await;
            TaskEnd::Cancelled
        })
        .await
        .unwrap();
    let task = created["taskId"].as_str().unwrap().to_owned();
    // Hold every commit while the work emits.
    faults.hold_appends.store(true, Ordering::SeqCst);
    let (events, _) = stream(&s.url, &task, None, 300).await;
    assert_eq!(seqs(&events), [0], "only the committed start: {events:?}");
    let took = tokio::time::timeout(Duration::from_secs(5), emitted).await;
    let took = took.expect("emitting never waits for a commit").unwrap();
    assert!(took < Duration::from_secs(5), "{took:?}");
    let (events, _) = stream(&s.url, &task, Some(0), 300).await;
    assert!(
        events.is_empty(),
        "nothing shown before its commit: {events:?}"
    );
    faults.hold_appends.store(false, Ordering::SeqCst);
    let (events, _) = stream(&s.url, &task, Some(0), 500).await;
    assert_eq!(seqs(&events), (1..=100).collect::<Vec<_>>());
}

/// The next text frame of `ws` as JSON, or `None` after `ms` of silence.
async fn frame(ws: &mut common::Ws, ms: u64) -> Option<Result<Value, (u16, String)>> {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let msg = tokio::time::timeout(Duration::from_millis(ms), ws.next())
            .await
            .ok()??;
        match msg.ok()? {
            Message::Text(t) => return Some(Ok(serde_json::from_str(t.as_str()).unwrap())),
            Message::Close(c) => {
                let c = c.map(|c| (u16::from(c.code), c.reason.to_string()));
                return Some(Err(c.unwrap_or((1005, String::new()))));
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_task_stream_upgraded_to_a_websocket_holds_live_events_until_the_cursor_ack() {
    use futures_util::SinkExt;
    let (s, store) = server_on(Arc::new(MemoryLog::default())).await;
    let (go, wait) = oneshot::channel();
    let task = counting(&store, Caller::default(), 5, wait).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let url = format!("{}/tasks/{task}/events", s.url.replacen("http", "ws", 1));
    // After seq 1: the 101 echoes the latest seq, 5 (working, then 5 counts).
    let (mut ws, c) = common::ws_upgrade(&url, Some(1)).await;
    assert_eq!(c, 5);
    let mut seen = Vec::new();
    for _ in 2..=5 {
        let f = frame(&mut ws, 2_000).await.unwrap().unwrap();
        assert_eq!(f["type"], "event");
        assert_eq!(f["seq"], f["message"]["params"]["seq"], "{f}");
        assert_eq!(f["message"]["method"], "notifications/tasks/event");
        seen.push(f["seq"].as_u64().unwrap());
    }
    assert_eq!(seen, [2, 3, 4, 5]);
    // The terminal event comes live, above C: held until the ack.
    go.send(()).unwrap();
    assert!(
        frame(&mut ws, 500).await.is_none(),
        "a live event before the ack"
    );
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        json!({"type": "cursor-ack", "cursor": c})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let f = frame(&mut ws, 2_000).await.unwrap().unwrap();
    assert_eq!(f["seq"], 6);
    assert_eq!(
        f["message"]["params"]["type"],
        "dev.mcp-resume/task/completed"
    );
    let end = frame(&mut ws, 2_000).await.unwrap().unwrap_err();
    assert_eq!(end.0, 1000, "{end:?}");
    // A plain GET with Last-Event-ID reads it as SSE, the seq as the event id.
    let resp = reqwest::Client::new()
        .get(format!("{}/tasks/{task}/events", s.url))
        .header("accept", "text/event-stream")
        .header("last-event-id", "4")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let ids: Vec<String> = common::read_sse(resp, usize::MAX, 2_000)
        .await
        .into_iter()
        .filter_map(|e| e.id)
        .collect();
    assert_eq!(ids, ["5", "6"]);
    // A cursor below the floor or past the head is refused before any upgrade.
    let r = reqwest::Client::new()
        .get(format!("{}/tasks/{task}/events", s.url))
        .header("last-event-id", "99")
        .send()
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["data"]["reason"], "after-ahead", "{v}");
}
