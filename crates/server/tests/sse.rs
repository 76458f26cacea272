//! The session stream over SSE (docs/protocol.md 4) and request streams.

mod common;

use std::time::Duration;

use common::{read_sse, seqs, TestServer};
use mcp_resume_server::ServerConfig;
use serde_json::json;

#[tokio::test]
async fn priming_event_then_replay_then_live_with_headers() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 5).await;
    let resp = s.session_stream(&sid, Some("2")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.headers()["cache-control"], "no-cache");
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let reader = tokio::spawn(read_sse(resp, 8, 3000));
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.emit_and_wait(&sid, 5).await;
    let events = reader.await.unwrap();
    // priming: id = cursor, retry, empty data
    assert_eq!(events[0].id.as_deref(), Some("2"));
    assert!(events[0].retry.is_some());
    assert_eq!(events[0].data, "");
    assert_eq!(seqs(&events), (3..=10).collect::<Vec<_>>());
    let e = &events[1];
    assert_eq!(e.event.as_deref(), Some("message"));
    let msg: serde_json::Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(msg["method"], "notifications/message");
    assert_eq!(msg["params"]["logger"], "emit");
    assert_eq!(msg["params"]["data"]["i"], 3);
}

#[tokio::test]
async fn no_cursor_starts_at_the_floor_and_zero_is_checked() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 3).await;
    let events = read_sse(s.session_stream(&sid, None).send().await.unwrap(), 3, 2000).await;
    assert_eq!(events[0].id.as_deref(), Some("0"));
    assert_eq!(seqs(&events), vec![1, 2, 3]);
    let events = read_sse(
        s.session_stream(&sid, Some("0")).send().await.unwrap(),
        3,
        2000,
    )
    .await;
    assert_eq!(seqs(&events), vec![1, 2, 3]);
    // The events path with the query parameter, for EventSource.
    let r = reqwest::Client::new()
        .get(format!("{}?last_event_id=1", s.events_url(&sid)))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(seqs(&read_sse(r, 2, 2000).await), vec![2, 3]);
}

#[tokio::test]
async fn many_readers_each_from_their_own_cursor_see_no_gap_at_the_seam() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    s.emit_and_wait(&sid, 50).await;
    // Readers connect while a slow emit is running: the replay/live seam races with appends.
    s.call(&sid, "emit", json!({"count": 200, "interval_ms": 1}))
        .await;
    let mut readers = Vec::new();
    for k in 0..8u64 {
        let resp = s
            .session_stream(&sid, Some(&(k * 6).to_string()))
            .send()
            .await
            .unwrap();
        readers.push((
            k * 6,
            tokio::spawn(read_sse(resp, (250 - k * 6) as usize, 5000)),
        ));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    for (from, r) in readers {
        let got = seqs(&r.await.unwrap());
        assert_eq!(
            got,
            (from + 1..=250).collect::<Vec<_>>(),
            "reader from {from}"
        );
    }
}

#[tokio::test]
async fn keepalive_comments_flow_in_silence() {
    let mut config = ServerConfig::default();
    config.keepalive = Duration::from_millis(100);
    let s = TestServer::start(config).await;
    let sid = s.init().await;
    let resp = s.session_stream(&sid, None).send().await.unwrap();
    let mut body = resp.bytes_stream();
    use futures_util::StreamExt;
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while !text.contains(": keepalive") && tokio::time::Instant::now() < deadline {
        if let Ok(Some(Ok(c))) = tokio::time::timeout(Duration::from_millis(500), body.next()).await
        {
            text.push_str(&String::from_utf8_lossy(&c));
        }
    }
    assert!(text.contains(": keepalive\n"), "{text:?}");
}

#[tokio::test]
async fn request_stream_resumes_with_last_event_id_r_n() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let resp = s
        .post(
            Some(&sid),
            json!({"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"progress","arguments":{"steps":6,"interval_ms":40},"_meta":{"progressToken":"tok"}}}),
        )
        .await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    // Read two progress events, then drop the connection.
    let first = read_sse(resp, 2, 3000).await;
    let ids: Vec<_> = first.iter().filter_map(|e| e.id.clone()).collect();
    assert_eq!(ids, vec!["1/0", "1/1", "1/2"]);
    // The work goes on; resume from 1/2.
    let resp = s.session_stream(&sid, Some("1/2")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let rest = read_sse(resp, 5, 3000).await;
    let ids: Vec<_> = rest
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| e.id.clone().unwrap())
        .collect();
    assert_eq!(ids, vec!["1/3", "1/4", "1/5", "1/6", "1/7"]);
    let last: serde_json::Value = serde_json::from_str(&rest.last().unwrap().data).unwrap();
    assert_eq!(last["id"], 9);
    assert_eq!(last["result"]["content"][0]["text"], "done after 6 steps");
    let p: serde_json::Value = serde_json::from_str(&rest[1].data).unwrap();
    assert_eq!(p["params"]["progressToken"], "tok");
    assert_eq!(p["params"]["total"], 6);
    // A request stream that does not exist.
    assert_eq!(
        s.session_stream(&sid, Some("7/0"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
}

#[tokio::test]
async fn tools_list_changed_reaches_the_session_stream() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let resp = s.session_stream(&sid, None).send().await.unwrap();
    let reader = tokio::spawn(read_sse(resp, 2, 3000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.call(&sid, "register_tool", json!({"name": "extra"}))
        .await;
    let list: serde_json::Value = s
        .post(
            Some(&sid),
            json!({"jsonrpc":"2.0","id":3,"method":"tools/list"}),
        )
        .await
        .json()
        .await
        .unwrap();
    let names: Vec<_> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"extra".to_owned()) && names.contains(&"echo".to_owned()),
        "{names:?}"
    );
    s.call(&sid, "unregister_tool", json!({"name": "extra"}))
        .await;
    let events = reader.await.unwrap();
    let methods: Vec<String> = events
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| {
            serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["method"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(methods, vec!["notifications/tools/list_changed"; 2]);
    // Calling a dynamic tool works while registered, not after.
    let r = s.call(&sid, "extra", json!({})).await;
    assert_eq!(r["error"]["code"], -32602);
}

#[tokio::test]
async fn shutdown_ends_sse_streams() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let resp = s.session_stream(&sid, None).send().await.unwrap();
    let reader = tokio::spawn(read_sse(resp, 100, 5000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    s.shutdown().await;
    let _ = reader.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the stream ended with the server"
    );
}

#[tokio::test]
async fn http2_prior_knowledge_carries_many_session_streams_on_one_connection() {
    let s = TestServer::start(ServerConfig::default()).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let mut readers = Vec::new();
    let mut sids = Vec::new();
    for _ in 0..5 {
        let resp = h2
            .post(&s.url)
            .header("content-type", "application/json")
            .body(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"h2","version":"1"}}}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let stream = h2
            .get(&s.url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        readers.push(tokio::spawn(read_sse(stream, 3, 3000)));
        sids.push(sid);
    }
    for sid in &sids {
        s.emit_and_wait(sid, 3).await;
    }
    for r in readers {
        assert_eq!(seqs(&r.await.unwrap()), vec![1, 2, 3]);
    }
}
