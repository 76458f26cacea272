//! A tool's background work (`ToolContext::spawn`) ends kept or said
//! broken (docs/protocol.md 10): noted in the log before its call answers,
//! reported to the session (`work-lost`) when it fails, and never promised
//! when the log refuses its note.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::faulty::{Faults, FaultyLog};
use common::{read_sse, TestServer};
use mcp_resume_log::{Log, MemoryLog, StreamKey};
use mcp_resume_server::tools::{text_result, ToolError};
use mcp_resume_server::{ServerConfig, ToolRegistry};
use serde_json::{json, Value};

/// `promise`: background work that sends one notification, then fails
/// when `fail` is true; `keep`: the same work, finishing.
fn tools() -> ToolRegistry {
    let work = |ctx: mcp_resume_server::tools::ToolContext, args: Value| async move {
        let fail = args["fail"].as_bool().unwrap_or(false);
        let worker = ctx.clone();
        ctx.spawn(async move {
            worker
                .notify_session(vec![
                    json!({"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": "part one"}}),
                ])
                .await?;
            if fail {
                return Err(ToolError::Failed("the upstream it read went away".into()));
            }
            Ok(())
        })
        .await?;
        Ok(text_result("started"))
    };
    ToolRegistry::new().tool(
        "promise",
        "background work that may fail",
        json!({"type": "object"}),
        work,
    )
}

fn faulty() -> (Arc<dyn Log>, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let log = FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    };
    (Arc::new(log), faults)
}

/// The session stream's messages from the start, read until `n` arrive or
/// a second passes without one.
async fn session_messages(s: &TestServer, sid: &str, n: usize) -> Vec<Value> {
    let resp = s.session_stream(sid, Some("0")).send().await.unwrap();
    read_sse(resp, n, 1000)
        .await
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect()
}

fn work_lost(messages: &[Value]) -> Vec<&Value> {
    messages
        .iter()
        .filter(|m| m["params"]["data"]["reason"] == "work-lost")
        .collect()
}

#[tokio::test]
async fn background_work_that_fails_is_reported_to_the_session_once() {
    let (log, _) = faulty();
    let s = TestServer::start_full(log.clone(), tools(), ServerConfig::default()).await;
    let sid = s.init().await;
    let v = s.call(&sid, "promise", json!({"fail": true})).await;
    assert!(v.get("result").is_some(), "{v}");
    let messages = session_messages(&s, &sid, 2).await;
    let lost = work_lost(&messages);
    assert_eq!(lost.len(), 1, "{messages:?}");
    assert_eq!(lost[0]["params"]["logger"], "mcp-resume", "{messages:?}");
    assert_eq!(lost[0]["params"]["level"], "error", "{messages:?}");
    let text = lost[0]["params"]["data"]["message"].as_str().unwrap();
    assert!(text.contains("the upstream it read went away"), "{text}");
    // Its note is closed and retired: nothing left for a sweep to report.
    assert_eq!(
        log.live_request_streams(&sid).await.unwrap(),
        Vec::<u64>::new()
    );
}

#[tokio::test]
async fn background_work_that_finishes_leaves_no_report_and_no_note() {
    let (log, _) = faulty();
    let s = TestServer::start_full(log.clone(), tools(), ServerConfig::default()).await;
    let sid = s.init().await;
    let v = s.call(&sid, "promise", json!({})).await;
    assert!(v.get("result").is_some(), "{v}");
    let messages = session_messages(&s, &sid, 2).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(work_lost(&messages).is_empty(), "{messages:?}");
    let mut left = log.live_request_streams(&sid).await.unwrap();
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        left = log.live_request_streams(&sid).await.unwrap();
    }
    assert_eq!(left, Vec::<u64>::new());
}

/// `emit` whose note the log refuses (a Redis restart at that instant):
/// the call fails loudly and nothing was promised or committed.
#[tokio::test]
async fn work_whose_note_the_log_refuses_fails_its_call_with_nothing_promised() {
    let (log, faults) = faulty();
    let s = TestServer::start_with(log.clone(), ServerConfig::default()).await;
    let sid = s.init().await;
    let before = log.bounds(&sid, StreamKey::Session).await.unwrap().head;
    faults.refuse_opens.store(1, Ordering::SeqCst);
    let resp = s
        .post(
            Some(&sid),
            json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"emit","arguments":{"count": 40, "interval_ms": 1}}}),
        )
        .await;
    let status = resp.status();
    let body = resp.text().await.unwrap();
    assert!(
        !status.is_success() || body.contains("\"error\"") || body.contains("\"isError\":true"),
        "{status} {body}"
    );
    assert!(!body.contains("emitting 40"), "{body}");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        log.bounds(&sid, StreamKey::Session).await.unwrap().head,
        before,
        "a call refused its note committed nothing"
    );
}
