//! A session on an upstream MCP Streamable HTTP server (2025-11-25,
//! 2025-06-18 or 2025-03-26 transport) as a session's backend: a remote MCP
//! server behind the durable transport (`mcp-resume gateway --upstream URL`),
//! so its clients get what the upstream may not give them: a log that
//! survives restarts, resumable request streams, the WebSocket upgrade.
//!
//! Each session gets its own upstream session. The client's messages are
//! POSTed in delivery order: each POST's response headers are awaited before
//! the next is sent (the whole answer for `initialize`, whose
//! `Mcp-Session-Id` and negotiated version every later message carries), but
//! the bodies are read concurrently, so a long call blocks no other. What the
//! upstream answers (JSON, or the events of an SSE body) is committed to the
//! session's log; a server request or progress notification on a POST's SSE
//! stream travels on that call's request stream. The upstream's GET stream
//! carries its server-initiated messages. Dropped SSE streams are resumed
//! with `Last-Event-ID`; where that is impossible, or the upstream cannot be
//! reached, the call is answered with a JSON-RPC error: a caller never waits
//! forever. A `404` for the upstream session ends the session. A session
//! restored after a restart (or on another instance) initializes a new
//! upstream session with the client's stored `initialize` params; the answer
//! to that is not sent to anyone.
//!
//! A stateless-era request (2026-07-28, no session) goes to the upstream as
//! one, and its answer comes back as it arrives (`upstream/stateless.rs`).

mod redact;
mod stateless;
mod stream;

use redact::{describe, origin};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox, StatelessHttp};

/// The JSON-RPC id of the `initialize` a restore sends the new upstream session.
const RESTORE_ID: &str = "mcp-resume-restore";
/// How long the next message waits for the previous POST's response
/// headers. A server that answers a call as JSON sends its headers only with
/// the answer; past this the next message goes without waiting for it.
const HEADERS_IN_ORDER: Duration = Duration::from_secs(2);
/// How long `initialize` may take before later messages go anyway (and the
/// client gets an error for it).
const INITIALIZE_WAIT: Duration = Duration::from_secs(30);
/// How long `close` spends on the best-effort `DELETE`.
const DELETE_WAIT: Duration = Duration::from_secs(5);
/// Most bytes of an upstream error body quoted in a JSON-RPC error message.
const QUOTE: usize = 300;

