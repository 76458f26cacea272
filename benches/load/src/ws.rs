//! WebSocket workloads (ours only): upgrade time safe vs legacy, events/s over
//! one WebSocket vs one SSE stream, RSS per idle upgraded WebSocket.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::workloads::{read_emits, session, Session};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn ws_url(s: &Session) -> String {
    format!(
        "{}/session/{}/events",
        s.url.replacen("http", "ws", 1),
        s.id
    )
}

/// Connects; returns the socket and the echoed cursor (None in legacy mode).
pub async fn connect(s: &Session, prior: u64) -> (Ws, Option<u64>) {
    let mut req = ws_url(s).into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", "mcp.resume.v1".parse().unwrap());
    req.headers_mut()
        .insert("last-event-id", prior.to_string().parse().unwrap());
    let (ws, resp) = tokio_tungstenite::connect_async(req)
        .await
        .expect("upgrade");
    let c = resp
        .headers()
        .get("x-mcp-resume-cursor")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (ws, c)
}

fn frame(m: Message) -> Option<Value> {
    match m {
        Message::Text(t) => serde_json::from_str(t.as_str()).ok(),
        _ => None,
    }
}

/// Connect, replay, ack and wait for the first live frame; returns the ms it took and the last seq.
async fn one_upgrade(s: &Session, prior: u64) -> (f64, u64) {
    let t = Instant::now();
    let (mut ws, c) = connect(s, prior).await;
    let mut last = prior;
    if let Some(c) = c {
        while last < c {
            let v = frame(ws.next().await.unwrap().unwrap()).unwrap();
            last = v["seq"].as_u64().unwrap();
        }
        ws.send(Message::Text(
            json!({"type":"cursor-ack","cursor":c}).to_string().into(),
        ))
        .await
        .unwrap();
    }
    loop {
        let v = frame(ws.next().await.unwrap().unwrap()).unwrap();
        if v["type"] == "event" {
            last = v["seq"].as_u64().unwrap();
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let _ = ws.close(None).await;
            return (ms, last);
        }
    }
}

/// Upgrade times on a server, `n` times, with events flowing every `interval_ms`.
pub async fn upgrade_times(url: &str, n: usize) -> Vec<f64> {
    let s = session(url).await;
    // Events keep flowing, so every upgrade races with appends and has a live frame to wait for.
    s.call(1, "emit", json!({"count": 10_000_000, "interval_ms": 1}))
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut prior = 0;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let (ms, last) = one_upgrade(&s, prior).await;
        times.push(ms);
        prior = last;
    }
    times
}

/// Events per second over one WebSocket and over one SSE stream, `count` events each.
pub async fn ws_vs_sse(url: &str, count: usize) -> (f64, f64) {
    let s = session(url).await;
    let (mut ws, c) = connect(&s, 0).await;
    ws.send(Message::Text(
        json!({"type":"cursor-ack","cursor":c.unwrap_or(0)})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let t = Instant::now();
    s.call(1, "emit", json!({"count": count, "interval_ms": 0}))
        .await;
    let mut n = 0;
    while n < count {
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(m))) => {
                if frame(m).is_some_and(|v| v["type"] == "event") {
                    n += 1;
                }
            }
            _ => break,
        }
    }
    let ws_rate = n as f64 / t.elapsed().as_secs_f64();
    let s = session(url).await;
    let resp = s.get(None).await;
    let t = Instant::now();
    let reader = tokio::spawn(read_emits(resp, count, Duration::from_secs(10)));
    s.call(1, "emit", json!({"count": count, "interval_ms": 0}))
        .await;
    let got = reader.await.unwrap().len();
    (ws_rate, got as f64 / t.elapsed().as_secs_f64())
}

/// (e) RSS per idle upgraded WebSocket, in bytes.
pub async fn rss_per_idle_ws(server: &crate::servers::Server, conns: usize) -> f64 {
    let per_session = 200;
    let mut sessions = Vec::new();
    for _ in 0..conns.div_ceil(per_session) {
        sessions.push(session(&server.url).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let mut held = Vec::with_capacity(conns);
    for (k, s) in sessions.iter().enumerate() {
        let n = per_session.min(conns - k * per_session);
        let mut tasks = futures_util::stream::FuturesUnordered::new();
        for _ in 0..n {
            tasks.push(async {
                let (mut ws, c) = connect(s, 0).await;
                ws.send(Message::Text(
                    json!({"type":"cursor-ack","cursor":c.unwrap_or(0)})
                        .to_string()
                        .into(),
                ))
                .await
                .unwrap();
                ws
            });
        }
        while let Some(ws) = tasks.next().await {
            held.push(ws);
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = server.rss_kib();
    let per = (after.saturating_sub(before) * 1024) as f64 / held.len() as f64;
    drop(held);
    per
}
