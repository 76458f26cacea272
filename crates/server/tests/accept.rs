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
    let mut config = ServerConfig::default();
    config.conn_limits.header_read_timeout = header_read;
    config.conn_limits.keep_alive_idle = keep_alive;
    config
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
    read_response(stream).await
}

/// Reads one whole (Content-Length) response.
async fn read_response(stream: &mut TcpStream) -> String {
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
async fn after_a_post_whose_body_came_later_the_connection_is_idle_not_mid_header() {
    let (header_read, idle) = (Duration::from_secs(1), Duration::from_secs(3));
    let s = TestServer::start(config(header_read, idle)).await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: t\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).await.unwrap();
    // The body in a read of its own, while the request is in flight.
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.write_all(body).await.unwrap();
    let answer = read_response(&mut c).await;
    assert!(answer.contains("missing-session-id"), "{answer}");
    let served = Instant::now();
    let at = closed_after(&mut c, served, idle + Duration::from_secs(2))
        .await
        .expect("the idle connection was closed");
    // Timed as a header, it was cut off after the header timeout (1 s).
    assert!(
        at >= idle - Duration::from_millis(300),
        "closed by the header timeout, not as idle: {at:?}"
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

#[tokio::test]
async fn shutdown_stops_accepting_lets_in_flight_requests_finish_and_drops_stragglers_after_the_grace(
) {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_millis(700)).await;
                "done"
            }),
        )
        .route("/forever", get(std::future::pending::<&'static str>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let grace = Duration::from_millis(1500);
    let mut limits = ConnLimits::default();
    limits.shutdown_grace = grace;
    // Stops accepting at once (the drain's accepting part is its own test).
    limits.drain_accept = Duration::ZERO;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mcp_resume_server::accept::serve(
        listener,
        app,
        None,
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    let slow = tokio::spawn(reqwest::get(format!("http://{addr}/slow")));
    let forever = tokio::spawn(reqwest::get(format!("http://{addr}/forever")));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let signalled = Instant::now();
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after the signal"
    );
    // The in-flight request finishes.
    let resp = slow.await.unwrap().expect("the slow request finished");
    assert_eq!(resp.text().await.unwrap(), "done");
    // The one that never would is cut off at the grace, and serve returns.
    tokio::time::timeout(grace + Duration::from_secs(2), server)
        .await
        .expect("serve returned after the grace")
        .unwrap()
        .unwrap();
    let took = signalled.elapsed();
    assert!(took >= grace - Duration::from_millis(100), "{took:?}");
    assert!(forever.await.unwrap().is_err(), "the straggler was dropped");
}

/// For `drain_accept` after the signal, a new connection is still served,
/// and its answer (like any on a kept-alive connection) says
/// `Connection: close`; after it, nothing is accepted.
#[tokio::test]
async fn a_stopping_server_accepts_for_drain_accept_answering_with_connection_close() {
    use axum::routing::get;
    let app = axum::Router::new().route("/hi", get(|| async { "hi" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut limits = ConnLimits::default();
    limits.shutdown_grace = Duration::from_secs(3);
    limits.drain_accept = Duration::from_millis(800);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(mcp_resume_server::accept::serve(
        listener,
        app,
        None,
        limits,
        async move {
            let _ = stopped.await;
        },
    ));
    let client = reqwest::Client::new();
    let before = client
        .get(format!("http://{addr}/hi"))
        .send()
        .await
        .unwrap();
    assert!(before.headers().get("connection").is_none());
    stop.send(()).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A fresh connection, still accepted, told to close.
    let during = reqwest::Client::new()
        .get(format!("http://{addr}/hi"))
        .send()
        .await
        .expect("served while the drain still accepts");
    assert_eq!(during.headers()["connection"], "close");
    assert_eq!(during.text().await.unwrap(), "hi");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after drain_accept"
    );
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve returned")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let idle = Duration::from_secs(1);
    let s = TestServer::start(config(Duration::from_secs(60), idle)).await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2c prior knowledge");
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get(format!("http://{}/nowhere", s.addr))
        .body(axum::body::Body::empty())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    drop(resp);
    let served = Instant::now();
    tokio::time::timeout(idle + Duration::from_secs(2), conn)
        .await
        .expect("the server ended the idle HTTP/2 connection")
        .unwrap()
        .ok();
    let at = served.elapsed();
    assert!(
        at >= idle - Duration::from_millis(100),
        "closed too early: {at:?}"
    );
    s.shutdown().await;
}

#[tokio::test]
async fn an_http2_connection_with_a_long_stream_is_not_idle() {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let idle = Duration::from_secs(1);
    let s = TestServer::start(config(Duration::from_secs(1), idle)).await;
    let sid = s.init().await;
    let tcp = TcpStream::connect(s.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let get = |path: &str| hyper::Request::get(format!("http://{}{path}", s.addr));
    let req = get("/mcp")
        .header("mcp-session-id", &sid)
        .header("accept", "text/event-stream")
        .header("last-event-id", "0")
        .body(axum::body::Body::empty())
        .unwrap();
    let mut stream = send.send_request(req).await.unwrap().into_body();
    tokio::time::sleep(idle * 3).await;
    // No GOAWAY: the same connection still takes new streams.
    let req = get("/nowhere").body(axum::body::Body::empty()).unwrap();
    let resp = send
        .send_request(req)
        .await
        .expect("a new stream after 3 idle timeouts");
    assert_eq!(resp.status(), 404);
    s.emit_and_wait(&sid, 3).await;
    let mut parser = mcp_resume_client::sse::SseParser::new();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let frame = tokio::time::timeout(Duration::from_secs(5), stream.frame())
            .await
            .expect("events in time")
            .expect("the stream is open")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            let events = parser.feed(&data);
            seen.extend(events.into_iter().filter(|e| !e.data.is_empty()));
        }
    }
    assert_eq!(seqs(&seen), vec![1, 2, 3]);
    s.shutdown().await;
}

/// The HTTP/2 preface arriving in two parts is still served as HTTP/2 (the
/// server answers with its SETTINGS frame), and one that stops halfway is
/// closed at the header timeout like any slow header (accept/sniff.rs
/// leaves a partial preface to hyper-util's auto connection).
#[tokio::test]
async fn a_preface_in_two_parts_is_http2_and_half_of_one_is_cut_off() {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let timeout = Duration::from_secs(1);
    let s = TestServer::start(config(timeout, Duration::from_secs(60))).await;

    let mut split = TcpStream::connect(s.addr).await.unwrap();
    split.write_all(&PREFACE[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    split.write_all(&PREFACE[10..]).await.unwrap();
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    split.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.unwrap();
    let mut head = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), split.read_exact(&mut head))
        .await
        .expect("the server answered")
        .unwrap();
    assert_eq!(head[3], 4, "not an HTTP/2 SETTINGS frame: {head:?}");

    let start = Instant::now();
    let mut half = TcpStream::connect(s.addr).await.unwrap();
    half.write_all(&PREFACE[..10]).await.unwrap();
    let at = closed_after(&mut half, start, timeout + Duration::from_secs(2)).await;
    let at = at.expect("half a preface outlived the header timeout");
    assert!(
        at >= timeout - Duration::from_millis(100),
        "closed too early: {at:?}"
    );
    s.shutdown().await;
}

/// Reads a chunked body from `stream` (after its head) until the final
/// chunk, and whether the server then closed the connection.
async fn read_chunked(stream: &mut TcpStream, mut got: Vec<u8>) -> (String, bool) {
    let mut buf = [0u8; 4096];
    let mut body = Vec::new();
    loop {
        // Take whole chunks off the front of `got`.
        while let Some(line_end) = got.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&got[..line_end]).unwrap(), 16)
                .expect("a chunk size");
            if got.len() < line_end + 2 + size + 2 {
                break;
            }
            body.extend_from_slice(&got[line_end + 2..line_end + 2 + size]);
            assert_eq!(&got[line_end + 2 + size..line_end + 4 + size], b"\r\n");
            got.drain(..line_end + 4 + size);
            if size == 0 {
                let closed = closed_after(stream, Instant::now(), Duration::from_secs(5)).await;
                return (String::from_utf8(body).unwrap(), closed.is_some());
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("the body went on")
            .unwrap();
        assert!(
            n > 0,
            "closed before the final chunk: {:?}",
            String::from_utf8_lossy(&body)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// An HTTP/1.1 GET stream is written by the connection itself once hyper has
/// sent its head (`accept::handoff`): the head says `connection: close`, the
/// events arrive in chunked framing, and the session's end is the final chunk
/// and the connection's close.
#[tokio::test]
async fn an_http1_get_stream_is_handed_over_after_its_head_and_ends_with_a_final_chunk() {
    let s = TestServer::start(ServerConfig::default()).await;
    let sid = s.init().await;
    let mut c = TcpStream::connect(s.addr).await.unwrap();
    let path = s.url.split_once(&s.addr.to_string()).unwrap().1.to_owned();
    c.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\nMcp-Session-Id: {sid}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .expect("a head")
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    got.drain(..head_end + 4);

    s.emit_and_wait(&sid, 3).await;
    let del = reqwest::Client::new()
        .delete(&s.url)
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert!(del.status().is_success(), "{}", del.status());
    let (body, closed) = read_chunked(&mut c, got).await;
    let ids: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3"], "{body}");
    assert!(body.contains(": error session-ended"), "{body}");
    assert!(closed, "the connection closed after the final chunk");
    s.shutdown().await;
}
