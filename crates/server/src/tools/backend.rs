//! The built-in tools as a [`Backend`]: a [`ToolRegistry`] served through
//! the same route, commit queue and routing table as an rmcp handler or a
//! gateway's child. Each request runs in a task of its own and answers
//! through the session's [`Outbox`]; a handler that panics answers -32603.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};

use futures_util::FutureExt;
use mcp_resume_log::{Log, LogError};
use serde_json::{json, Value};
use tokio::sync::{watch, Mutex};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::context::SessionTools;
use super::{text_result, ToolContext, ToolError, ToolRegistry};
use crate::backend::{Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox, Work};
use crate::jsonrpc;
use crate::session::SessionRecord;
use crate::ServerConfig;

/// What the tools of every session share with the server.
pub(crate) struct Shared {
    /// The tools every session offers.
    pub(crate) registry: ToolRegistry,
    /// The log, for session records (per-session tools).
    pub(crate) log: Arc<dyn Log>,
    /// The server's settings (per-session limits).
    pub(crate) config: Arc<ServerConfig>,
    /// The server's lock on read-modify-write of session records.
    pub(crate) record_lock: Arc<Mutex<()>>,
    /// The server's tasks, so that shutdown waits for handlers.
    pub(crate) tasks: TaskTracker,
    /// Flips to `true` when the server stops.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Background tasks running per session, for the per-session cap.
    background: std::sync::Mutex<HashMap<String, usize>>,
}

impl Shared {
    /// What the tools share, over the server's own parts.
    pub(crate) fn new(
        registry: ToolRegistry,
        log: Arc<dyn Log>,
        config: Arc<ServerConfig>,
        record_lock: Arc<Mutex<()>>,
        tasks: TaskTracker,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        Self {
            registry,
            log,
            config,
            record_lock,
            tasks,
            shutdown,
            background: Default::default(),
        }
    }

    pub(super) fn background(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.background.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the session's record under the server's lock.
    pub(super) async fn update_record(
        &self,
        session: &str,
        f: impl FnOnce(&mut SessionRecord) -> bool,
    ) -> Result<bool, LogError> {
        crate::session::update_record(&*self.log, &self.record_lock, session, f).await
    }
}

/// The built-in tools, served to each session as its backend.
pub(crate) struct ToolsBackend {
    shared: Arc<Shared>,
}

impl ToolsBackend {
    /// Serves `shared`'s registry.
    pub(crate) fn new(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }
}

impl Backend for ToolsBackend {
    fn open(
        &self,
        session: &str,
        outbox: Outbox,
        restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        Ok(Box::new(ToolsSession {
            of: Arc::new(SessionTools {
                shared: self.shared.clone(),
                session: session.to_owned(),
                outbox,
                cancel: CancellationToken::new(),
            }),
            initialized: AtomicBool::new(restore.is_some()),
        }))
    }

    fn listen_anywhere(&self) -> bool {
        true
    }

    fn streams_at_once(&self, method: &str, params: &Value) -> bool {
        method == "tools/call"
            && params
                .get("name")
                .and_then(Value::as_str)
                .and_then(|n| self.shared.registry.get(n))
                .is_some_and(|t| t.streaming)
    }
}

/// One session served by the built-in tools.
struct ToolsSession {
    of: Arc<SessionTools>,
    initialized: AtomicBool,
}

impl BackendSession for ToolsSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        if let Some(work) = self.deliver_request(message)? {
            self.of.shared.tasks.spawn(work);
        }
        Ok(())
    }

    fn deliver_request(&self, mut message: Value) -> Result<Option<Work>, DeliverError> {
        // Notifications and answers to server requests (the tools send
        // none) need nothing from the tools. The method and id are taken,
        // not copied: the message is this request's own.
        let (Some(Value::String(method)), Some(id)) = (
            message.get_mut("method").map(Value::take),
            message.get_mut("id").map(Value::take),
        ) else {
            return Ok(None);
        };
        let params = message
            .get_mut("params")
            .map(Value::take)
            .unwrap_or(Value::Null);
        let ctx = ToolContext {
            of: self.of.clone(),
            progress_token: params
                .get("_meta")
                .and_then(|m| m.get("progressToken"))
                .cloned(),
            call: id.clone(),
        };
        let first = method == "initialize" && !self.initialized.swap(true, Ordering::AcqRel);
        Ok(Some(Box::pin(async move {
            // A listen is answered only when it ends, with its session.
            let answers = method != "subscriptions/listen";
            let work = AssertUnwindSafe(answer(&ctx, &id, &method, params, first)).catch_unwind();
            // The work first: a call that answers on its first poll (most
            // do) never registers with the session's cancellation, whose
            // waiter list every call of the session would otherwise lock.
            let reply = tokio::select! {
                biased;
                r = work => r.unwrap_or_else(|_| {
                    tracing::error!(session = %ctx.of.session, %id, "a tool's handler failed without answering");
                    Some(Reply::Message(jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, "the handler of this call failed without answering; it may be retried")))
                }),
                // The session's backend closed (its session ended): the call
                // still ends, loudly. Its route answers it as long as a
                // request holds the route, so no POST waits forever.
                _ = ctx.of.cancel.cancelled() => answers.then(|| Reply::Message(jsonrpc::error_with_data(
                    &id,
                    jsonrpc::INTERNAL_ERROR,
                    "the session's backend stopped while this call ran; it may be retried",
                    json!({"reason": "backend-stopped"}),
                ))),
            };
            // An error means the route has ended: it answers what is in flight.
            match reply {
                Some(Reply::Result(result)) => {
                    let text = jsonrpc::result_text(&id, &result);
                    drop(result);
                    let _ = ctx.of.outbox.send_answer(id, text).await;
                }
                Some(Reply::Message(message)) => {
                    let _ = ctx
                        .of
                        .outbox
                        .send(Outbound {
                            message,
                            related: None,
                        })
                        .await;
                }
                None => {}
            }
        })))
    }

    /// A tool's background work (`emit`) sends after its call answered:
    /// the session is not parked while any runs.
    fn busy(&self) -> bool {
        self.of.shared.background().contains_key(&self.of.session)
    }

    fn close(&self) {
        self.of.cancel.cancel();
    }
}

