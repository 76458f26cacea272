//! A backend never waits for a commit per message, and a client never sees
//! a message before it is committed (docs/protocol.md 6): sends resolve once
//! queued; the route commits whatever is queued in one append; readers read
//! only the log.
//!
//! The backend here is a minimal one over the public seam (what an rmcp
//! handler, a gateway child or an upstream session is to the transport):
//! `tools/call` makes it send 100 notifications, counting the sends that
//! resolved, then the response.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::faulty::{Faults, FaultyLog};
use mcp_resume_log::{Log, MemoryLog};
use mcp_resume_server::backend::{
    Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox,
};
use mcp_resume_server::{McpServer, ServerConfig};
use serde_json::{json, Value};

/// Answers `initialize`, and `tools/call` with 100 notifications first.
struct Burst {
    resolved: Arc<AtomicUsize>,
}

struct BurstSession {
    outbox: Outbox,
    resolved: Arc<AtomicUsize>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Backend for Burst {
    fn open(
        &self,
        _session: &str,
        outbox: Outbox,
        _restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        Ok(Box::new(BurstSession {
            outbox,
            resolved: self.resolved.clone(),
            tasks: Mutex::new(Vec::new()),
        }))
    }
}

impl BackendSession for BurstSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        let Some(id) = message.get("id").cloned() else {
            return Ok(()); // notifications
        };
        let outbox = self.outbox.clone();
        let resolved = self.resolved.clone();
        let method = message["method"].as_str().unwrap_or("").to_owned();
        let task = tokio::spawn(async move {
            let send = |message: Value| Outbound {
                message,
                related: None,
            };
            if method == "tools/call" {
                for i in 1..=100 {
                    let note = json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"i":i}}});
                    outbox.send(send(note)).await.unwrap();
                    resolved.fetch_add(1, Ordering::SeqCst);
                }
            }
            let result = if method == "initialize" {
                json!({"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"burst","version":"1"}})
            } else {
                json!({"content":[{"type":"text","text":"sent 100"}]})
            };
            let _ = outbox
                .send(send(json!({"jsonrpc":"2.0","id":id,"result":result})))
                .await;
        });
        self.tasks.lock().unwrap().push(task);
        Ok(())
    }

    fn close(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

#[tokio::test]
async fn sends_resolve_when_queued_and_nothing_is_visible_before_its_commit() {
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    });
    let resolved = Arc::new(AtomicUsize::new(0));
    let backend = Arc::new(Burst {
        resolved: resolved.clone(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let server = McpServer::with_backend(log.clone(), backend, ServerConfig::default());
    tokio::spawn(server.serve(listener, std::future::pending::<()>()));
    let http = reqwest::Client::new();
    let post = |sid: Option<String>, body: Value| {
        let mut rb = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = sid {
            rb = rb.header("mcp-session-id", s);
        }
        rb.body(body.to_string()).send()
    };
    let r = post(None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await.unwrap();
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let _ = r.text().await;

    // A reader of the session stream, from its start.
    let reader = http
        .get(&url)
        .header("mcp-session-id", &sid)
        .header("accept", "text/event-stream")
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(reader.status(), 200);
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut parser = mcp_resume_client::sse::SseParser::new();
        let mut body = reader.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            for e in parser.feed(&chunk) {
                if !e.data.is_empty() {
                    s2.lock().unwrap().push(e.id.unwrap().parse().unwrap());
                }
            }
        }
    });

    // Every commit is held (a slow disk): the handler's sends still resolve.
    faults
        .hold_appends
        .store(true, std::sync::atomic::Ordering::Release);
    let call = tokio::spawn(post(
        Some(sid.clone()),
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"burst","arguments":{}}}),
    ));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while resolved.load(Ordering::SeqCst) < 100 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the handler waited for commits: {} of 100 sends resolved while the log held them",
            resolved.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Queued, not committed: no reader sees any of it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "a reader saw an uncommitted message"
    );
    // Its answer, sent after them, waits for them: a JSON answer never
    // overtakes what its call sent first.
    assert!(
        !call.is_finished(),
        "the call answered before the notifications it sent first were committed"
    );
    assert_eq!(
        log.bounds(&sid, mcp_resume_log::StreamKey::Session)
            .await
            .unwrap()
            .head,
        0
    );

    // Committed: all of it, in order, once; and the call answers.
    faults
        .hold_appends
        .store(false, std::sync::atomic::Ordering::Release);
    let answer = call.await.unwrap().unwrap().text().await.unwrap();
    assert!(answer.contains("sent 100"), "{answer}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < 100 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*seen.lock().unwrap(), (1..=100).collect::<Vec<u64>>());
}

/// The same for a built-in tool: `ToolContext::notify` resolves once
/// queued, and nothing is visible (nor its JSON answer given) before the
/// commit.
#[tokio::test]
async fn a_tools_notifications_are_queued_not_awaited_and_shown_only_once_committed() {
    let faults = Arc::new(Faults::default());
    let log: Arc<dyn Log> = Arc::new(FaultyLog {
        inner: Arc::new(MemoryLog::default()),
        faults: faults.clone(),
    });
    let resolved = Arc::new(AtomicUsize::new(0));
    let counted = resolved.clone();
    let tools = mcp_resume_server::ToolRegistry::new().tool(
        "burst",
        "100 notifications, then the answer",
        json!({"type": "object"}),
        move |ctx, _| {
            let counted = counted.clone();
            async move {
                for i in 1..=100 {
                    let note = json!({"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"i":i}}});
                    ctx.notify(note).await?;
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                Ok(mcp_resume_server::tools::text_result("sent 100"))
            }
        },
    );
    let s = common::TestServer::start_full(log.clone(), tools, ServerConfig::default()).await;
    let sid = s.init().await;
    let reader = s.session_stream(&sid, Some("0")).send().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut parser = mcp_resume_client::sse::SseParser::new();
        let mut body = reader.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            for e in parser.feed(&chunk) {
                if !e.data.is_empty() {
                    s2.lock().unwrap().push(e.id.unwrap().parse().unwrap());
                }
            }
        }
    });
    faults.hold_appends.store(true, Ordering::Release);
    let call = {
        let url = s.url.clone();
        let sid = sid.clone();
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", sid)
                .body(json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"burst","arguments":{}}}).to_string())
                .send()
                .await
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while resolved.load(Ordering::SeqCst) < 100 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tool waited for commits: {} of 100",
            resolved.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "a reader saw an uncommitted message"
    );
    assert!(
        !call.is_finished(),
        "the answer overtook the notifications it follows"
    );
    faults.hold_appends.store(false, Ordering::Release);
    let answer = call.await.unwrap().unwrap().text().await.unwrap();
    assert!(answer.contains("sent 100"), "{answer}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while seen.lock().unwrap().len() < 100 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*seen.lock().unwrap(), (1..=100).collect::<Vec<u64>>());
}
