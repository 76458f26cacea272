//! An rmcp `ServerHandler` as the [`Backend`] of `mcp-resume-server`: the
//! official SDK's handlers (its `#[tool_router]`, `#[prompt_router]`, typed
//! `Parameters<T>`, its `Peer` for sampling and elicitation) served on
//! mcp-resume's transport, where every message is committed to the log
//! before any client can see it and every stream resumes on any instance.
//!
//! Each session runs rmcp's own service loop over a [`Transport`] whose
//! `send` enqueues the message in the session's ordered commit queue at
//! call time and resolves once it is queued (bounded: it waits while the
//! session has 1,024 sends not yet committed), so a handler's
//! `peer.notify_progress(..).await` never waits for an fsync, and the route
//! commits whatever is queued in one append; clients still see only what is
//! committed. A
//! server-to-client request carries rmcp's `OriginatingRequestId`, so it
//! travels on the request stream of the call that made it.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use mcp_resume_log::{Log, MemoryLog, Retention};
//! # use mcp_resume_server::{McpServer, ServerConfig};
//! # #[derive(Clone)] struct MyServer;
//! # impl rmcp::ServerHandler for MyServer {}
//! use mcp_resume_rmcp::RmcpBackend;
//! let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
//! let server = McpServer::with_backend(log, Arc::new(RmcpBackend::new(|| MyServer)), ServerConfig::default());
//! ```

