//! The seam between the transport and whatever serves MCP: a session's
//! *backend* is anything that speaks MCP JSON-RPC (an in-process handler such
//! as an rmcp `ServerHandler`, a child process over stdio ([`stdio`]), a
//! session on an upstream Streamable HTTP server ([`upstream`])).
//!
//! The transport owns everything the client sees: it commits what the
//! backend sends to the log, on the right stream, before any client can read
//! it, and routes the client's messages (requests, notifications, responses
//! to server requests) to the session's backend. A backend only reads
//! messages ([`BackendSession::deliver`]) and writes them ([`Outbox::send`]).
//!
//! Routing of what a backend sends (docs/protocol.md 3.4):
//! - a response goes where its request's answer is awaited: the POST that
//!   waits for JSON, or the call's request stream `R`, which it ends;
//! - a server-to-client request whose [`Outbound::related`] names a call
//!   answered on `R`, and a `notifications/progress` whose `progressToken` a
//!   call registered, go onto that `R`;
//! - everything else goes onto the session stream.

mod outbox;
mod queue;
pub mod stdio;
pub mod upstream;
mod verbatim;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub use axum::body::Body;
pub use axum::http::request::Parts as RequestParts;
pub use axum::http::{Request, Response};

use serde_json::Value;

/// Starts the backend of each session: one [`BackendSession`] per session
/// live on this instance.
pub trait Backend: Send + Sync + 'static {
    /// Starts the backend of session `session`; what it sends goes to
    /// `outbox`. With `restore`, the session was initialized before (another
    /// instance, an earlier process, a parked session): `restore` holds the
    /// client's `initialize` params, and the backend must serve the session
    /// as initialized without running its `initialize` again.
    fn open(
        &self,
        session: &str,
        outbox: Outbox,
        restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError>;

    /// How long a session may have nothing in flight before its backend is
    /// stopped (and restored from the stored `initialize` params on its next
    /// message); `None` keeps it until the session ends. A cheap in-process
    /// handler is parked soon to save memory; a child process holds state
    /// that a restart would lose, so it is kept.
    fn park_after(&self) -> Option<Duration> {
        Some(Duration::from_secs(120))
    }

    /// Whether a session's backend must run on one instance at a time: a
    /// child process or an upstream session holds state that two copies
    /// would split. On a log shared by instances (Redis), the session's owner
    /// lease ([`Leases::claim`](mcp_resume_log::Leases::claim)) then picks the
    /// instance that runs it, and the others forward the session's client
    /// messages to that one through the log (docs/protocol.md 3.4). An
    /// in-process handler restored from the stored `initialize` params can
    /// run wherever a message lands: `false`.
    fn exclusive(&self) -> bool {
        false
    }

    /// Whether a resumable listen stream (docs/protocol.md 3.7) opened on
    /// one instance may be fed by this backend on any instance (a session
    /// restored with no `initialize` params), so no instance's death ends
    /// it: the built-in tools, whose `emit` writes to any session it is
    /// called on. `false` (the default): the listen stream lives in the
    /// backend of the instance that opened it, and ends with that instance.
    fn listen_anywhere(&self) -> bool {
        false
    }

    /// Whether request `method` (with `params`) is answered on a request
    /// stream of its own from its start when the client accepts SSE, rather
    /// than as JSON until it first sends something related (progress, a
    /// request to the client): for a call known to stream, such as a tool
    /// registered with [`ToolRegistry::streaming_tool`](crate::ToolRegistry::streaming_tool),
    /// so its stream is resumable from the first event. `false` (the default).
    fn streams_at_once(&self, method: &str, params: &Value) -> bool {
        let _ = (method, params);
        false
    }

    /// The server of MCP's stateless era (2026-07-28 on) for this backend,
    /// if it speaks it: each such request, with no session, goes to it whole
    /// (docs/protocol.md 3.6). `None` (the default): stateless requests are
    /// answered -32022 with the session revisions, and clients initialize.
    fn stateless(&self) -> Option<&dyn StatelessHttp> {
        None
    }
}

/// Serves one HTTP request of MCP's stateless era: validates its `_meta` and
/// headers and answers it, as JSON or SSE. Nothing of it is logged: the
/// stateless era has no session stream to resume.
pub trait StatelessHttp: Send + Sync {
    /// Answers `request` (a `POST` whose body is one JSON-RPC message,
    /// credentials and `Origin` already checked by the transport).
    /// `message` is that body as the transport parsed it, so that a backend
    /// need not parse it again; the body's bytes stay in `request` for one
    /// that passes them on as they are.
    fn serve(&self, request: Request<Body>, message: Value) -> StatelessFuture;