/// Why an [`UpstreamBackend`] cannot be built: bad configuration, said
/// plainly at start-up rather than on the first session.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// The URL does not parse or is not `http`/`https`.
    #[error("invalid upstream URL {url}: {why}")]
    Url {
        /// The URL's scheme, host and port when it parses:
        /// nothing of its credentials, path or query, which may be secret.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// A header name or value that HTTP does not allow.
    #[error("invalid upstream header {name:?}: {why}")]
    Header {
        /// The header's name as given.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// Opens one upstream session per session, on one MCP Streamable HTTP
/// endpoint.
#[derive(Debug, Clone)]
pub struct UpstreamBackend {
    url: reqwest::Url,
    headers: HeaderMap,
    http: reqwest::Client,
    /// The stateless era's requests, relayed to the same endpoint.
    stateless: stateless::StatelessRelay,
}

impl UpstreamBackend {
    /// Every session's messages go to `url` (the upstream's MCP endpoint,
    /// `http` or `https`), each request with `headers` (name, value pairs;
    /// for the upstream's own authorization, e.g. `Authorization`).
    pub fn new(url: &str, headers: Vec<(String, String)>) -> Result<Self, UpstreamError> {
        let parsed = reqwest::Url::parse(url).map_err(|e| UpstreamError::Url {
            url: "(as given)".into(),
            why: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(UpstreamError::Url {
                url: origin(&parsed),
                why: "expected http://HOST[:PORT]/PATH or https://...".into(),
            });
        }
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let bad = |why: String| UpstreamError::Header {
                name: name.clone(),
                why,
            };
            let n =
                HeaderName::from_bytes(name.trim().as_bytes()).map_err(|e| bad(e.to_string()))?;
            let v = HeaderValue::from_str(value.trim()).map_err(|e| bad(e.to_string()))?;
            map.append(n, v);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| UpstreamError::Client(e.to_string()))?;
        Ok(Self {
            stateless: stateless::StatelessRelay {
                url: parsed.clone(),
                headers: map.clone(),
                http: http.clone(),
            },
            url: parsed,
            headers: map,
            http,
        })
    }
}

impl Backend for UpstreamBackend {
    fn open(
        &self,
        session: &str,
        outbox: Outbox,
        restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        let shared = Arc::new(Shared {
            session: session.to_owned(),
            url: self.url.clone(),
            headers: self.headers.clone(),
            http: self.http.clone(),
            outbox,
            upstream: Mutex::default(),
            stop: CancellationToken::new(),
            ended: AtomicBool::new(false),
            listening: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::unbounded_channel::<Value>();
        if let Some(params) = restore {
            // A new upstream session, initialized as the client once did; its
            // answer (id RESTORE_ID) has no call waiting and is dropped.
            let _ = tx.send(json!({"jsonrpc": "2.0", "id": RESTORE_ID, "method": "initialize", "params": params}));
            let _ = tx.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        }
        tokio::spawn(send_in_order(shared.clone(), rx));
        Ok(Box::new(UpstreamSession { tx, shared }))
    }

    /// An upstream session holds state that a new one would lose: kept
    /// until the session ends.
    fn park_after(&self) -> Option<Duration> {
        None
    }

    /// One upstream session per session: it runs on one instance at a time.
    fn exclusive(&self) -> bool {
        true
    }

    /// A stateless request goes to the upstream as one
    /// (`upstream/stateless.rs`): an upstream that speaks only the session era
    /// answers it with its own -32022, and the client initializes.
    fn stateless(&self) -> Option<&dyn StatelessHttp> {
        Some(&self.stateless)
    }
}

/// What the upstream session is known by, once `initialize` answered.
#[derive(Debug, Default, Clone)]
struct Upstream {
    /// Its `Mcp-Session-Id`, if it gave one.
    id: Option<String>,
    /// The negotiated protocol version (`MCP-Protocol-Version`).
    version: Option<String>,
}

/// One session's state, shared by its tasks.
pub(super) struct Shared {
    /// Our session id, for the logs.
    session: String,
    url: reqwest::Url,
    headers: HeaderMap,
    http: reqwest::Client,
    outbox: Outbox,
    upstream: Mutex<Upstream>,
    /// Cancelled by `close`: every task of the session ends.
    stop: CancellationToken,
    /// The session was ended (`end_session` sent once).
    ended: AtomicBool,
    /// The GET stream runs.
    listening: AtomicBool,
}

impl Shared {
    fn upstream(&self) -> Upstream {
        self.upstream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A request to the upstream endpoint with the configured headers and,
    /// once known, the upstream session id and protocol version.
    fn request(&self, method: Method) -> reqwest::RequestBuilder {
        let up = self.upstream();
        let mut rb = self
            .http
            .request(method, self.url.clone())
            .headers(self.headers.clone());
        if let Some(id) = up.id {
            rb = rb.header("mcp-session-id", id);
        }
        if let Some(v) = up.version {
            rb = rb.header("mcp-protocol-version", v);
        }
        rb
    }

    /// Ends the session once: the upstream ended its own.
    fn end(&self, why: &str) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            tracing::warn!(session = %self.session, "{why}; ending the session");
            self.outbox.end_session(why);
        }
        self.stop.cancel();
    }

    /// Answers client request `id` with a JSON-RPC error (-32603) whose
    /// `data.reason` is `reason`.
    async fn fail(&self, id: &Value, reason: &str, message: String) {
        tracing::warn!(session = %self.session, %id, reason, "{message}");
        let error = json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32603, "message": message, "data": {"reason": reason}}});
        let _ = self
            .outbox
            .send(Outbound {
                message: error,
                related: None,
            })
            .await;
    }

    /// Runs `work` until it ends or the session stops.
    fn spawn(self: &Arc<Self>, work: impl std::future::Future<Output = ()> + Send + 'static) {
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = work => {}
            }
        });
    }
}

/// What a client message is, for what its POST's outcome means.
pub(super) struct Sent {
    /// The id of a request (`None` for notifications and responses: nothing
    /// waits for their answer).
    pub(super) call: Option<Value>,
    /// It is an `initialize`: its answer sets the upstream session.
    initialize: bool,
}

/// POSTs the client's messages one after another, in delivery order.
async fn send_in_order(sh: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Value>) {
    loop {
        let message = tokio::select! {
            _ = sh.stop.cancelled() => return,
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
        };
        // A 2025-03-26 batch goes as its elements, in order.
        let messages = match message {
            Value::Array(items) => items,
            one => vec![one],
        };
        for message in messages {
            let sent = Sent {
                call: message
                    .get("method")
                    .and(message.get("id"))
                    .filter(|id| !id.is_null())
                    .cloned(),
                initialize: message.get("method").and_then(Value::as_str) == Some("initialize"),
            };
            let wait = if sent.initialize {
                INITIALIZE_WAIT
            } else {
                HEADERS_IN_ORDER
            };
            let (ready, go_on) = oneshot::channel();
            sh.spawn(exchange(sh.clone(), message, sent, ready));
            let _ = tokio::time::timeout(wait, go_on).await;
        }
    }
}