/// A request's answer.
enum Reply {
    /// A success response's `result`: the response is written as JSON
    /// text from it and the id ([`jsonrpc::result_text`]), never built
    /// as a value first.
    Result(Value),
    /// A whole error response.
    Message(Value),
}

/// Answers one request; `None` for one answered only when it ends
/// (`subscriptions/listen`). `first` marks the session's first `initialize`.
async fn answer(
    ctx: &ToolContext,
    id: &Value,
    method: &str,
    params: Value,
    first: bool,
) -> Option<Reply> {
    Some(match method {
        "tools/call" => call(ctx, id, params).await,
        "initialize" if first => Reply::Result(crate::mcp::initialize_result(
            crate::mcp::negotiate(&params),
        )),
        "initialize" => Reply::Message(jsonrpc::error(
            id,
            jsonrpc::INVALID_REQUEST,
            "the session is already initialized",
        )),
        "ping" | "logging/setLevel" => Reply::Result(json!({})),
        "tools/list" => {
            let mut list: Vec<Value> = ctx
                .of
                .shared
                .registry
                .iter()
                .map(|t| t.describe())
                .collect();
            match crate::session::read_record(&*ctx.of.shared.log, &ctx.of.session).await {
                Ok(rec) => list.extend(rec.dynamic_tools.iter().map(|name| {
                    json!({"name": name, "description": "registered by register_tool", "inputSchema": {"type": "object"}})
                })),
                Err(e) => return Some(Reply::Message(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, e.to_string()))),
            }
            Reply::Result(json!({"tools": list}))
        }
        "subscriptions/listen" => {
            // A resumable listen stream `L` (docs/protocol.md 3.7): the
            // tools acknowledge it, and `emit` called with `L` as the
            // session writes to it. It ends with the session.
            let filter = params
                .get("notifications")
                .cloned()
                .unwrap_or_else(|| json!({}));
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                "params": {"notifications": filter, "_meta": {"io.modelcontextprotocol/subscriptionId": ctx.of.session}}});
            let _ = ctx
                .of
                .outbox
                .send(Outbound {
                    message: ack,
                    related: None,
                })
                .await;
            return None;
        }
        other => Reply::Message(jsonrpc::error(
            id,
            jsonrpc::METHOD_NOT_FOUND,
            format!("method {other:?} not found"),
        )),
    })
}

/// Runs a tool call: its result, or an error response for `id`.
async fn call(ctx: &ToolContext, id: &Value, mut params: Value) -> Reply {
    // Taken, not cloned: the params are this call's own.
    let args = params
        .get_mut("arguments")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Reply::Message(jsonrpc::error(
            id,
            jsonrpc::INVALID_PARAMS,
            "tools/call needs a \"name\"",
        ));
    };
    let outcome = match ctx.of.shared.registry.get(name) {
        Some(tool) => (tool.handler)(ctx.clone(), args).await,
        None => match crate::session::read_record(&*ctx.of.shared.log, &ctx.of.session).await {
            Ok(rec) if rec.dynamic_tools.iter().any(|t| t == name) => {
                Ok(text_result(format!("{name} called with {args}")))
            }
            Ok(_) => Err(ToolError::InvalidParams(format!("unknown tool {name:?}"))),
            Err(e) => Err(ToolError::Log(e)),
        },
    };
    match outcome {
        Ok(v) => Reply::Result(v),
        Err(ToolError::InvalidParams(m)) => {
            Reply::Message(jsonrpc::error(id, jsonrpc::INVALID_PARAMS, m))
        }
        Err(ToolError::Failed(m)) => {
            Reply::Result(json!({"content": [{"type": "text", "text": m}], "isError": true}))
        }
        Err(ToolError::Log(e)) => {
            Reply::Message(jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, e.to_string()))
        }
    }
}
