//! rmcp's own service on `DurableSessionManager`, served on 127.0.0.1: a
//! handler's sends are queued, not committed one by one (it finishes a call
//! while the log holds every append), and no client sees any of them, on
//! the request stream or the standalone one, before the log has committed
//! it; a commit the log refuses ends the call's stream instead of leaving
//! it open and silent.

#![allow(deprecated)] // notifications/message: SEP-2577 deprecates it; clients still read it.

mod common;
#[path = "../../server/tests/common/faulty.rs"]
#[allow(dead_code)]
mod faulty;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::mcp_http::{init, listen, post};
use common::rt;
use faulty::{Faults, FaultyLog};
use mcp_resume_log::{Log, MemoryLog, Retention, StreamKey};
use mcp_resume_proto::sse::SseParser;
use mcp_resume_rmcp::DurableSessionManager;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, LoggingLevel,
    LoggingMessageNotificationParam, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// A tool `emit` that waits for `go`, sends `count` progress notifications
/// (on the call's stream) and as many log messages (on the session's), and
/// answers; it says when its last send returned.
#[derive(Clone)]
struct Emitter {
    go: Arc<tokio::sync::Semaphore>,
    sent: Arc<AtomicBool>,
}

impl ServerHandler for Emitter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let count = request
            .arguments
            .and_then(|a| a.get("count").and_then(Value::as_u64))
            .unwrap_or(0);
        self.go.acquire().await.map(|p| p.forget()).ok();
        let token = context.meta.get_progress_token();
        for i in 0..count {
            if let Some(token) = &token {
                context
                    .peer
                    .notify_progress(ProgressNotificationParam::new(token.clone(), i as f64))
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            }
            context
                .peer
                .notify_logging_message(LoggingMessageNotificationParam::new(
                    LoggingLevel::Info,
                    json!({"i": i}),
                ))
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        }
        self.sent.store(true, Ordering::Release);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("sent {count}"))]).into())
    }
}

/// rmcp's service on a faulty memory log, listening on 127.0.0.1.
async fn serve(log: Arc<dyn Log>, emitter: Emitter) -> String {
    let service = StreamableHttpService::new(
        move || Ok(emitter.clone()),
        Arc::new(DurableSessionManager::new(log)),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

fn faulty_log() -> (Arc<dyn Log>, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::new(Retention::default())),
        faults: faults.clone(),
    });
    (log, faults)
}

/// SSE events (`id`, JSON data) read from `resp` into `into` until the body
/// ends; a JSON answer is one event without an id.
async fn drain(mut resp: reqwest::Response, into: Arc<std::sync::Mutex<Vec<(String, Value)>>>) {
    let mut parser = SseParser::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        for ev in parser.feed(&chunk) {
            let v = serde_json::from_str::<Value>(&ev.data).unwrap_or(Value::Null);
            into.lock().unwrap().push((ev.id.unwrap_or_default(), v));
        }
    }
}

/// Events with a JSON-RPC message (rmcp's priming events carry none).
fn messages(got: &std::sync::Mutex<Vec<(String, Value)>>) -> Vec<(String, Value)> {
    let got = got.lock().unwrap();
    got.iter().filter(|(_, v)| !v.is_null()).cloned().collect()
}

/// The id of the first event (rmcp's priming event, on a call's stream).
fn first_id(got: &std::sync::Mutex<Vec<(String, Value)>>) -> String {
    got.lock().unwrap().first().expect("no event").0.clone()
}

