//! Every row of the error table of docs/protocol.md 3, sent to a running server.

mod common;

use common::TestServer;
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};

async fn body(resp: reqwest::Response) -> Value {
    assert_eq!(
        resp.headers()["content-type"],
        "application/json",
        "error bodies are JSON"
    );
    let v: Value = resp.json().await.unwrap();
    v
}

fn assert_error(v: &Value, code: &str) {
    assert_eq!(v["error"], code, "{v}");
    assert!(
        v["message"].as_str().is_some_and(|m| !m.is_empty()),
        "a human message: {v}"
    );
}

#[tokio::test]
async fn unknown_expired_or_deleted_session_is_404() {
    let s = TestServer::start(ServerConfig::default()).await;
    let r = s
        .post(
            Some("no-such-session"),
            json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        )
        .await;
    assert_eq!(r.status(), 404);
    assert_error(&body(r).await, "session-not-found");
    let sid = s.init().await;
    let c = reqwest::Client::new();
    let r = c
        .delete(&s.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // Every later use of that id: POST, GET, DELETE, the events path, the upgrade.
    assert_eq!(
        s.post(Some(&sid), json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
            .await
            .status(),
        404
    );
    let r = c
        .get(&s.url)
        .header("mcp-session-id", &sid)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        c.delete(&s.url)
            .header("mcp-session-id", &sid)
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    let r = c
        .get(s.events_url(&sid))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn idle_sessions_expire_to_404() {
    let mut cfg = ServerConfig::default();
    cfg.session_ttl = std::time::Duration::from_millis(100);
    cfg.maintenance_interval = std::time::Duration::from_millis(50);
    let s = TestServer::start(cfg).await;
    let sid = s.init().await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let r = s
        .post(Some(&sid), json!({"jsonrpc":"2.0","id":1,"method":"ping"}))
        .await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn request_without_session_is_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let r = s
        .post(None, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"}))
        .await;
    assert_eq!(r.status(), 400);
    assert_error(&body(r).await, "missing-session-id");
}

#[tokio::test]
async fn unsupported_protocol_version_is_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "1999-01-01")
        .body(json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_error(&body(r).await, "unsupported-protocol-version");
    // A supported revision other than the session's negotiated one is refused too.
    // The last two come after a request that fit: the session's revision is
    // then kept with its route, and a mismatch is still refused.
    for (v, status) in [
        ("2025-03-26", 400),
        ("2025-06-18", 400),
        ("2025-11-25", 200),
        ("2025-06-18", 400),
        ("2025-11-25", 200),
    ] {
        let r = reqwest::Client::new()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", v)
            .body(json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{v}");
        if status == 400 {
            assert_error(&body(r).await, "protocol-version-mismatch");
        }
    }
}

#[tokio::test]
async fn foreign_origin_is_403_and_loopback_is_allowed() {
    let s = TestServer::start(ServerConfig::default()).await;
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let send = |origin: &'static str| {
        reqwest::Client::new()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("origin", origin)
            .body(init.to_string())
            .send()
    };
    let r = send("http://evil.example").await.unwrap();
    assert_eq!(r.status(), 403);
    assert_error(&body(r).await, "origin-not-allowed");
    assert_eq!(send("http://localhost:3000").await.unwrap().status(), 200);
    assert_eq!(send("http://127.0.0.1:9").await.unwrap().status(), 200);
    assert_eq!(
        send("http://localhost.evil.example")
            .await
            .unwrap()
            .status(),
        403
    );
}

#[tokio::test]
async fn missing_accept_is_406() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "text/plain")
        .header("mcp-session-id", &sid)
        .body(json!({"jsonrpc":"2.0","id":1,"method":"ping"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    assert_error(&body(r).await, "not-acceptable");
    let r = reqwest::Client::new()
        .get(&s.url)
        .header("mcp-session-id", &sid)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
}

#[tokio::test]
async fn wrong_content_type_is_415() {
    let s = TestServer::start(ServerConfig::default()).await;
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    assert_error(&body(r).await, "unsupported-media-type");
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let mut config = ServerConfig::default();
    config.max_body_bytes = 1024;
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    let big = "x".repeat(4096);
    let r = s.post(Some(&sid), json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":big}}})).await;
    assert_eq!(r.status(), 413);
    assert_error(&body(r).await, "body-too-large");
    // The session is intact.
    assert_eq!(
        s.call(&sid, "echo", json!({"text":"still here"})).await["result"]["content"][0]["text"],
        "still here"
    );
}

#[tokio::test]
async fn malformed_json_and_json_rpc_are_400_with_json_rpc_errors() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let raw = |b: &'static str| {
        reqwest::Client::new()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .body(b)
            .send()
    };
    let r = raw("{not json").await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32700);
    assert_eq!(v["id"], Value::Null);
    for bad in [
        r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
        r#"42"#,
        r#"{"jsonrpc":"2.0"}"#,
    ] {
        let r = raw(bad).await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32600, "{bad}");
        assert_eq!(v["id"], Value::Null);
    }
}

#[tokio::test]
async fn path_id_differing_from_header_is_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let a = s.init().await;
    let b = s.init().await;
    let r = reqwest::Client::new()
        .get(s.events_url(&a))
        .header("mcp-session-id", &b)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_error(&body(r).await, "session-mismatch");
}

