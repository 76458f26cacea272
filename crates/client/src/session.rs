//! An MCP session over Streamable HTTP: initialise, call, notify, end.

use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::StreamExt;
use mcp_resume_proto::{headers as h, SUPPORTED_PROTOCOL_VERSIONS};
use serde_json::{json, Value};

use crate::reader::{ReaderOptions, SessionReader};
use crate::sse::SseParser;
use crate::tls::TlsConfigs;
use crate::ClientError;

/// How many times a request stream is resumed after a dropped connection.
const REQUEST_RESUMES: u32 = 5;

/// A client of one MCP server, bound to one session once initialised.
#[derive(Clone)]
pub struct McpClient {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) session: Option<String>,
    pub(crate) protocol_version: String,
    pub(crate) token: Option<String>,
    /// The rustls configuration of the WebSocket upgrade (`wss://`).
    pub(crate) ws_tls: std::sync::Arc<rustls::ClientConfig>,
    next_id: std::sync::Arc<AtomicU64>,
}

impl McpClient {
    /// A client of the MCP endpoint at `url` (e.g. `http://127.0.0.1:8080/mcp`).
    pub fn new(url: impl Into<String>) -> Self {
        let tls = TlsConfigs::public();
        Self {
            http: tls.reqwest(),
            ws_tls: tls.ws,
            url: url.into(),
            session: None,
            protocol_version: SUPPORTED_PROTOCOL_VERSIONS[0].to_owned(),
            token: None,
            next_id: std::sync::Arc::new(AtomicU64::new(1)),
        }
    }

    /// Also trusts the CA certificates in the PEM file `ca`, for a server
    /// whose certificate a private CA signed (`https://` and `wss://` alike).
    pub fn trust_ca_pem(mut self, ca: impl AsRef<std::path::Path>) -> Result<Self, ClientError> {
        let tls = TlsConfigs::with_ca_file(ca.as_ref())?;
        self.http = tls.reqwest();
        self.ws_tls = tls.ws;
        Ok(self)
    }

    /// The same session (and protocol revision) at another URL: another
    /// instance serving the same log.
    pub fn with_url(mut self, url: impl Into<String>) -> Self {
        self.url = url.into();
        self
    }

