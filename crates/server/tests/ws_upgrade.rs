//! The cursor-safe upgrade (docs/protocol.md 5): a test per decision row and per
//! close code, with real WebSocket clients.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{next_frame, send_text, ws_connect, ws_upgrade, Frame, TestServer};
use mcp_resume_log::{MemoryLog, Retention};
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite;

const PROTO: (&str, &str) = ("sec-websocket-protocol", "mcp.resume.v1");

fn status_of(e: tungstenite::Error) -> (u16, Value, tungstenite::http::HeaderMap) {
    match e {
        tungstenite::Error::Http(resp) => {
            let body = resp
                .body()
                .clone()
                .map(|b| serde_json::from_slice(&b).unwrap())
                .unwrap_or(Value::Null);
            (resp.status().as_u16(), body, resp.headers().clone())
        }
        other => panic!("expected an HTTP refusal, got {other}"),
    }
}

#[tokio::test]
async fn row1_not_a_websocket_request_is_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let r = reqwest::Client::new()
        .get(s.events_url(&sid))
        .header("upgrade", "websocket")
        .header("connection", "keep-alive")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"], "invalid-upgrade");
}

#[tokio::test]
async fn row2_missing_subprotocol_or_wrong_version_is_426_and_changes_nothing() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 4).await;
    let (status, body, headers) = status_of(
        ws_connect(&s.ws_url(&sid), &[("last-event-id", "2")])
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 426);
    assert_eq!(body["error"], "upgrade-required");
    assert_eq!(body["subprotocols"], json!(["mcp.resume.v1"]));
    assert_eq!(headers["sec-websocket-version"], "13");
    let (status, _, _) = status_of(
        ws_connect(&s.ws_url(&sid), &[("sec-websocket-protocol", "graphql-ws")])
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 426);
    // A wrong version, sent raw (tungstenite always sends 13).
    let r = reqwest::Client::new()
        .get(s.events_url(&sid))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-version", "8")
        .header("sec-websocket-protocol", "mcp.resume.v1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 426);
    assert_eq!(r.headers()["sec-websocket-version"], "13");
    // The seed's second observation: an SSE resume from the same cursor still works.
    let resp = s.session_stream(&sid, Some("2")).send().await.unwrap();
    assert_eq!(
        common::seqs(&common::read_sse(resp, 2, 2000).await),
        vec![3, 4]
    );
}

#[tokio::test]
async fn row3_unknown_session_404_and_bad_cursors_400() {
    let s = TestServer::start(ServerConfig::default()).await;
    let (status, body, _) = status_of(ws_connect(&s.ws_url("nope"), &[PROTO]).await.unwrap_err());
    assert_eq!(status, 404);
    assert_eq!(body["error"], "session-not-found");
    let sid = s.init().await;
    for bad in ["x", "01", "3/1", "-2"] {
        let (status, body, _) = status_of(
            ws_connect(&s.ws_url(&sid), &[PROTO, ("last-event-id", bad)])
                .await
                .unwrap_err(),
        );
        assert_eq!(status, 400, "{bad}");
        assert_eq!(body["error"], "invalid-cursor");
    }
}

#[tokio::test]
async fn row4_ahead_and_truncated_are_409() {
    let mut retention = Retention::default();
    retention.max_events = 5;
    let log = Arc::new(MemoryLog::new(retention));
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 12).await;
    let (status, body, _) = status_of(
        ws_connect(&s.ws_url(&sid), &[PROTO, ("last-event-id", "13")])
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert_eq!(
        (
            body["reason"].as_str(),
            body["resume-cursor"].as_u64(),
            body["floor"].as_u64()
        ),
        (Some("ahead"), Some(12), Some(8))
    );
    let (status, body, _) = status_of(
        ws_connect(&s.ws_url(&sid), &[PROTO, ("last-event-id", "2")])
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert_eq!(body["reason"], "truncated");
    // prior = floor - 1 is still fine.
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(7)).await;
    assert_eq!(c, 12);
    for seq in 8..=12 {
        assert!(matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq));
    }
}

