//! The accept loop's connection limits, on real sockets: slow request
//! headers are cut off, idle keep-alive connections are closed, busy ones
//! are not.

mod common;

use std::time::{Duration, Instant};

use common::{read_sse, seqs, TestServer};
use mcp_resume_server::{ConnLimits, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(header_read: Duration, keep_alive: Duration) -> ServerConfig {
    ServerConfig {
        conn_limits: ConnLimits {
            header_read_timeout: header_read,
            keep_alive_idle: keep_alive,
            ..ConnLimits::default()
        },
        ..ServerConfig::default()
    }
}

/// Reads until the server closes (EOF or reset) or `within` passes; returns
/// when it closed, measured from `since`, or `None` if it stayed open.
async fn closed_after(
    stream: &mut TcpStream,
    since: Instant,
    within: Duration,
) -> Option<Duration> {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::from_std(since + within);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(since.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

/// Sends one whole request and reads its whole (Content-Length) response.
async fn one_request(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("a response")
            .unwrap();
        assert!(n > 0, "closed before the response ended");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
    }
}

#[tokio::test]
async fn slowloris_connections_are_closed_after_the_header_timeout_while_requests_still_work() {
    let timeout = Duration::from_secs(1);
    // A long keep-alive, so only the header timeout can close these.
    let s = TestServer::start(config(timeout, Duration::from_secs(60))).await;
    let start = Instant::now();
    let mut slow = Vec::new();
    for i in 0..100 {
        let mut c = TcpStream::connect(s.addr).await.unwrap();
        c.write_all(format!("POST /mcp HTTP/1.1\r\nHost: t\r\nX-Slow-{i}: ").as_bytes())
            .await
            .unwrap();
        slow.push(c);
    }
    // Connected, said nothing: the first request is due from the start.
    let mut silent = TcpStream::connect(s.addr).await.unwrap();
    // One request served, then half of the next: due from its first byte.
    let mut second = TcpStream::connect(s.addr).await.unwrap();
    assert!(one_request(&mut second).await.starts_with("HTTP/1.1 404"));
    second.write_all(b"GET /mcp HTTP/1.1\r\nHo").await.unwrap();
    let second_start = Instant::now();

    // Meanwhile a normal client is served.
    let sid = s.init().await;
    let r = s
        .call(&sid, "echo", serde_json::json!({"text": "still here"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "still here", "{r}");

    let margin = Duration::from_secs(2);
    for (i, c) in slow.iter_mut().enumerate() {
        let at = closed_after(c, start, timeout + margin).await;
        let at = at.unwrap_or_else(|| {
            panic!(
                "slow connection {i} still open after {:?}",
                timeout + margin
            )
        });
        assert!(
            at >= timeout - Duration::from_millis(100),
            "connection {i} closed too early: {at:?}"
        );
    }
    let at = closed_after(&mut silent, start, timeout + margin).await;
    assert!(
        at.is_some(),
        "a silent connection outlived the header timeout"
    );
    let at = closed_after(&mut second, second_start, timeout + margin).await;
    assert!(
        at.is_some(),
        "half a second request outlived the header timeout"
    );
    // And the server still serves after all that.
    let r = s
        .call(&sid, "echo", serde_json::json!({"text": "after"}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "after", "{r}");
    s.shutdown().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_secs(1);
    // A long header timeout, so only the idle timeout can close it.
    let s = TestServer::start(config(Duration::from_secs(60), idle)).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    assert!(one_request(&mut c).await.starts_with("HTTP/1.1 404"));
    // Still usable as keep-alive right after.
    assert!(one_request(&mut c).await.starts_with("HTTP/1.1 404"));
    let served = Instant::now();
    let at = closed_after(&mut c, served, idle + Duration::from_secs(2))
        .await
        .expect("the idle connection was closed");
    assert!(
        at >= idle - Duration::from_millis(100),
        "closed too early: {at:?}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn a_long_stream_outlives_the_idle_timeout() {
    let s = TestServer::start(config(Duration::from_secs(1), Duration::from_secs(1))).await;
    let sid = s.init().await;
    let resp = s.session_stream(&sid, Some("0")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let reader = tokio::spawn(read_sse(resp, 3, 5000));
    // Three times the idle timeout with the response in flight, then events.
    tokio::time::sleep(Duration::from_secs(3)).await;
    s.emit_and_wait(&sid, 3).await;
    let events = reader.await.unwrap();
    assert_eq!(seqs(&events), vec![1, 2, 3]);
    s.shutdown().await;
}
