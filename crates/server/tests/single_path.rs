//! The built-in tools are one backend among others (issue 22): served
//! through the session's route like an rmcp handler or a gateway child.
//! What that path must keep: a call whose client hangs up leaves nothing in
//! flight, a session an earlier release created without its `initialize`
//! params is still served, and a tool's notifications reach the log before
//! its answer reaches the client; a call whose session ends while it runs
//! is answered with an error, not left waiting.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use mcp_resume_log::{Log, MemoryLog, StreamKey};
use mcp_resume_server::tools::{text_result, ToolRegistry};
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};

/// How many `hang` calls have started (in any test of this binary).
static HANGING: AtomicUsize = AtomicUsize::new(0);

fn tools() -> ToolRegistry {
    ToolRegistry::new()
        .tool(
            "slow",
            "answers after 3 s",
            json!({"type": "object"}),
            |_ctx, _args| async move {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(text_result("slow"))
            },
        )
        .tool(
            "hang",
            "never answers",
            json!({"type": "object"}),
            |_ctx, _args| async move {
                HANGING.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<()>().await;
                Ok(text_result("never"))
            },
        )
        .tool(
            "quick",
            "answers at once",
            json!({"type": "object"}),
            |_ctx, _args| async move { Ok(text_result("quick")) },
        )
        .tool(
            "notes",
            "commits 50 notifications, then answers",
            json!({"type": "object"}),
            |ctx, _args| async move {
                let notes = (1..=50)
                    .map(|i| json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"i":i}}}))
                    .collect();
                let seq = ctx.notify_session(notes).await?;
                Ok(text_result(format!("committed up to {seq}")))
            },
        )
}

/// A server of [`tools`] on a memory log, and one initialized session.
async fn started() -> (TestServer, String) {
    let log = Arc::new(MemoryLog::default());
    let s = TestServer::start_full(log, tools(), ServerConfig::default()).await;
    let sid = s.init().await;
    (s, sid)
}

fn call(id: u64, tool: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{}}})
}

/// A client that hangs up while its call runs: the call is forgotten with
/// its POST, so the same id may be used again at once (a call still
/// registered would be refused as "already in flight").
#[tokio::test]
async fn a_call_whose_client_hung_up_leaves_nothing_in_flight() {
    let (s, sid) = started().await;
    let hasty = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = hasty
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &sid)
        .body(call(7, "slow").to_string())
        .send()
        .await;
    assert!(gone.is_err(), "the slow call answered within 300 ms");
    // The server notices the closed connection and drops the POST.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again: Value = s
        .post(Some(&sid), call(7, "quick"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["result"]["content"][0]["text"], "quick", "{again}");
}

/// A session whose record has no `initialize` params (what releases before
/// the single path wrote for the built-in tools) is served as initialized.
#[tokio::test]
async fn a_session_recorded_without_its_initialize_params_is_still_served() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::default());
    let sid = "ab".repeat(32);
    let old_record = json!({"v": "2025-11-25", "dyn": []});
    log.create_session(&sid, bytes::Bytes::from(old_record.to_string()))
        .await
        .unwrap();
    let s = TestServer::start_full(log, tools(), ServerConfig::default()).await;
    let r: Value = s
        .post(Some(&sid), call(1, "quick"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["result"]["content"][0]["text"], "quick", "{r}");
    let listed: Value = s
        .post(
            Some(&sid),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert!(
        listed["result"]["tools"].as_array().unwrap().len() >= 3,
        "{listed}"
    );
}

/// A tool's notifications are in the log before its JSON answer reaches the
/// client.
#[tokio::test]
async fn a_tools_notifications_are_committed_before_its_answer_is_seen() {
    let (s, sid) = started().await;
    for round in 1..=20u64 {
        let r: Value = s
            .post(Some(&sid), call(round, "notes"))
            .await
            .json()
            .await
            .unwrap();
        let head = s.log.bounds(&sid, StreamKey::Session).await.unwrap().head;
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("committed up to {}", round * 50),
            "{r}"
        );
        assert!(
            head >= round * 50,
            "the answer came before its notifications were committed"
        );
    }
}

/// A session ended (`DELETE`) while one of its calls runs: the handler is
/// cancelled with the session's backend, and the call still ends, loudly
/// (-32603, `backend-stopped`), instead of holding its POST open forever
/// (the POST held the route, so nothing else would answer it).
#[tokio::test]
async fn a_call_whose_session_ends_under_it_is_answered_with_an_error() {
    let (s, sid) = started().await;
    let hanging = HANGING.load(Ordering::SeqCst);
    let post = {
        let (url, sid) = (s.url.clone(), sid.clone());
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &sid)
                .body(call(9, "hang").to_string())
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    // The session ends while the call runs, not before it arrives.
    for _ in 0..100 {
        if HANGING.load(Ordering::SeqCst) > hanging {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deleted = reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert!(deleted.status().is_success(), "{}", deleted.status());
    let answer = tokio::time::timeout(Duration::from_secs(10), post)
        .await
        .expect("the call was left waiting after its session ended")
        .unwrap();
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32603, "{answer}");
    assert_eq!(
        answer["error"]["data"]["reason"], "backend-stopped",
        "{answer}"
    );
}