    /// Whether it answers `subscriptions/listen` (`true`, the default), so
    /// that the transport may offer the resumable listen stream in front of
    /// it (docs/protocol.md 3.7). A server that cannot listen (a gateway's
    /// pool of session-era children) says `false`: its `server/discover`
    /// offers no such extension, and a listen reaches it to be refused.
    fn listens(&self) -> bool {
        true
    }
}

/// The work that answers one request, handed back by
/// [`BackendSession::deliver_request`] for the transport to run.
pub type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A `200 text/event-stream` response carrying `body`, not to be cached nor
/// buffered by a proxy: the head of every SSE answer of this transport, and
/// of a backend's SSE answer to a stateless request.
pub fn sse_response(body: Body) -> Response<Body> {
    use axum::http::{header, HeaderValue};
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// What [`StatelessHttp::serve`] returns.
pub type StatelessFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// One session's running backend.
pub trait BackendSession: Send + Sync {
    /// Hands one client message (a request, notification, or response to a
    /// server request, ids already translated) to the backend. Refusing it
    /// (`Invalid`) makes the transport answer the client with an error, so
    /// nothing that cannot be handled is ever queued.
    fn deliver(&self, message: Value) -> Result<(), DeliverError>;

    /// [`deliver`](Self::deliver) for a client *request*, for a backend
    /// that runs in this process: instead of starting the work that answers
    /// it, it may hand that work back, for the transport to run in the task
    /// that awaits the answer (a POST answered as JSON, a WebSocket frame's
    /// task), saving a task and a wake-up per call. Work the transport cannot
    /// wait for (an answer on a request stream) it spawns. The default
    /// delivers and hands back nothing.
    fn deliver_request(&self, message: Value) -> Result<Option<Work>, DeliverError> {
        self.deliver(message).map(|()| None)
    }

    /// Whether the backend runs work for the session that the transport
    /// cannot see in its routing table (a tool's background task, which
    /// sends after its call answered): a busy session is not parked. Asked
    /// at most once a maintenance pass, only of a session the pass would
    /// otherwise park; an answer may reset what the next one reports
    /// (`RmcpBackend`'s: "sent since last asked").
    fn busy(&self) -> bool {
        false
    }

    /// Ends the session's backend: running handlers are cancelled.
    fn close(&self);
}

/// Why a backend could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// It failed (answered 500).
    #[error("the session's backend could not start: {0}")]
    Failed(String),
    /// A limit of the backend is reached, such as the most child processes
    /// at once (answered 429: retry later).
    #[error("{0}")]
    Busy(String),
}

/// Why a message was not delivered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeliverError {
    /// The message is not one the backend understands (its params do not
    /// fit the method): answered with `-32602`.
    #[error("{0}")]
    Invalid(String),
    /// The backend of this session has stopped.
    #[error("the session's backend has stopped")]
    Closed,
}

/// One message a backend sends, with what the transport cannot read from
/// the JSON itself.
#[derive(Debug)]
pub struct Outbound {
    /// The JSON-RPC message.
    pub message: Value,
    /// For a server-to-client request: the id of the client request whose
    /// handler sent it, if known (rmcp's `OriginatingRequestId`), so that it
    /// travels on that call's request stream.
    pub related: Option<Value>,
}

/// One outgoing JSON-RPC message as the route carries it: the value a
/// backend built (which the route may read and rewrite), or the JSON text a
/// backend encoded itself (a call's answer, [`Outbox::send_answer`]), passed
/// on as it is: never parsed, or encoded, again.
#[derive(Debug)]
pub(crate) enum Message {
    /// A JSON value, encoded when it is committed or answered.
    Value(Value),
    /// JSON text: one JSON-RPC message.
    Text(bytes::Bytes),
}

impl Message {
    /// The message as JSON text.
    pub(crate) fn into_text(self) -> bytes::Bytes {
        match self {
            Message::Value(v) => {
                let mut text = Vec::with_capacity(128);
                serde_json::to_writer(&mut text, &v).expect("a JSON value always serializes");
                text.into()
            }
            Message::Text(text) => text,
        }
    }

    /// The message, the answer to call `id`, as a JSON value for a reader
    /// of its fields (`initialize`, a batch). Text a value cannot hold (a
    /// number past `f64`, which an answer passed on as its server wrote it
    /// may carry) becomes a -32603 error for the call, saying why.
    pub(crate) fn into_value(self, id: &Value) -> Value {
        match self {
            Message::Value(v) => v,
            Message::Text(text) => serde_json::from_slice(&text).unwrap_or_else(|e| {
                crate::jsonrpc::error(
                    id,
                    crate::jsonrpc::INTERNAL_ERROR,
                    format!("the backend's answer could not be read: {e}"),
                )
            }),
        }
    }
}

pub use outbox::Outbox;
pub(crate) use outbox::{Pending, Queued, Shortcut};
pub use queue::Queue;
