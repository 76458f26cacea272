//! A call's request stream under log faults: a call that opens its stream
//! lazily (its first progress) while the log cannot open streams gets every
//! step on that stream once the log is back, or ends loudly; its steps never
//! go anywhere else (docs/protocol.md 3.4).

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::faulty::{Faults, FaultyLog};
use common::{read_sse, TestServer};
use mcp_resume_log::{Log, MemoryLog, StreamKey};
use mcp_resume_server::tools::{text_result, ToolRegistry};
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};

/// A tool answered as JSON unless it reports progress first: `steps`
/// progress notifications, then `counted N`.
fn counting_tools() -> ToolRegistry {
    ToolRegistry::new().tool(
        "count",
        "progress 1..=steps, then the answer",
        json!({"type": "object", "properties": {"steps": {"type": "integer"}}}),
        |ctx, args| async move {
            let steps = args["steps"].as_u64().unwrap_or(1);
            for k in 1..=steps {
                ctx.progress(k, Some(steps)).await?;
            }
            Ok(text_result(format!("counted {steps}")))
        },
    )
}

async fn server(config: ServerConfig) -> (TestServer, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    });
    (
        TestServer::start_full(log, counting_tools(), config).await,
        faults,
    )
}

/// Calls `count {steps}` with a progress token as a client that accepts
/// JSON and SSE; the messages it got (the JSON answer, or every SSE data
/// event of its stream).
async fn call(s: &TestServer, sid: &str, steps: u64) -> Vec<Value> {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "count", "arguments": {"steps": steps}, "_meta": {"progressToken": "t"}}});
    let resp = s.post(Some(sid), body).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream");
    if !sse {
        return vec![resp.json().await.unwrap()];
    }
    read_sse(resp, steps as usize + 1, 15_000)
        .await
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect()
}

fn steps_of(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_lazy_call_whose_stream_the_log_cannot_open_at_once_loses_no_step() {
    let (s, faults) = server(ServerConfig::default()).await;
    let sid = s.init().await;
    // A short outage at the moment the call's first progress opens its
    // stream: the open is tried again, and step 1 is on the call's stream.
    faults.refuse_opens.store(3, Ordering::SeqCst);
    let got = call(&s, &sid, 5).await;
    assert_eq!(faults.refuse_opens.load(Ordering::SeqCst), 0);
    assert_eq!(steps_of(&got), vec![1, 2, 3, 4, 5], "{got:?}");
    let last = got.last().unwrap();
    assert_eq!(last["result"]["content"][0]["text"], "counted 5", "{got:?}");
    // Nothing of the call went to the session stream instead.
    let session = read_sse(
        s.session_stream(&sid, Some("0")).send().await.unwrap(),
        1,
        500,
    )
    .await;
    assert!(session.iter().all(|e| e.data.is_empty()), "{session:?}");
}

#[tokio::test]
async fn a_lazy_call_whose_stream_cannot_be_opened_within_the_deadline_ends_loudly() {
    let mut config = ServerConfig::default();
    config.reply_deadline = Duration::from_secs(1);
    let (s, faults) = server(config).await;
    let sid = s.init().await;
    faults.refuse_opens.store(1_000_000, Ordering::SeqCst);
    let got = call(&s, &sid, 3).await;
    faults.refuse_opens.store(0, Ordering::SeqCst);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["id"], 7, "{got:?}");
    assert_eq!(got[0]["error"]["code"], -32603, "{got:?}");
    assert_eq!(
        got[0]["error"]["data"]["reason"], "commit-failed",
        "{got:?}"
    );
    // The steps it sent after the failure went nowhere a client reads.
    let session = read_sse(
        s.session_stream(&sid, Some("0")).send().await.unwrap(),
        1,
        500,
    )
    .await;
    assert!(session.iter().all(|e| e.data.is_empty()), "{session:?}");
    // The session serves the next call as before.
    let got = call(&s, &sid, 2).await;
    assert_eq!(steps_of(&got), vec![1, 2], "{got:?}");
}

/// The start-up sweep ends the calls a dead instance left open, and a log
/// that is unavailable while it runs makes it wait and go on from where it
/// was, not give up until a client happens to resume one.
#[tokio::test]
async fn the_orphan_sweep_goes_on_where_it_stopped_when_the_log_was_unavailable() {
    let faults = Arc::new(Faults::default());
    let inner: Arc<dyn Log> = Arc::new(MemoryLog::default());
    // Three sessions, each with a call whose handler ran on an instance that is gone.
    let mut calls = Vec::new();
    for i in 0..3 {
        let sid = format!("{:064x}", i + 1);
        inner.create_session(&sid, Bytes::new()).await.unwrap();
        let record =
            Bytes::from(json!({"id": 40 + i, "owner": "an-instance-long-gone"}).to_string());
        let r = inner
            .open_request_stream(&sid, record, u64::MAX)
            .await
            .unwrap();
        calls.push((sid, r));
    }
    faults.refuse_stream_lists.store(4, Ordering::SeqCst);
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: inner.clone(),
        faults: faults.clone(),
    });
    let s = TestServer::start_full(log, counting_tools(), ServerConfig::default()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for (sid, r) in &calls {
        let stream = StreamKey::Request(*r);
        loop {
            let head = inner.bounds(sid, stream).await.unwrap().head;
            if head > 0 {
                let ended = inner.read(sid, stream, head - 1, 1).await.unwrap();
                let v: Value = serde_json::from_slice(&ended[0].message).unwrap();
                assert_eq!(v["error"]["data"]["reason"], "server-restarted", "{v}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the call of {sid} was never ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert_eq!(faults.refuse_stream_lists.load(Ordering::SeqCst), 0);
    drop(s);
}
