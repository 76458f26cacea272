//! Durable tasks on a real (memory) log, driven through `tasks/*` as a
//! client drives them: state kept in the record survives retention, answers
//! are taken only while asked for, and every task ends exactly once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use mcp_resume_log::{Log, MemoryLog, Retention, StreamKey};
use serde_json::{json, Value};

use super::serve::serve;
use super::*;
use mcp_resume_proto::meta::{
    CLIENT_CAPABILITIES as META_CAPABILITIES, PROTOCOL_VERSION as META_VERSION,
};

/// A `tasks/*` request from a client that declares the extension; its result.
async fn call(store: &TaskStore, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({META_VERSION: "2026-07-28",
        META_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}});
    let msg = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let (status, reply) = serve(store, &Caller(None), &HeaderMap::new(), &msg).await;
    assert_eq!(status, StatusCode::OK, "{method}: {reply}");
    assert!(reply.get("result").is_some(), "{method}: {reply}");
    reply["result"].clone()
}

async fn get(store: &TaskStore, id: &str) -> Value {
    call(store, "tasks/get", json!({"taskId": id})).await
}

/// Polls `tasks/get` until `done` holds (at most 10 s).
async fn until(store: &TaskStore, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = get(store, id).await;
        if done(&t) {
            return t;
        }
        assert!(Instant::now() < deadline, "never reached: {t}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn head(log: &Arc<dyn Log>, id: &str) -> u64 {
    log.bounds(id, StreamKey::Session).await.unwrap().head
}

fn memory(max_events: u64) -> Arc<dyn Log> {
    let mut retention = Retention::default();
    retention.max_events = max_events;
    Arc::new(MemoryLog::new(retention))
}

#[tokio::test]
async fn a_task_is_read_from_its_record_after_retention_trimmed_its_stream() {
    // Two events retained: the task's history is trimmed many times over.
    let log = memory(2);
    let store = TaskStore::new(log.clone());
    let task = store
        .spawn(Caller(None), |ctx| async move {
            let mut sum = 0;
            for i in 0..5 {
                let key = format!("n{i}");
                let answer = ctx
                    .request_input(&key, json!({"method": "elicitation/create"}))
                    .await
                    .unwrap();
                sum += answer["content"]["n"].as_i64().unwrap();
            }
            TaskEnd::Completed(json!({"content": [{"type": "text", "text": sum.to_string()}]}))
        })
        .await
        .unwrap();
    let id = task["taskId"].as_str().unwrap().to_owned();
    for i in 0..5 {
        let key = format!("n{i}");
        let t = until(&store, &id, |t| t["inputRequests"].get(&key).is_some()).await;
        assert_eq!(t["status"], "input_required", "{t}");
        let answer = json!({key.clone(): {"action": "accept", "content": {"n": i + 1}}});
        call(
            &store,
            "tasks/update",
            json!({"taskId": id, "inputResponses": answer}),
        )
        .await;
    }
    let t = until(&store, &id, |t| t["status"] != "working").await;
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "15", "{t}");
    let b = log.bounds(&id, StreamKey::Session).await.unwrap();
    assert!(b.floor > 1, "retention moved the floor: {b:?}");
    // Retention trims on; the answer stays.
    log.append(&id, StreamKey::Session, vec![Bytes::from_static(b"{}")])
        .await
        .unwrap();
    log.append(&id, StreamKey::Session, vec![Bytes::from_static(b"{}")])
        .await
        .unwrap();
    assert_eq!(get(&store, &id).await["status"], "completed");
}

#[tokio::test]
async fn an_answer_with_nothing_asked_is_ignored_and_commits_nothing() {
    let log = memory(10_000);
    let store = TaskStore::new(log.clone());
    let task = store
        .spawn(Caller(None), |ctx| async move {
            ctx.cancelled().await;
            TaskEnd::Cancelled
        })
        .await
        .unwrap();
    let id = task["taskId"].as_str().unwrap().to_owned();
    let before = head(&log, &id).await;
    let ack = call(
        &store,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"never-asked": {"action": "accept"}}}),
    )
    .await;
    assert_eq!(ack["resultType"], "complete");
    assert_eq!(head(&log, &id).await, before, "nothing committed");
    assert_eq!(get(&store, &id).await["status"], "working");
    // A cancel ends it once; a second cancel and an answer after change nothing.
    call(&store, "tasks/cancel", json!({"taskId": id})).await;
    let ended = head(&log, &id).await;
    assert_eq!(ended, before + 1);
    call(&store, "tasks/cancel", json!({"taskId": id})).await;
    call(
        &store,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {"x": {}}}),
    )
    .await;
    assert_eq!(head(&log, &id).await, ended);
    assert_eq!(get(&store, &id).await["status"], "cancelled");
}

#[tokio::test]
async fn a_dead_owners_task_is_failed_exactly_once() {
    let log = memory(10_000);
    let store = TaskStore::new(log.clone());
    let id = crate::session::new_session_id();
    let record = TaskRecord {
        owner: "an-instance-that-died".into(),
        created_ms: now_ms(),
        ttl_ms: 60_000,
        poll_ms: 500,
        state: Some(fold::TaskState::new(now_ms())),
        events: false,
    };
    let session = crate::session::SessionRecord {
        protocol_version: "2026-07-28".into(),
        task: Some(record),
        ..Default::default()
    };
    log.create_session(&id, session.encode()).await.unwrap();
    // Many clients (or instances) look at once; each sees it failed.
    let looks = (0..8).map(|_| get(&store, &id));
    for t in futures_util::future::join_all(looks).await {
        assert_eq!(t["status"], "failed", "{t}");
        assert_eq!(t["error"]["data"]["reason"], "server-restarted", "{t}");
    }
    assert_eq!(
        head(&log, &id).await,
        1,
        "one failure committed, not one per look"
    );
}

#[tokio::test]
async fn a_cancel_racing_the_result_ends_the_task_once() {
    for _ in 0..20 {
        let log = memory(10_000);
        let store = TaskStore::new(log.clone());
        let go = Arc::new(tokio::sync::Notify::new());
        let started = go.clone();
        let task = store
            .spawn(Caller(None), move |_| async move {
                started.notified().await;
                TaskEnd::Completed(json!({"content": []}))
            })
            .await
            .unwrap();
        let id = task["taskId"].as_str().unwrap().to_owned();
        go.notify_one();
        call(&store, "tasks/cancel", json!({"taskId": id})).await;
        let t = until(&store, &id, |t| t["status"] != "working").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Whichever came first stands, and the stream holds one end.
        assert_eq!(get(&store, &id).await["status"], t["status"]);
        let events = log.read(&id, StreamKey::Session, 0, 100).await.unwrap();
        let ends = events
            .iter()
            .filter_map(|e| serde_json::from_slice::<Value>(&e.message).ok())
            .filter(|v| v["s"].as_str().is_some_and(|s| fold::TERMINAL.contains(&s)))
            .count();
        assert_eq!(ends, 1, "{t}");
    }
}