#[tokio::test]
async fn auth_is_checked_before_anything_else() {
    let mut config = ServerConfig::default();
    config.auth = mcp_resume_server::auth::Authenticator::bearer("tok");
    let s = TestServer::start(config).await;
    let (status, _, _) = status_of(
        ws_connect(&s.ws_url("whatever"), &[PROTO])
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 401);
    // The token as an offered subprotocol, for browsers; never echoed.
    let init = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .bearer_auth("tok")
        .body(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string())
        .send()
        .await
        .unwrap();
    let sid = init.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (_ws, resp) = ws_connect(
        &s.ws_url(&sid),
        &[("sec-websocket-protocol", "mcp.resume.v1, mcp.auth.tok")],
    )
    .await
    .unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "mcp.resume.v1");
    let (status, _, _) = status_of(
        ws_connect(
            &s.ws_url(&sid),
            &[("sec-websocket-protocol", "mcp.resume.v1, mcp.auth.bad")],
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status, 401);
}

#[tokio::test]
async fn row5_101_echoes_c_replays_prior_to_c_and_gates_until_the_ack() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 10).await;
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(4)).await;
    assert_eq!(c, 10);
    for seq in 5..=10 {
        assert!(
            matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq),
            "replay {seq}"
        );
    }
    // Events committed after the 101 are held until the ack.
    s.emit_and_wait(&sid, 5).await;
    assert_eq!(
        next_frame(&mut ws, 300).await,
        Frame::Timeout,
        "nothing above C before cursor-ack"
    );
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    for seq in 11..=15 {
        assert!(
            matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq),
            "live {seq}"
        );
    }
    // And live frames stay contiguous afterwards.
    s.emit_and_wait(&sid, 3).await;
    for seq in 16..=18 {
        assert!(matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq));
    }
}

#[tokio::test]
async fn heartbeats_carry_the_head() {
    let mut config = ServerConfig::default();
    config.keepalive = Duration::from_millis(150);
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 2).await;
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(2)).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    assert_eq!(next_frame(&mut ws, 1000).await, Frame::Heartbeat(2));
}

#[tokio::test]
async fn requests_over_the_socket_answer_in_the_session_stream() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(0)).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    send_text(&mut ws, r#"{"type":"message","message":{"jsonrpc":"2.0","id":"w1","method":"tools/call","params":{"name":"echo","arguments":{"text":"over ws"}}}}"#).await;
    match next_frame(&mut ws, 2000).await {
        Frame::Event(1, m) => {
            assert_eq!(m["id"], "w1");
            assert_eq!(m["result"]["content"][0]["text"], "over ws");
        }
        other => panic!("{other:?}"),
    }
    // It is in the log, readable over SSE too.
    assert_eq!(s.head(&sid).await, 1);
}

async fn acked(s: &TestServer, sid: &str) -> common::Ws {
    let (mut ws, c) = ws_upgrade(&s.ws_url(sid), Some(0)).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    ws
}

#[tokio::test]
async fn close_1003_on_binary() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let mut ws = acked(&s, &sid).await;
    use futures_util::SinkExt;
    ws.send(tungstenite::Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(1003));
}

#[tokio::test]
async fn close_1009_on_oversized_frames() {
    let mut config = ServerConfig::default();
    config.max_frame_bytes = 1024;
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    let mut ws = acked(&s, &sid).await;
    let big = format!(
        r#"{{"type":"message","message":{{"jsonrpc":"2.0","method":"x","params":{{"p":"{}"}}}}}}"#,
        "y".repeat(4096)
    );
    send_text(&mut ws, &big).await;
    // A close frame with 1009, not merely a dropped connection: `next_frame`
    // answers `Frame::Ended` for a stream that ends or errors without one.
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(1009));
    // The session and its log are untouched.
    s.emit_and_wait(&sid, 1).await;
}

#[tokio::test]
async fn close_4400_on_malformed_frames() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    for bad in [
        "not json",
        "[]",
        r#"{"type":"what"}"#,
        r#"{"type":"cursor-ack"}"#,
        r#"{"type":"message","message":3}"#,
    ] {
        let mut ws = acked(&s, &sid).await;
        send_text(&mut ws, bad).await;
        assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(4400), "{bad}");
    }
}

#[tokio::test]
async fn close_4404_when_the_session_ends() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let mut ws = acked(&s, &sid).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(4404));
}

