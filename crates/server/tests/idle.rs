//! An open reader keeps its session alive: a client whose only traffic is
//! an open GET stream (an orchestrator waiting for
//! `notifications/tools/list_changed`) is not expired under it by the idle
//! TTL, and what is sent later still reaches that stream. A session nobody
//! reads and nobody posts to still ends.

mod common;

use std::time::Duration;

use common::TestServer;
use mcp_resume_server::ServerConfig;
use serde_json::json;

fn short_ttl() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.session_ttl = Duration::from_secs(2);
    config.keepalive = Duration::from_millis(500);
    config.maintenance_interval = Duration::from_millis(500);
    config
}

#[tokio::test]
async fn an_open_reader_keeps_its_session_alive_past_the_idle_ttl() {
    let s = TestServer::start(short_ttl()).await;
    let sid = s.init().await;
    let reader = s.session_stream(&sid, Some("0")).send().await.unwrap();
    assert_eq!(reader.status(), 200);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut parser = mcp_resume_client::sse::SseParser::new();
        let mut body = reader.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            for e in parser.feed(&chunk) {
                if !e.data.is_empty() {
                    s2.lock().unwrap().push(e.data);
                }
            }
        }
    });
    // Three TTLs with nothing but the open stream.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let r = s
        .post(Some(&sid), json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"emit","arguments":{"count":1}}}))
        .await;
    assert_eq!(
        r.status(),
        200,
        "the session idled out under its open reader"
    );
    let _ = r.text().await;
    for _ in 0..50 {
        if !seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        1,
        "the event reaches the stream that stayed open: {seen:?}"
    );
}

#[tokio::test]
async fn a_session_nobody_reads_still_ends_after_the_idle_ttl() {
    let s = TestServer::start(short_ttl()).await;
    let sid = s.init().await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = s
        .post(
            Some(&sid),
            json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}),
        )
        .await;
    assert_eq!(r.status(), 404);
}

/// The text of `/metrics`.
async fn metrics(s: &TestServer) -> String {
    reqwest::get(s.url.replace("/mcp", "/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// An idle session's handler is parked after `park_after` (its memory
/// freed) while its GET stream stays open, and the session's next call
/// makes it again: the call is answered and what it sends reaches the
/// stream that was open all along, with no gap.
#[tokio::test]
async fn an_idle_handler_is_parked_under_its_open_stream_and_made_again_on_the_next_call() {
    let mut config = short_ttl();
    config.session_ttl = Duration::from_secs(60);
    config.park_after = Some(Duration::from_secs(1));
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    let resp = s.session_stream(&sid, None).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let reader = tokio::spawn(common::read_sse(resp, 2, 10_000));
    s.emit_and_wait(&sid, 1).await;
    let parked = async {
        loop {
            if metrics(&s)
                .await
                .contains("mcp_resume_handlers_parked_total 1")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), parked)
        .await
        .expect("the idle handler was parked");
    s.emit_and_wait(&sid, 1).await;
    let events = reader.await.unwrap();
    assert_eq!(common::seqs(&events), vec![1, 2]);
    s.shutdown().await;
}