#[tokio::test]
async fn cursors_that_cannot_be_honoured_are_409_and_malformed_ones_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 3).await;
    let get = |cursor: &str| s.session_stream(&sid, Some(cursor)).send();
    let r = get("9").await.unwrap();
    assert_eq!(r.status(), 409);
    let v = body(r).await;
    assert_eq!(v["error"], "cursor-discontinuity");
    assert_eq!(v["reason"], "ahead");
    assert_eq!(v["resume-cursor"], 3);
    assert_eq!(v["head"], 3);
    assert_eq!(v["floor"], 1);
    for bad in ["-1", "01", "abc", "1/", "18446744073709551616", "0/1"] {
        let r = get(bad).await.unwrap();
        assert_eq!(r.status(), 400, "{bad}");
        assert_error(&body(r).await, "invalid-cursor");
    }
    // The query parameter is checked the same way.
    let r = reqwest::Client::new()
        .get(format!("{}?last_event_id=x", s.events_url(&sid)))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn truncated_cursor_is_409() {
    let mut retention = mcp_resume_log::Retention::default();
    retention.max_events = 5;
    let log = std::sync::Arc::new(mcp_resume_log::MemoryLog::new(retention));
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 20).await;
    let r = s.session_stream(&sid, Some("3")).send().await.unwrap();
    assert_eq!(r.status(), 409);
    let v = body(r).await;
    assert_eq!(v["reason"], "truncated");
    assert_eq!(v["floor"], 16);
    assert_eq!(v["head"], 20);
}

#[tokio::test]
async fn bearer_token_is_required_when_set() {
    let mut config = ServerConfig::default();
    config.auth = mcp_resume_server::auth::Authenticator::bearer("s3cret");
    let s = TestServer::start(config).await;
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = s.post(None, init.clone()).await;
    assert_eq!(r.status(), 401);
    assert_error(&body(r).await, "unauthorized");
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .bearer_auth("wrong")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .bearer_auth("s3cret")
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn session_ids_are_long_random_and_visible_ascii() {
    let s = TestServer::start(ServerConfig::default()).await;
    let a = s.init().await;
    let b = s.init().await;
    assert_ne!(a, b);
    assert!(a.len() * 4 >= 128, "at least 128 bits");
    assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c)));
}

#[tokio::test]
async fn batches_of_2025_03_26_are_answered_and_later_revisions_refuse_them() {
    let s = TestServer::start(ServerConfig::default()).await;
    let batch = json!([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]);
    let sid = s.init_version("2025-03-26").await;
    let r = s.post(Some(&sid), batch.clone()).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    // Batching was removed in 2025-06-18.
    for version in ["2025-06-18", "2025-11-25"] {
        let sid = s.init_version(version).await;
        let r = s.post(Some(&sid), batch.clone()).await;
        assert_eq!(r.status(), 400, "{version}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32600, "{version}: {v}");
    }
}

#[tokio::test]
async fn caps_on_sessions_and_request_streams_answer_429() {
    let mut config = ServerConfig::default();
    config.max_sessions = 2;
    config.max_request_streams = 1;
    let s = TestServer::start(config).await;
    let a = s.init().await;
    let _b = s.init().await;
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let r = s.post(None, init.clone()).await;
    assert_eq!(r.status(), 429);
    assert_error(&body(r).await, "limit-reached");
    // Ending a session makes room.
    reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", &a)
        .send()
        .await
        .unwrap();
    let r = s.post(None, init).await;
    assert_eq!(r.status(), 200);
    let c = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    // One request stream per session here: the second SSE-answered call is refused.
    let progress = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"progress","arguments":{"steps":1}}});
    assert_eq!(s.post(Some(&c), progress.clone()).await.status(), 200);
    for _ in 0..20 {
        let r = s.post(Some(&c), progress.clone()).await;
        assert_eq!(r.status(), 429);
        assert_error(&body(r).await, "limit-reached");
    }
    // The refusals wrote nothing: the session still opened one stream.
    assert_eq!(s.log.request_streams(&c).await.unwrap(), 1);
}

/// A 2026-07-28 (stateless) request to a server that speaks only the session
/// era: -32022 naming the session revisions, so a probing client initializes.
#[tokio::test]
async fn a_stateless_era_request_to_a_session_only_server_names_the_session_revisions() {
    let s = TestServer::start(ServerConfig::default()).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let c = reqwest::Client::new();
    let send = |method: &'static str, version: &'static str| {
        c.post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method)
            .body(
                json!({"jsonrpc":"2.0","id":5,"method":method,"params":{"_meta":meta}}).to_string(),
            )
            .send()
    };
    let r = send("server/discover", "2026-07-28").await.unwrap();
    assert_eq!(r.status(), 400);
    let v = body(r).await;
    assert_eq!(v["id"], 5, "{v}");
    assert_eq!(v["error"]["code"], -32022, "{v}");
    assert_eq!(v["error"]["data"]["supported"][0], "2025-11-25", "{v}");
    assert_eq!(v["error"]["data"]["requested"], "2026-07-28", "{v}");
    // The removed handshake: 404 with -32601.
    let r = send("initialize", "2026-07-28").await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(body(r).await["error"]["code"], -32601);
    // The 2025 handshake on the same URL still opens a session.
    let sid = s.init().await;
    assert_eq!(sid.len(), 64);
    // A stateless-era client has no stream to GET and no session to DELETE.
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = c
            .request(method.clone(), &s.url)
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method}");
    }
}

/// A stateless-era notification (2026-07-28 defines no header rules for
/// them, and a request is cancelled by closing its stream): 202, whatever
/// its headers; a response to a server request that era never sends: 400.
#[tokio::test]
async fn stateless_era_notifications_are_accepted_and_stray_responses_refused() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let r = c
        .post(&s.url)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .body(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x","_meta":meta}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let r = c
        .post(&s.url)
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .body(json!({"jsonrpc":"2.0","id":"mr.1","result":{}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(body(r).await["error"]["code"], -32600);
}