#[tokio::test]
async fn close_4408_without_an_ack_and_the_pin_is_released() {
    let mut retention = Retention::default();
    retention.max_events = 3;
    let log = Arc::new(MemoryLog::new(retention));
    let mut config = ServerConfig::default();
    config.upgrade_timeout = Duration::from_millis(200);
    let s = TestServer::start_with(log, config).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 3).await;
    let (mut ws, _) = ws_upgrade(&s.ws_url(&sid), Some(0)).await;
    // While pinned, retention cannot pass seq 1.
    s.emit_and_wait(&sid, 5).await;
    assert_eq!(
        s.log
            .bounds(&sid, mcp_resume_log::StreamKey::Session)
            .await
            .unwrap()
            .floor,
        1
    );
    let mut closed = None;
    for _ in 0..10 {
        match next_frame(&mut ws, 1000).await {
            Frame::Event(..) => continue,
            other => {
                closed = Some(other);
                break;
            }
        }
    }
    assert_eq!(closed, Some(Frame::Close(4408)));
    s.emit_and_wait(&sid, 1).await;
    assert_eq!(
        s.log
            .bounds(&sid, mcp_resume_log::StreamKey::Session)
            .await
            .unwrap()
            .floor,
        7,
        "the pin is gone"
    );
}

#[tokio::test]
async fn close_4409_on_a_wrong_ack_or_a_second_ack() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 3).await;
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(3)).await;
    send_text(
        &mut ws,
        &format!(r#"{{"type":"cursor-ack","cursor":{}}}"#, c - 1),
    )
    .await;
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(4409));
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(3)).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    assert_eq!(next_frame(&mut ws, 2000).await, Frame::Close(4409));
}

#[tokio::test]
async fn close_4429_for_a_reader_too_far_behind() {
    let log = Arc::new(MemoryLog::with_subscriber_capacity(Retention::default(), 4));
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let sid = s.init().await;
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(0)).await;
    // Events pile up behind the gate beyond the reader's buffer.
    s.emit_and_wait(&sid, 20).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    let mut seen = Vec::new();
    let close = loop {
        match next_frame(&mut ws, 2000).await {
            Frame::Event(seq, _) => seen.push(seq),
            other => break other,
        }
    };
    assert_eq!(close, Frame::Close(4429));
    assert_eq!(
        seen,
        (1..=seen.len() as u64).collect::<Vec<_>>(),
        "what was sent is contiguous"
    );
    // It resumes from its cursor and gets the rest.
    let last = seen.last().copied().unwrap_or(0);
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(last)).await;
    assert_eq!(c, 20);
    for seq in last + 1..=20 {
        assert!(matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq));
    }
}

#[tokio::test]
async fn close_1001_on_shutdown() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let mut ws = acked(&s, &sid).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.shutdown().await;
    assert_eq!(next_frame(&mut ws, 3000).await, Frame::Close(1001));
}

#[tokio::test]
async fn a_client_that_disconnects_mid_replay_leaves_the_log_and_others_untouched() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 3000).await;
    let (ws, _) = ws_upgrade(&s.ws_url(&sid), Some(0)).await;
    drop(ws);
    let (mut ws, c) = ws_upgrade(&s.ws_url(&sid), Some(2990)).await;
    assert_eq!(c, 3000);
    for seq in 2991..=3000 {
        assert!(matches!(next_frame(&mut ws, 2000).await, Frame::Event(s, _) if s == seq));
    }
    assert_eq!(s.head(&sid).await, 3000);
}

#[tokio::test]
async fn legacy_mode_has_no_echo_no_replay_and_no_gate() {
    let mut config = ServerConfig::default();
    config.unsafe_legacy_upgrade = true;
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 5).await;
    let (mut ws, resp) = ws_connect(&s.ws_url(&sid), &[PROTO, ("last-event-id", "2")])
        .await
        .unwrap();
    assert!(resp.headers().get("x-mcp-resume-cursor").is_none());
    s.emit_and_wait(&sid, 2).await;
    // 3, 4, 5 are skipped: the failure, on purpose.
    assert!(matches!(
        next_frame(&mut ws, 2000).await,
        Frame::Event(6, _)
    ));
}
