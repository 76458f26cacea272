//! A real server on 127.0.0.1 for each test, and raw clients to poke it.

#![allow(dead_code)]

pub mod faulty;
pub mod leased;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use mcp_resume_log::{Log, MemoryLog};
use mcp_resume_server::{demo::demo_tools, McpServer, ServerConfig};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

pub type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct TestServer {
    pub url: String,
    pub addr: std::net::SocketAddr,
    pub log: Arc<dyn Log>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> Self {
        Self::start_with(Arc::new(MemoryLog::default()), config).await
    }

    pub async fn start_with(log: Arc<dyn Log>, config: ServerConfig) -> Self {
        Self::start_full(log, demo_tools(), config).await
    }

    pub async fn start_full(
        log: Arc<dyn Log>,
        tools: mcp_resume_server::ToolRegistry,
        config: ServerConfig,
    ) -> Self {
        let base = config.base_path.clone();
        Self::start_server(McpServer::new(log, tools, config), &base).await
    }

    /// Serves `server` (its endpoint at `base`, the config's `base_path`).
    pub async fn start_server(server: McpServer, base: &str) -> Self {
        Self::serving(server, base, |server, listener, stopped| {
            tokio::spawn(server.serve(listener, async move {
                let _ = stopped.await;
            }))
        })
        .await
    }

    /// Serves `server` as an application that merged its router serves it
    /// (`serve_app`), the router passed through `wrap` first.
    pub async fn start_app(
        server: McpServer,
        base: &str,
        wrap: impl FnOnce(axum::Router) -> axum::Router,
    ) -> Self {
        Self::serving(server, base, |server, listener, stopped| {
            let app = wrap(server.router());
            tokio::spawn(server.serve_app(listener, app, async move {
                let _ = stopped.await;
            }))
        })
        .await
    }

    /// `server` on a port of its own, started by `spawn` with the signal
    /// that `shutdown` sends.
    async fn serving(
        server: McpServer,
        base: &str,
        spawn: impl FnOnce(
            McpServer,
            tokio::net::TcpListener,
            oneshot::Receiver<()>,
        ) -> tokio::task::JoinHandle<std::io::Result<()>>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = server.log().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = spawn(server, listener, stopped);
        Self {
            url: format!("http://{addr}{base}"),
            addr,
            log,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops like SIGTERM does, and waits for a clean exit.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("shutdown in time")
                .unwrap()
                .unwrap();
        }
    }

    pub fn events_url(&self, sid: &str) -> String {
        format!("{}/session/{sid}/events", self.url)
    }

    /// `GET` of the session stream over SSE, from `cursor` (`Last-Event-ID`) if given.
    pub fn session_stream(&self, sid: &str, cursor: Option<&str>) -> reqwest::RequestBuilder {
        let mut rb = reqwest::Client::new()
            .get(&self.url)
            .header("mcp-session-id", sid)
            .header("accept", "text/event-stream");
        if let Some(c) = cursor {
            rb = rb.header("last-event-id", c);
        }
        rb
    }

    pub fn ws_url(&self, sid: &str) -> String {
        self.events_url(sid).replacen("http", "ws", 1)
    }

    pub async fn post(&self, sid: Option<&str>, body: Value) -> reqwest::Response {
        let mut rb = reqwest::Client::new()
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = sid {
            rb = rb.header("mcp-session-id", s);
        }
        rb.body(body.to_string()).send().await.unwrap()
    }

    /// A new session, initialised.
    pub async fn init(&self) -> String {
        self.init_version("2025-11-25").await
    }

    /// A new session on MCP revision `version`, initialised.
    pub async fn init_version(&self, version: &str) -> String {
        let resp = self
            .post(None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":version,"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}))
            .await;
        assert_eq!(resp.status(), 200);
        let sid = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let r = self
            .post(
                Some(&sid),
                json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            )
            .await;
        assert_eq!(r.status(), 202);
        sid
    }

    pub async fn call(&self, sid: &str, tool: &str, args: Value) -> Value {
        let resp = self
            .post(Some(sid), json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":tool,"arguments":args}}))
            .await;
        assert_eq!(resp.status(), 200);
        resp.json().await.unwrap()
    }

    /// `emit` and wait until the log holds `count` more events.
    pub async fn emit_and_wait(&self, sid: &str, count: u64) -> u64 {
        let before = self
            .log
            .bounds(sid, mcp_resume_log::StreamKey::Session)
            .await
            .unwrap()
            .head;
        self.call(sid, "emit", json!({"count": count})).await;
        let want = before + count;
        for _ in 0..500 {
            if self
                .log
                .bounds(sid, mcp_resume_log::StreamKey::Session)
                .await
                .unwrap()
                .head
                >= want
            {
                return want;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("emit did not commit {count} events in time");
    }

    pub async fn head(&self, sid: &str) -> u64 {
        self.log
            .bounds(sid, mcp_resume_log::StreamKey::Session)
            .await
            .unwrap()
            .head
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A WebSocket upgrade with the given extra headers.
pub async fn ws_connect(
    url: &str,
    headers: &[(&str, &str)],
) -> Result<(Ws, tungstenite::handshake::client::Response), tungstenite::Error> {
    let mut req = url.into_client_request().unwrap();
    for (k, v) in headers {
        req.headers_mut().insert(
            tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    tokio_tungstenite::connect_async(req).await
}

/// The safe upgrade with subprotocol and cursor.
pub async fn ws_upgrade(url: &str, prior: Option<u64>) -> (Ws, u64) {
    let p = prior.map(|p| p.to_string());
    let mut h = vec![("sec-websocket-protocol", "mcp.resume.v1")];
    if let Some(p) = &p {
        h.push(("last-event-id", p.as_str()));
    }
    let (ws, resp) = ws_connect(url, &h).await.expect("101");
    let c = resp.headers()["x-mcp-resume-cursor"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (ws, c)
}

#[derive(Debug, PartialEq)]
pub enum Frame {
    Event(u64, Value),
    Heartbeat(u64),
    Close(u16),
    Ended,
    Timeout,
}

/// The next frame within `ms`.
pub async fn next_frame(ws: &mut Ws, ms: u64) -> Frame {
    loop {
        match tokio::time::timeout(Duration::from_millis(ms), ws.next()).await {
            Err(_) => return Frame::Timeout,
            Ok(None) | Ok(Some(Err(_))) => return Frame::Ended,
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                return match v["type"].as_str().unwrap() {
                    "event" => Frame::Event(v["seq"].as_u64().unwrap(), v["message"].clone()),
                    "heartbeat" => Frame::Heartbeat(v["head"].as_u64().unwrap()),
                    other => panic!("unknown frame {other}"),
                };
            }
            Ok(Some(Ok(Message::Close(f)))) => {
                return Frame::Close(f.map(|f| u16::from(f.code)).unwrap_or(1005))
            }
            Ok(Some(Ok(_))) => continue,
        }
    }
}

pub async fn send_text(ws: &mut Ws, text: &str) {
    use futures_util::SinkExt;
    ws.send(Message::Text(text.into())).await.unwrap();
}

/// Reads SSE from a response until `n` message events or `ms` of silence.
pub async fn read_sse(
    resp: reqwest::Response,
    n: usize,
    ms: u64,
) -> Vec<mcp_resume_client::sse::SseEvent> {
    let mut parser = mcp_resume_client::sse::SseParser::new();
    let mut body = resp.bytes_stream();
    let mut out = Vec::new();
    while out
        .iter()
        .filter(|e: &&mcp_resume_client::sse::SseEvent| !e.data.is_empty())
        .count()
        < n
    {
        match tokio::time::timeout(Duration::from_millis(ms), body.next()).await {
            Ok(Some(Ok(chunk))) => out.extend(parser.feed(&chunk)),
            _ => break,
        }
    }
    out
}

pub fn seqs(events: &[mcp_resume_client::sse::SseEvent]) -> Vec<u64> {
    events
        .iter()
        .filter(|e| !e.data.is_empty())
        .map(|e| e.id.as_ref().unwrap().parse().unwrap())
        .collect()
}