    /// Attaches to an existing session instead of initialising one.
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn bearer(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The session id, once initialised or attached.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub(crate) fn request_builder(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut rb = self.http.request(method, &self.url);
        if let Some(s) = &self.session {
            rb = rb.header(h::MCP_SESSION_ID, s);
            rb = rb.header(h::MCP_PROTOCOL_VERSION, &self.protocol_version);
        }
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        rb
    }

    /// `initialize` and `notifications/initialized`; returns the server's result.
    pub async fn initialize(&mut self) -> Result<Value, ClientError> {
        self.session = None;
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": SUPPORTED_PROTOCOL_VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "mcp-resume-client", "version": env!("CARGO_PKG_VERSION")}
        }});
        let resp = self.post(&body).await?;
        let sid = resp
            .headers()
            .get(h::MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| {
                ClientError::Protocol("initialize answered without Mcp-Session-Id".into())
            })?;
        let result = self.read_response(resp, &json!(0)).await?;
        if let Some(v) = result.get("protocolVersion").and_then(Value::as_str) {
            self.protocol_version = v.to_owned();
        }
        self.session = Some(sid);
        self.notify("notifications/initialized", json!({})).await?;
        Ok(result)
    }

    async fn post(&self, body: &Value) -> Result<reqwest::Response, ClientError> {
        let resp = self
            .request_builder(reqwest::Method::POST)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(serde_json::to_vec(body).unwrap_or_default())
            .send()
            .await?;
        check_status(resp).await
    }

    /// Sends a request and waits for its result, resuming a request stream
    /// with `Last-Event-ID: R/n` if the connection drops.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        if self.session.is_none() {
            return Err(ClientError::Usage(
                "initialize (or attach to a session) first".into(),
            ));
        }
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let resp = self.post(&body).await?;
        self.read_response(resp, &id).await
    }

    /// `tools/call`; returns the `CallToolResult`.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ClientError> {
        self.post(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await?;
        Ok(())
    }

    /// Ends the session (`DELETE`).
    pub async fn end(&self) -> Result<(), ClientError> {
        let resp = self.request_builder(reqwest::Method::DELETE).send().await?;
        check_status(resp).await?;
        Ok(())
    }

    /// A reader of the session stream.
    pub fn reader(&self, options: ReaderOptions) -> Result<SessionReader, ClientError> {
        SessionReader::new(self.clone(), options)
    }

    async fn read_response(
        &self,
        resp: reqwest::Response,
        id: &Value,
    ) -> Result<Value, ClientError> {
        let is_sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_sse {
            let v: Value = resp.json().await?;
            return unwrap_rpc(v);
        }
        let mut resp = resp;
        let mut last_id: Option<String> = None;
        for attempt in 0..=REQUEST_RESUMES {
            let mut parser = SseParser::new();
            let mut body = resp.bytes_stream();
            while let Some(chunk) = body.next().await {
                let Ok(chunk) = chunk else { break };
                let events = parser.feed(&chunk);
                if let Some(why) = parser.take_ending() {
                    tracing::warn!("server ended the request stream: {why}");
                }
                for ev in events {
                    if ev.id.is_some() {
                        last_id = ev.id.clone();
                    }
                    if ev.data.is_empty() {
                        continue;
                    }
                    let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
                        continue;
                    };
                    if v.get("id") == Some(id)
                        && (v.get("result").is_some() || v.get("error").is_some())
                    {
                        return unwrap_rpc(v);
                    }
                }
            }
            let Some(last) = &last_id else {
                return Err(ClientError::Transport(
                    "request stream ended before any event".into(),
                ));
            };
            tracing::info!(attempt, last_event_id = %last, "request stream dropped; resuming");
            tokio::time::sleep(std::time::Duration::from_millis(100 << attempt.min(5))).await;
            let r = self
                .request_builder(reqwest::Method::GET)
                .header("accept", "text/event-stream")
                .header(h::LAST_EVENT_ID, last.as_str())
                .send()
                .await;
            resp = match r {
                Ok(r) => check_status(r).await?,
                Err(e) => return Err(e.into()),
            };
        }
        Err(ClientError::Transport(
            "request stream kept dropping".into(),
        ))
    }
}

fn unwrap_rpc(v: Value) -> Result<Value, ClientError> {
    if let Some(err) = v.get("error") {
        return Err(ClientError::Rpc {
            code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
    }
    v.get("result")
        .cloned()
        .ok_or_else(|| ClientError::Protocol(format!("a response without result: {v}")))
}

/// Maps error statuses to typed errors, keeping the body.
pub(crate) async fn check_status(
    resp: reqwest::Response,
) -> Result<reqwest::Response, ClientError> {
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        return Ok(resp);
    }
    let body = resp.text().await.unwrap_or_default();
    Err(status_error(status, &body))
}

/// The typed error for a non-success status and its body.
pub(crate) fn status_error(status: u16, body: &str) -> ClientError {
    match status {
        404 => ClientError::SessionGone,
        409 => {
            let v: Value = serde_json::from_str(body).unwrap_or_default();
            let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
            let prior = n("cursor");
            let reason = v.get("reason").and_then(Value::as_str);
            let d = if reason == Some("truncated") {
                mcp_resume_proto::CursorDiscontinuity::Truncated {
                    prior,
                    head: n("head"),
                    floor: n("floor"),
                }
            } else if reason == Some("data-lost") {
                mcp_resume_proto::CursorDiscontinuity::DataLost {
                    prior,
                    from: n("lost-from"),
                    to: n("lost-to"),
                    head: n("head"),
                    floor: n("floor"),
                }
            } else {
                mcp_resume_proto::CursorDiscontinuity::Ahead {
                    prior,
                    head: n("head"),
                    floor: n("floor"),
                }
            };
            ClientError::Discontinuity(d)
        }
        _ => ClientError::Status {
            status,
            body: body.to_owned(),
        },
    }
}
