//! Two `serve` instances on one Redis: a session initialised on A is
//! readable, resumable and upgradable on B; POSTs go to either; `kill -9` of
//! the instance a reader is on loses nothing: it resumes on the other.

mod common;

use std::time::Duration;

use common::{read_until, rt, RedisServer, Serve};
use mcp_resume_client::{McpClient, ReaderOptions, Transport};
use serde_json::json;

#[test]
fn a_session_lives_on_every_instance_and_survives_the_loss_of_one() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str()];
    let mut a = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    let b = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    rt().block_on(async {
        // Initialised on A, emitting on A ...
        let mut on_a = McpClient::new(&a.url);
        on_a.initialize().await.unwrap();
        let sid = on_a.session_id().unwrap().to_owned();
        on_a.call_tool("emit", json!({"count": 20})).await.unwrap();
        // ... read, resumed and upgraded on B; POSTs to B work too.
        let on_b = McpClient::new(&b.url).with_session(&sid);
        assert_eq!(
            on_b.call_tool("echo", json!({"text": "b"})).await.unwrap()["content"][0]["text"],
            "b"
        );
        let mut sse_b = on_b
            .reader(ReaderOptions {
                from: Some(0),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            read_until(&mut sse_b, 20).await,
            (1..=20).collect::<Vec<_>>()
        );
        let mut ws_b = on_b
            .reader(ReaderOptions {
                transport: Transport::WebSocket,
                from: Some(12),
                max_retries: Some(40),
                ..Default::default()
            })
            .unwrap();
        // The seed's race across instances: emit on A while B upgrades.
        on_a.call_tool("emit", json!({"count": 100, "interval_ms": 2}))
            .await
            .unwrap();
        let got = read_until(&mut ws_b, 120).await;
        assert_eq!(got, (13..=120).collect::<Vec<_>>());
        assert_eq!(ws_b.fallbacks(), 0, "B echoes the cursor");
        // A reader on A; A is killed mid-stream; it resumes on B from its cursor.
        let mut on_a_reader = on_a
            .reader(ReaderOptions {
                transport: Transport::WebSocket,
                from: Some(120),
                ..Default::default()
            })
            .unwrap();
        on_b.call_tool("emit", json!({"count": 200, "interval_ms": 1}))
            .await
            .unwrap();
        let mut seen = read_until(&mut on_a_reader, 150).await;
        a.kill9();
        let cursor = on_a_reader.cursor().unwrap();
        let mut moved = on_b
            .reader(ReaderOptions {
                transport: Transport::WebSocket,
                from: Some(cursor),
                ..Default::default()
            })
            .unwrap();
        seen.extend(read_until(&mut moved, 320).await);
        assert_eq!(
            seen,
            (121..=320).collect::<Vec<_>>(),
            "nothing lost, nothing twice, across the failover"
        );
    });
    drop(b);
}

#[test]
fn redis_unreachable_answers_503_with_retry_after_and_recovers_by_itself() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(dir.path(), "127.0.0.1:0", &["--store", redis.url.as_str()]);
    rt().block_on(async {
        let mut client = McpClient::new(&serve.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        redis.stop();
        let http = reqwest::Client::new();
        let r = http
            .get(&serve.url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "log-unavailable");
        // Redis returns (empty: it keeps nothing on disk): the instance recovers by itself.
        redis.restart();
        let mut ok = false;
        for _ in 0..50 {
            let mut c = McpClient::new(&serve.url);
            if c.initialize().await.is_ok() {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "new sessions work again once Redis is back");
        // The old session died with Redis's memory: loudly 404, never silently empty.
        let r = http
            .get(&serve.url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
    });
}