/// One POST and everything its answer carries. `ready` fires once the
/// next message may go: at the response headers, or for `initialize` once
/// the whole answer is read.
async fn exchange(sh: Arc<Shared>, message: Value, sent: Sent, ready: oneshot::Sender<()>) {
    let body = serde_json::to_vec(&message).unwrap_or_default();
    let mut rb = sh.request(Method::POST);
    // A stateless request (a resumable listen stream's subscriptions/listen)
    // carries the headers the stateless era requires of it.
    for (name, value) in mcp_resume_proto::meta::standard_headers(&message) {
        rb = rb.header(name, value);
    }
    let resp = rb
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "application/json, text/event-stream")
        .body(body)
        .send()
        .await;
    let mut ready = Some(ready);
    let mut go_on = || {
        if let Some(r) = ready.take() {
            let _ = r.send(());
        }
    };
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            go_on();
            return unreachable(
                &sh,
                &sent,
                format!("cannot reach the upstream {}", describe(e, &sh.url)),
            )
            .await;
        }
    };
    let status = resp.status();
    if sent.initialize && status.is_success() {
        let id = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        sh.upstream.lock().unwrap_or_else(|e| e.into_inner()).id = id;
    }
    if !sent.initialize {
        go_on();
    }
    if status == StatusCode::NOT_FOUND && sh.upstream().id.is_some() && !sent.initialize {
        go_on();
        return sh.end("the upstream ended the session");
    }
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        go_on();
        return refused(&sh, &sent, status, &text).await;
    }
    let answered = stream::read_answer(&sh, resp, &sent).await;
    if sent.initialize {
        go_on();
        if answered && !sh.listening.swap(true, Ordering::AcqRel) {
            sh.spawn(stream::listen(sh.clone()));
        }
    }
    if let (Some(id), false) = (&sent.call, answered) {
        sh.fail(
            id,
            "upstream-lost",
            "the upstream's answer to this request was lost (its stream ended and could not be resumed)".into(),
        )
        .await;
    }
}

/// The upstream could not be reached for `sent`: its caller is told; a
/// notification or response is dropped with a log line.
async fn unreachable(sh: &Shared, sent: &Sent, why: String) {
    match &sent.call {
        Some(id) => sh.fail(id, "upstream-unreachable", why).await,
        None => {
            tracing::warn!(session = %sh.session, "{why}; a notification or response to the upstream was dropped")
        }
    }
}

/// The upstream answered `sent` with an error status.
async fn refused(sh: &Shared, sent: &Sent, status: StatusCode, body: &str) {
    // A JSON-RPC error for this very request is the upstream's own answer.
    if let (Some(id), Ok(v)) = (&sent.call, serde_json::from_str::<Value>(body)) {
        if v.get("id") == Some(id) && v.get("error").is_some() {
            let _ = sh
                .outbox
                .send(Outbound {
                    message: v,
                    related: None,
                })
                .await;
            return;
        }
    }
    let mut quoted: String = body.chars().take(QUOTE).collect();
    if quoted.len() < body.len() {
        quoted.push_str("...");
    }
    let why = format!("the upstream answered {status}: {quoted}");
    match (&sent.call, status.is_server_error()) {
        (Some(_), true) => unreachable(sh, sent, why).await,
        (Some(id), false) => sh.fail(id, "upstream-refused", why).await,
        (None, _) => {
            tracing::warn!(session = %sh.session, "{why}; a notification or response to the upstream was dropped")
        }
    }
}

/// One session's upstream session, as the transport sees it.
struct UpstreamSession {
    tx: mpsc::UnboundedSender<Value>,
    shared: Arc<Shared>,
}

impl BackendSession for UpstreamSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        if self.shared.stop.is_cancelled() {
            return Err(DeliverError::Closed);
        }
        self.tx.send(message).map_err(|_| DeliverError::Closed)
    }

    /// Stops the session's tasks and ends the upstream session with a
    /// best-effort `DELETE` (bounded in time).
    fn close(&self) {
        let sh = &self.shared;
        sh.stop.cancel();
        let id = sh.upstream().id;
        let (Some(_), false, Ok(rt)) = (
            id,
            sh.ended.swap(true, Ordering::AcqRel),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let delete = sh.request(Method::DELETE).timeout(DELETE_WAIT).send();
        let session = sh.session.clone();
        rt.spawn(async move {
            if let Err(e) = delete.await {
                tracing::debug!(%session, error = %e.without_url(), "DELETE of the upstream session failed");
            }
        });
    }
}

impl Drop for UpstreamSession {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}
