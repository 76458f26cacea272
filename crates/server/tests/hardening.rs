//! Production hardening: what a hostile client, a faulty backend or an
//! operator meets. Each test names the behaviour it proves.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::faulty::{Faults, FaultyLog};
use common::{next_frame, read_sse, send_text, ws_connect, Frame, TestServer};
use mcp_resume_log::{Log, MemoryLog, Retention};
use mcp_resume_server::{ServerConfig, ToolRegistry};
use serde_json::{json, Value};

fn faulty(retention: Retention) -> (Arc<dyn Log>, Arc<Faults>) {
    let faults = Arc::new(Faults::default());
    let log = FaultyLog {
        inner: Arc::new(MemoryLog::new(retention)),
        faults: faults.clone(),
    };
    (Arc::new(log), faults)
}

async fn sse_text(resp: reqwest::Response, ms: u64) -> String {
    use futures_util::StreamExt;
    let mut body = resp.bytes_stream();
    let mut out = Vec::new();
    while let Ok(Some(Ok(chunk))) =
        tokio::time::timeout(Duration::from_millis(ms), body.next()).await
    {
        out.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn session_ids_of_any_other_shape_are_404() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    for bad in [
        "abc",
        "../../etc",
        "{x}",
        &sid.to_uppercase(),
        &format!("{sid}0"),
    ] {
        let r = s
            .post(Some(bad), json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
            .await;
        assert_eq!(r.status(), 404, "{bad}");
        let r = reqwest::get(s.events_url(bad)).await.unwrap();
        assert_eq!(r.status(), 404, "{bad}");
    }
    let r = s
        .post(Some(&sid), json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn initialize_with_an_sse_only_accept_is_answered_as_sse() {
    let s = TestServer::start(ServerConfig::default()).await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .body(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    assert!(r.headers().contains_key("mcp-session-id"));
    let events = read_sse(r, 1, 2000).await;
    let v: Value = serde_json::from_str(&events[0].data).unwrap();
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn query_errors_come_after_the_auth_check_and_have_json_bodies() {
    let mut config = ServerConfig::default();
    config.auth = mcp_resume_server::auth::Authenticator::bearer("s3cret");
    let s = TestServer::start(config).await;
    let url = format!("{}?last_event_id=1&last_event_id=2", s.url);
    let r = reqwest::Client::new().get(&url).send().await.unwrap();
    assert_eq!(
        r.status(),
        401,
        "no token: 401 before the query is looked at"
    );
    let r = reqwest::Client::new()
        .get(&url)
        .header("authorization", "Bearer s3cret")
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "invalid-query", "{v}");
}

#[tokio::test]
async fn an_sse_replay_that_the_log_shortens_ends_loudly_instead_of_skipping() {
    let (log, faults) = faulty(Retention::default());
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 10).await;
    // The log leaves out event 4: the reader must not jump from 3 to 5.
    faults.skip_seq.store(4, Ordering::Relaxed);
    let text = sse_text(s.session_stream(&sid, Some("0")).send().await.unwrap(), 500).await;
    assert!(text.contains("id: 3\n"), "{text}");
    assert!(!text.contains("id: 5\n"), "skipped silently: {text}");
    assert!(text.contains(": error log-gap"), "{text}");
    // A read that comes back empty below the head is a fault, not the end of the replay.
    faults.skip_seq.store(0, Ordering::Relaxed);
    faults.empty_reads.store(true, Ordering::Relaxed);
    let text = sse_text(s.session_stream(&sid, Some("0")).send().await.unwrap(), 500).await;
    assert!(text.contains(": error log-gap"), "{text}");
}

#[tokio::test]
async fn a_trim_racing_the_upgrade_is_a_409_never_a_101_then_4409() {
    let mut retention = Retention::default();
    retention.max_events = 10;
    retention.max_age = Duration::from_secs(3600);
    let (log, faults) = faulty(retention);
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 10).await;
    // Five events land just before the pin: with the pin taken after the commit
    // point they would trim 1..=5 between the decision and the replay.
    faults.append_before_pin.store(5, Ordering::Relaxed);
    match ws_connect(
        &s.ws_url(&sid),
        &[
            ("sec-websocket-protocol", "mcp.resume.v1"),
            ("last-event-id", "0"),
        ],
    )
    .await
    {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 409),
        Ok((mut ws, resp)) => {
            let c: u64 = resp.headers()["x-mcp-resume-cursor"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            for want in 1..=c {
                match next_frame(&mut ws, 2000).await {
                    Frame::Event(seq, _) => assert_eq!(seq, want),
                    other => panic!("a 101 must replay 1..={c} whole, got {other:?}"),
                }
            }
        }
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn the_ack_deadline_runs_from_the_101_not_from_the_end_of_the_replay() {
    let (log, faults) = faulty(Retention::default());
    let mut config = ServerConfig::default();
    config.upgrade_timeout = Duration::from_millis(400);
    let s = TestServer::start_with(log, config).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 1000).await;
    // Two replay reads of 300 ms each: the replay alone outlasts the deadline.
    faults.read_delay_ms.store(300, Ordering::Relaxed);
    let (mut ws, c) = common::ws_upgrade(&s.ws_url(&sid), Some(0)).await;
    let mut last = 0;
    loop {
        match next_frame(&mut ws, 3000).await {
            Frame::Event(seq, _) => {
                last = seq;
                if seq == c {
                    break;
                }
            }
            other => {
                // Closed before the replay finished: only 4408 is right.
                assert_eq!(other, Frame::Close(4408), "after {last}");
                return;
            }
        }
    }
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(4408));
}

#[tokio::test]
async fn a_session_cannot_register_tools_or_run_background_work_without_bound() {
    let mut config = ServerConfig::default();
    config.max_session_tools = 3;
    config.max_background_per_session = 2;
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    for i in 0..3 {
        let v = s
            .call(&sid, "register_tool", json!({"name": format!("t{i}")}))
            .await;
        assert!(v.get("result").is_some(), "{v}");
    }
    let v = s.call(&sid, "register_tool", json!({"name": "t3"})).await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    for _ in 0..2 {
        let v = s
            .call(&sid, "emit", json!({"count": 100, "interval_ms": 1000}))
            .await;
        assert!(v.get("result").is_some(), "{v}");
    }
    let before = s.head(&sid).await;
    let v = s
        .call(&sid, "emit", json!({"count": 2, "interval_ms": 1000}))
        .await;
    assert_eq!(v["error"]["code"], -32602, "{v}");
    assert_eq!(
        s.head(&sid).await,
        before,
        "a refused emit committed nothing"
    );
    // Another session has its own budget.
    let other = s.init().await;
    let v = s.call(&other, "emit", json!({"count": 1})).await;
    assert!(v.get("result").is_some(), "{v}");
}

#[tokio::test]
async fn emit_never_breaks_its_promise_when_the_log_refuses_appends() {
    let (log, faults) = faulty(Retention::default());
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    let before = s.head(&sid).await;
    // Refused before it answered: the call fails, nothing was promised.
    faults.refuse_appends.store(1, Ordering::SeqCst);
    let v = s.call(&sid, "emit", json!({"count": 1})).await;
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(s.head(&sid).await, before);
    // Refused after it answered (the log fails over for a few appends):
    // the background retries until every promised event is committed.
    let v = s
        .call(&sid, "emit", json!({"count": 4, "interval_ms": 20}))
        .await;
    assert!(v.get("result").is_some(), "{v}");
    faults.refuse_appends.store(3, Ordering::SeqCst);
    let mut head = before;
    for _ in 0..200 {
        head = s.head(&sid).await;
        if head >= before + 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(head, before + 4, "every promised event is committed");
    assert_eq!(
        faults.refuse_appends.load(Ordering::SeqCst),
        0,
        "the refusals were met"
    );
    let resp = s
        .session_stream(&sid, Some(&before.to_string()))
        .send()
        .await
        .unwrap();
    let events = read_sse(resp, 4, 2000).await;
    let ks: Vec<u64> = events
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["params"]["data"]["i"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(ks, [1, 2, 3, 4], "in order, no duplicate");
}

#[tokio::test]
async fn a_handler_that_panics_still_ends_its_call_with_an_error() {
    let tools = ToolRegistry::new().streaming_tool(
        "boom",
        "panics",
        json!({"type":"object"}),
        |_ctx, _args| async move {
            panic!("the handler blew up");
        },
    );
    let s = TestServer::start_full(
        Arc::new(MemoryLog::default()),
        tools,
        ServerConfig::default(),
    )
    .await;
    let sid = s.init().await;
    let r = s
        .post(Some(&sid), json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"boom","arguments":{}}}))
        .await;
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let events = read_sse(r, 1, 3000).await;
    let last = events
        .iter()
        .rev()
        .find(|e| !e.data.is_empty())
        .expect("a response");
    let v: Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(v["id"], 9);
    assert_eq!(v["error"]["code"], -32603, "{v}");
}

#[tokio::test]
async fn cors_preflight_and_exposed_headers_for_allowed_origins_only() {
    let mut config = ServerConfig::default();
    config.allowed_origins = vec!["https://app.example".into()];
    let s = TestServer::start(config).await;
    let client = reqwest::Client::new();
    for method in ["POST", "GET", "DELETE"] {
        let r = client
            .request(reqwest::Method::OPTIONS, &s.url)
            .header("origin", "https://app.example")
            .header("access-control-request-method", method)
            .header(
                "access-control-request-headers",
                "content-type, mcp-session-id, mcp-protocol-version, last-event-id, authorization",
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{method}: {}", r.status());
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], "https://app.example");
        let methods = h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .to_ascii_uppercase();
        assert!(methods.contains(method), "{methods}");
        let allowed = h["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .to_ascii_lowercase();
        for want in [
            "content-type",
            "authorization",
            "mcp-session-id",
            "mcp-protocol-version",
            "last-event-id",
        ] {
            assert!(allowed.contains(want), "{want} not in {allowed}");
        }
    }
    let r = client
        .post(&s.url)
        .header("origin", "https://app.example")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    for want in ["mcp-session-id", "x-mcp-resume-cursor", "www-authenticate"] {
        assert!(exposed.contains(want), "{want} not in {exposed}");
    }
    // A request without Origin skips CORS, but says what the response
    // varies by, as a CORS response does, so a cache keeps them apart.
    let r = client
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let vary = r.headers()["vary"].to_str().unwrap().to_ascii_lowercase();
    assert!(vary.contains("origin"), "{vary}");
    assert!(!r.headers().contains_key("access-control-allow-origin"));
    // Another origin gets no CORS grant, and its requests are refused.
    let r = client
        .request(reqwest::Method::OPTIONS, &s.url)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("access-control-allow-origin"));
    let r = client
        .post(&s.url)
        .header("origin", "https://evil.example")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn a_reader_that_never_reads_does_not_hold_up_shutdown() {
    let mut config = ServerConfig::default();
    config.conn_limits.shutdown_grace = Duration::from_secs(2);
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    // A reader that never reads its body while far more than the socket buffers is committed.
    let stalled = s.session_stream(&sid, None).send().await.unwrap();
    s.emit_and_wait(&sid, 200_000).await;
    let started = std::time::Instant::now();
    s.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    drop(stalled);
}

/// Calls `tool` on `sid` as a client that accepts only SSE (a request
/// stream); the response read from it (at most 15 s).
async fn call_on_request_stream(s: &TestServer, sid: &str, tool: &str, args: Value) -> Value {
    let resp = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .body(json!({"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":tool,"arguments":args}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read_sse(resp, 1, 15_000).await;
    let last = events
        .iter()
        .rfind(|e| !e.data.is_empty())
        .expect("the call ended with a response");
    serde_json::from_str(&last.data).unwrap()
}

#[tokio::test]
async fn a_call_whose_response_the_log_refuses_still_ends() {
    let (log, faults) = faulty(Retention::default());
    let mut config = ServerConfig::default();
    config.reply_deadline = Duration::from_secs(1);
    let s = TestServer::start_with(log, config).await;
    let sid = s.init().await;
    // A short outage: the response is retried until it lands.
    faults.refuse_appends.store(4, Ordering::SeqCst);
    let v = call_on_request_stream(&s, &sid, "echo", json!({"text": "after the outage"})).await;
    assert_eq!(v["result"]["content"][0]["text"], "after the outage", "{v}");
    assert_eq!(faults.refuse_appends.load(Ordering::SeqCst), 0);
    // An outage past the reply deadline: the call ends with an error in its
    // response's place once the log is back, never open and silent.
    faults.refuse_appends.store(1_000_000, Ordering::SeqCst);
    let heal = {
        let faults = faults.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            faults.refuse_appends.store(0, Ordering::SeqCst);
        })
    };
    let v = call_on_request_stream(&s, &sid, "echo", json!({"text": "lost"})).await;
    heal.await.unwrap();
    assert_eq!(v["id"], 41, "{v}");
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert_eq!(v["error"]["data"]["reason"], "commit-failed", "{v}");
}