use std::borrow::Cow;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::future::Either;
use futures_util::FutureExt;
use mcp_resume_server::backend::{
    Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox, Queue, StatelessHttp,
};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, GetExtensions,
    InitializeRequestParams, JsonRpcMessage, ProtocolVersion, ServerJsonRpcMessage,
    ServerNotification, ServerResult,
};
use rmcp::service::{NotificationContext, OriginatingRequestId, RequestContext, Service};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::transport::Transport;
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Serves every session with a handler made by `factory` (called once per
/// session, and again when a session is restored on another instance or
/// after a restart), and every request of MCP's stateless era (2026-07-28)
/// with a handler of its own, as rmcp's stateless Streamable HTTP service
/// serves it: a request whose `_meta` and SEP-2243 headers plainly pass
/// rmcp's checks is typed from the transport's parse and run through rmcp's
/// one-request service; any other goes to rmcp's stateless service itself,
/// which answers or refuses it. Both eras share one endpoint.
pub struct RmcpBackend<F> {
    factory: Arc<F>,
    stateless: Box<dyn StatelessHttp>,
}

impl<F, S> RmcpBackend<F>
where
    F: Fn() -> S + Send + Sync + 'static,
    S: ServerHandler + Send + 'static,
{
    /// A backend whose sessions are served by handlers from `factory`.
    pub fn new(factory: F) -> Self {
        let factory = Arc::new(factory);
        let make = factory.clone();
        let mut config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_stateless_protocol_metadata_required(true);
        // The transport routes only stateless-era requests here; its own
        // guard has checked credentials and Origin.
        config.legacy_session_mode = false;
        config.json_response = true;
        let service = StreamableHttpService::new(
            move || Ok(make()),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let stateless = crate::stateless::Stateless {
            factory: factory.clone(),
            rmcp: service,
        };
        Self {
            factory,
            stateless: Box::new(stateless),
        }
    }
}

impl<F, S> Backend for RmcpBackend<F>
where
    F: Fn() -> S + Send + Sync + 'static,
    S: ServerHandler + Send + 'static,
{
    fn stateless(&self) -> Option<&dyn StatelessHttp> {
        Some(self.stateless.as_ref())
    }

    fn open(
        &self,
        session: &str,
        outbox: Outbox,
        restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        let seam = Arc::new(Seam::default());
        let port = Port {
            seam: seam.clone(),
            outbox,
        };
        let ct = CancellationToken::new();
        let handler = Guarded((self.factory)());
        let id = session.to_owned();
        match restore {
            None => {
                let ct = ct.clone();
                tokio::spawn(async move {
                    // The handshake's future is large and runs once: boxed and
                    // dropped once it is done, so the task that waits out the
                    // session holds only the running service.
                    let started =
                        Box::pin(rmcp::service::serve_server_with_ct(handler, port, ct)).await;
                    match started {
                        Ok(running) => {
                            let _ = running.waiting().await;
                        }
                        Err(e) => {
                            tracing::debug!(session = %id, error = %e, "rmcp session did not start")
                        }
                    }
                });
            }
            Some(params) => {
                let params: InitializeRequestParams =
                    serde_json::from_value(params).map_err(|e| {
                        BackendError::Failed(format!("unreadable initialize params: {e}"))
                    })?;
                let running =
                    rmcp::service::serve_directly_with_ct(handler, port, Some(params), ct.clone());
                tokio::spawn(async move {
                    let _ = running.waiting().await;
                    tracing::debug!(session = %id, "restored rmcp session ended");
                });
            }
        }
        Ok(Box::new(RmcpSession { seam, ct }))
    }
}

/// What the transport's side and rmcp's side of one session share.
#[derive(Default)]
struct Seam {
    /// Client messages for rmcp's service loop: a queue that holds nothing
    /// while the session is idle (a channel's first block of 32 client
    /// messages would cost 11.5 KiB per session).
    inbox: Queue<ClientJsonRpcMessage>,
    /// The handler sent something since [`BackendSession::busy`] last
    /// asked: a handler's background task sends through a clone of its
    /// `Peer`, which the transport cannot see start or end, so sending is
    /// the sign that it runs.
    sent: AtomicBool,
}

impl Seam {
    /// rmcp's side is gone (its service loop ended, or its handshake gave
    /// up, with or without `Transport::close`): later client messages are
    /// refused (the route answers their calls with an error instead of
    /// leaving them to wait) and what is queued is freed now.
    fn hang_up(&self) {
        self.inbox.close();
        while self.inbox.try_recv().is_some() {}
    }
}

/// One session's rmcp service, as the transport sees it: the only sender
/// of its inbox.
struct RmcpSession {
    seam: Arc<Seam>,
    ct: CancellationToken,
}

impl BackendSession for RmcpSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        let typed =
            crate::inbound::typed(message).map_err(|e| DeliverError::Invalid(e.to_string()))?;
        self.seam
            .inbox
            .push(typed)
            .map_err(|_| DeliverError::Closed)
    }

    /// Busy if the handler sent anything since the route last asked (at
    /// most once a maintenance pass, once the session has had nothing in
    /// flight for the park time): a handler still notifying after its call
    /// answered is not parked under its background task, which would end
    /// it. A background task counts as running only while it sends at
    /// least once a pass (every half park time at most); a quiet handler
    /// is parked one pass later than one never asked about.
    fn busy(&self) -> bool {
        self.seam.sent.swap(false, Ordering::Relaxed)
    }

    fn close(&self) {
        self.ct.cancel();
    }
}

impl Drop for RmcpSession {
    fn drop(&mut self) {
        // The inbox's one sender, counted since the queue was made: rmcp's
        // service loop learns the session is gone once it has read the rest.
        self.seam.inbox.drop_sender();
        self.ct.cancel();
    }
}

/// rmcp's side of the seam: client messages in, server messages out to the
/// session's commit queue.
struct Port {
    seam: Arc<Seam>,
    outbox: Outbox,
}

impl Drop for Port {
    fn drop(&mut self) {
        self.seam.hang_up();
    }
}