#[test]
fn a_handler_finishes_while_the_log_holds_its_sends_and_nobody_sees_them_before_the_commit() {
    rt().block_on(async {
        let (log, faults) = faulty_log();
        let sent = Arc::new(AtomicBool::new(false));
        let go = Arc::new(tokio::sync::Semaphore::new(0));
        let emitter = Emitter {
            go: go.clone(),
            sent: sent.clone(),
        };
        let url = serve(log.clone(), emitter).await;
        let http = reqwest::Client::new();
        let sid = init(&http, &url).await;

        let get = listen(&http, &url, &sid).await;
        let standalone = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::spawn(drain(get, standalone.clone()));

        // The call's stream is open (its priming event committed and shown)
        // and its handler waits for `go`.
        let call = post(
            &http,
            &url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "emit", "arguments": {"count": 50},
                              "_meta": {"progressToken": "p"}}}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(call.status(), 200);
        let answer = Arc::new(std::sync::Mutex::new(Vec::new()));
        let reading = tokio::spawn(drain(call, answer.clone()));
        // Every append waits from here on: nothing more is committed.
        faults.hold_appends.store(true, Ordering::Release);
        go.add_permits(1);

        // The handler sent 50 notifications and its answer without one of
        // them committed ...
        tokio::time::timeout(Duration::from_secs(10), async {
            while !sent.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the handler waited for commits the log was holding");
        tokio::time::sleep(Duration::from_millis(300)).await;
        // ... and no client saw any of them.
        assert_eq!(messages(&standalone), vec![], "shown before its commit");
        assert_eq!(messages(&answer), vec![], "shown before its commit");
        assert_eq!(log.bounds(&sid, StreamKey::Session).await.unwrap().head, 0);

        faults.hold_appends.store(false, Ordering::Release);
        tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("the answer never came once the log committed")
            .unwrap();
        // The 50 progress notifications in order, then the answer, each
        // under the seq the log gave it (the priming event is 1).
        let answer = messages(&answer);
        assert_eq!(answer.len(), 51, "{answer:?}");
        for (n, (id, v)) in answer.iter().enumerate() {
            assert!(id.ends_with(&format!("/0/{}", n + 2)), "{id}");
            if n < 50 {
                assert_eq!(v["params"]["progress"], n as f64, "{answer:?}");
            }
        }
        let last = &answer[50].1;
        assert_eq!(last["id"], 7, "{answer:?}");
        assert_eq!(last["result"]["content"][0]["text"], "sent 50");
        tokio::time::timeout(Duration::from_secs(10), async {
            while messages(&standalone).len() < 50 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("not every notification arrived");
        // In order, each under the seq the log gave it.
        let got = messages(&standalone);
        let head = log.bounds(&sid, StreamKey::Session).await.unwrap().head;
        assert_eq!(head, 50);
        for (n, (id, v)) in got.iter().enumerate() {
            assert_eq!(v["params"]["data"]["i"], n as u64, "{got:?}");
            assert_eq!(id, &format!("{sid}/0/{}", n + 1));
        }
    });
}

#[test]
fn a_refused_commit_ends_the_calls_stream_within_a_bound() {
    rt().block_on(async {
        let (log, faults) = faulty_log();
        let go = Arc::new(tokio::sync::Semaphore::new(0));
        let emitter = Emitter {
            go: go.clone(),
            sent: Arc::new(AtomicBool::new(false)),
        };
        let url = serve(log.clone(), emitter).await;
        let http = reqwest::Client::new();
        let sid = init(&http, &url).await;

        // The call's stream is open; then the log refuses every append for
        // the length of the call, and its handler goes.
        let resp = post(
            &http,
            &url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                   "params": {"name": "emit", "arguments": {"count": 3},
                              "_meta": {"progressToken": "p"}}}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(resp.status(), 200);
        faults
            .refuse_appends
            .store(usize::MAX / 2, Ordering::Release);
        go.add_permits(1);
        let answer = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::time::timeout(Duration::from_secs(10), drain(resp, answer.clone()))
            .await
            .expect("the call's stream stayed open and silent after its commit failed");
        // Its stream ended with nothing the log does not hold.
        assert_eq!(messages(&answer), vec![]);
        faults.refuse_appends.store(0, Ordering::Release);
        go.add_permits(1);

        // A resume from the last id it got ends too, with an error that
        // answers the call: it does not wait for an answer never coming.
        let resumed = http
            .get(&url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("last-event-id", first_id(&answer))
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status(), 200);
        let again = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::time::timeout(Duration::from_secs(10), drain(resumed, again.clone()))
            .await
            .expect("the resumed stream of a failed call stayed open and silent");
        let again = messages(&again);
        let last = &again.last().expect("no answer on the resume").1;
        assert_eq!(last["id"], 8, "{again:?}");
        assert_eq!(last["error"]["code"], -32603, "{again:?}");

        // Later: the session goes on or has ended, said either way (an
        // answer, or 404), never a call left waiting.
        let later = post(
            &http,
            &url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                   "params": {"name": "emit", "arguments": {"count": 0}}}),
        )
        .send()
        .await
        .unwrap();
        let status = later.status();
        let answer = Arc::new(std::sync::Mutex::new(Vec::new()));
        tokio::time::timeout(Duration::from_secs(10), drain(later, answer.clone()))
            .await
            .expect("a later call was left waiting");
        let answer = messages(&answer);
        assert!(
            status == 404 || answer.iter().any(|(_, v)| v["id"] == 9),
            "{status} {answer:?}"
        );
    });
}

/// A log backend that panics while committing a stream fails the stream:
/// the store waiting for the commit gets an error within a bound (it waited
/// forever: the flush task died with the panic and nobody published it),
/// and so does every later store to it.
#[test]
fn a_log_that_panics_fails_the_stream_instead_of_leaving_its_stores_waiting() {
    let (log, faults) = faulty_log();
    rt().block_on(async {
        let store = mcp_resume_rmcp::LogEventStore::new(log);
        let event = |m: Value| {
            rmcp::transport::streamable_http_server::session::ServerSseMessage::new(
                "",
                serde_json::from_value(m).expect("a server message"),
            )
        };
        let answer = event(json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        let progress = event(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1}}));
        // A request stream: committed in order, through the queue.
        store.append("0b1e", &answer).await.expect("committed");
        faults.panic_appends.store(true, Ordering::Release);
        let stream = "9c2f";
        let got = tokio::time::timeout(Duration::from_secs(10), store.append(stream, &progress))
            .await
            .expect("the store answers within the bound");
        let err = got.expect_err("the log panicked: nothing was committed");
        assert!(err.to_string().contains("panicked"), "{err}");
        faults.panic_appends.store(false, Ordering::Release);
        // Its writer has not ended it: the stream stays failed, and is never
        // numbered again from its start.
        let again = tokio::time::timeout(Duration::from_secs(10), store.append(stream, &answer))
            .await
            .expect("a later store answers too");
        assert!(again.is_err(), "a failed stream stays failed: {again:?}");
    });
}