/// A message rmcp sent could not be committed.
#[derive(Debug, thiserror::Error)]
#[error("not committed: {0}")]
pub struct PortError(#[source] mcp_resume_log::LogError);

/// A queued send's outcome as the transport's. The sends' futures are
/// mapped with it rather than awaited in `async` blocks, which would hold
/// each twice: rmcp moves a send's future into a task of its own.
fn not_committed(sent: Result<(), mcp_resume_log::LogError>) -> Result<(), PortError> {
    sent.map_err(PortError)
}

impl Transport<RoleServer> for Port {
    type Error = PortError;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.seam.sent.store(true, Ordering::Relaxed);
        let related = match &item {
            JsonRpcMessage::Request(r) => r
                .request
                .extensions()
                .get::<OriginatingRequestId>()
                .map(|o| crate::outbound::id_value(&o.0)),
            _ => None,
        };
        if let Some((id, text)) = crate::outbound::answer(&item) {
            // A call's answer: written once, here, and handed over or
            // committed as it is.
            let sent = self.outbox.send_answer(id, text.into());
            return Either::Left(Either::Left(sent.map(not_committed)));
        }
        if let JsonRpcMessage::Notification(n) = &item {
            let routed = matches!(
                n.notification,
                ServerNotification::ProgressNotification(_)
                    | ServerNotification::CancelledNotification(_)
            );
            if !routed {
                // Bound for the session stream as it is: encoded once, here.
                let bytes = crate::outbound::to_vec(&item).unwrap_or_default();
                let sent = self.outbox.send_session_notification(bytes.into());
                return Either::Left(Either::Right(sent.map(not_committed)));
            }
        }
        let message = crate::outbound::to_value(&item).unwrap_or(Value::Null);
        // Queued now, in rmcp's order; the future waits only for room in the
        // session's queue, never for the commit: the route commits whatever
        // is queued in one append, and readers see only what is committed.
        let sent = self.outbox.send(Outbound { message, related });
        Either::Right(sent.map(not_committed))
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        self.seam.inbox.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.seam.inbox.close();
        Ok(())
    }
}

/// A handler whose panic ends its call with a JSON-RPC error instead of no
/// answer at all (rmcp runs each request in a task of its own and would
/// leave the call unanswered).
pub(crate) struct Guarded<S>(pub(crate) S);

impl<S: Service<RoleServer>> Service<RoleServer> for Guarded<S> {
    /// The handler's future, mapped rather than awaited in an `async fn`:
    /// such a function keeps its arguments (the request, its context) as
    /// well as the future it awaits, which holds them too, and rmcp moves
    /// this future into a task of its own for every request. Not boxed:
    /// boxed, rmcp's task would hold only a pointer (2,300 fewer
    /// instructions a hosted echo call, a third fewer simulated cache
    /// misses), but wrk saw no more calls/s (0.997 of this), and every idle
    /// session held 2-2.5 KiB more RSS, since `initialize` runs through
    /// here too and its freed 5 KiB box leaves a hole that the session's
    /// long-lived allocations split (sessions 31 and 32,
    /// benches/results/echo-ceiling.md).
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, ErrorData>> + Send + '_ {
        AssertUnwindSafe(self.0.handle_request(request, context))
            .catch_unwind()
            .map(|answer| {
                answer.unwrap_or_else(|_| {
                    Err(ErrorData::internal_error(
                        "the handler of this call failed without answering; it may be retried",
                        None,
                    ))
                })
            })
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + Send + '_ {
        self.0.handle_notification(notification, context)
    }

    fn get_info(&self) -> <RoleServer as rmcp::service::ServiceRole>::Info {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        self.0.supported_protocol_versions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ping(id: u32) -> ClientJsonRpcMessage {
        crate::inbound::typed(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
            .expect("a ping")
    }

    #[test]
    fn a_hung_up_seam_refuses_messages_and_frees_what_was_queued() {
        let seam = Seam::default();
        seam.inbox.push(ping(1)).map_err(|_| ()).expect("open");
        seam.hang_up();
        assert!(seam.inbox.try_recv().is_none(), "freed");
        assert!(seam.inbox.push(ping(2)).is_err(), "refused");
    }

    #[test]
    fn busy_says_whether_anything_was_sent_since_it_last_asked() {
        let seam = Seam::default();
        let session = RmcpSession {
            seam: Arc::new(seam),
            ct: CancellationToken::new(),
        };
        assert!(!session.busy());
        session.seam.sent.store(true, Ordering::Relaxed);
        assert!(session.busy());
        assert!(!session.busy(), "asked once, then quiet");
    }
}
