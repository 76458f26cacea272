//! The tool API: register async handlers; the server does the rest.
//!
//! ```no_run
//! use mcp_resume_server::tools::{text_result, ToolRegistry};
//! use serde_json::json;
//!
//! let tools = ToolRegistry::new().tool(
//!     "shout",
//!     "Upper-cases the text",
//!     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
//!     |_ctx, args| async move {
//!         let text = args["text"].as_str().unwrap_or_default().to_uppercase();
//!         Ok(text_result(text))
//!     },
//! );
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::state::AppState;

/// Why a tool call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// The arguments do not fit the tool (JSON-RPC -32602).
    #[error("invalid arguments: {0}")]
    InvalidParams(String),
    /// The tool ran and failed: a result with `isError: true`.
    #[error("{0}")]
    Failed(String),
    /// The log refused a write.
    #[error(transparent)]
    Log(#[from] LogError),
}

/// A boxed tool future.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send>>;
type Handler = Arc<dyn Fn(ToolContext, Value) -> ToolFuture + Send + Sync>;

/// One tool: what `tools/list` shows, and the handler `tools/call` runs.
#[derive(Clone)]
pub struct Tool {
    /// Unique name.
    pub name: String,
    /// For the model and for people.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// Answers as a request stream (SSE) when the client accepts it, so its
    /// progress notifications are resumable with `Last-Event-ID: R/n`.
    pub streaming: bool,
    handler: Handler,
}

impl Tool {
    /// The `tools/list` entry.
    pub fn describe(&self) -> Value {
        json!({"name": self.name, "description": self.description, "inputSchema": self.input_schema})
    }
}

/// The tools a server offers to every session.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Tool>,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert<F, Fut>(
        mut self,
        name: &str,
        description: &str,
        schema: Value,
        streaming: bool,
        f: F,
    ) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |ctx, args| Box::pin(f(ctx, args)));
        self.tools.insert(
            name.to_owned(),
            Tool {
                name: name.to_owned(),
                description: description.to_owned(),
                input_schema: schema,
                streaming,
                handler,
            },
        );
        self
    }

    /// Adds a tool answered with one JSON response.
    pub fn tool<F, Fut>(self, name: &str, description: &str, schema: Value, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.insert(name, description, schema, false, f)
    }

    /// Adds a tool answered as a resumable request stream (see [`Tool::streaming`]).
    pub fn streaming_tool<F, Fut>(self, name: &str, description: &str, schema: Value, f: F) -> Self
    where
        F: Fn(ToolContext, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
    {
        self.insert(name, description, schema, true, f)
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// All tools, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Tool> {
        self.tools.values()
    }
}

/// A text-only `CallToolResult`.
pub fn text_result(text: impl Into<String>) -> Value {
    json!({"content": [{"type": "text", "text": text.into()}]})
}

/// What a running tool may do besides returning: notify, report progress,
/// change the session's tool list, keep working in the background.
#[derive(Clone)]
pub struct ToolContext {
    pub(crate) state: AppState,
    pub(crate) session: String,
    pub(crate) stream: StreamKey,
    pub(crate) progress_token: Option<Value>,
}

impl ToolContext {
    /// The calling session.
    pub fn session_id(&self) -> &str {
        &self.session
    }

    /// Appends notifications to the session stream, committed before this returns.
    pub async fn notify_session(&self, notifications: Vec<Value>) -> Result<Seq, ToolError> {
        let msgs = notifications
            .iter()
            .map(|n| bytes::Bytes::from(serde_json::to_vec(n).unwrap_or_default()))
            .collect();
        Ok(self
            .state
            .commit(&self.session, StreamKey::Session, msgs)
            .await?)
    }

    /// As [`ToolContext::notify_session`], for messages already encoded as
    /// JSON text (a hot loop need not build and serialise a `Value` each time).
    /// Each must be one JSON-RPC message.
    pub async fn notify_session_encoded(
        &self,
        messages: Vec<bytes::Bytes>,
    ) -> Result<Seq, ToolError> {
        Ok(self
            .state
            .commit(&self.session, StreamKey::Session, messages)
            .await?)
    }

    /// [`ToolContext::notify_session_encoded`] for a batch that may be sent
    /// again after an error: committed at most once per `key`
    /// ([`Log::append_once`](mcp_resume_log::Log::append_once)).
    pub async fn notify_session_once(
        &self,
        messages: Vec<bytes::Bytes>,
        key: u64,
    ) -> Result<Seq, ToolError> {
        Ok(self
            .state
            .commit_once(&self.session, StreamKey::Session, messages, key, false)
            .await?)
    }

    /// Reports progress on the request's own stream (the session stream when
    /// the call was answered as JSON); a no-op without a `progressToken`.
    pub async fn progress(&self, progress: u64, total: Option<u64>) -> Result<(), ToolError> {
        let Some(token) = &self.progress_token else {
            return Ok(());
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        self.state
            .append(
                &self.session,
                self.stream,
                &jsonrpc::notification("notifications/progress", params),
            )
            .await?;
        Ok(())
    }

    /// Adds (`true`) or removes a per-session tool and, when the list
    /// changed, emits `notifications/tools/list_changed`. Returns whether it changed.
    pub async fn set_session_tool(&self, name: &str, present: bool) -> Result<bool, ToolError> {
        let max = self.state.config.max_session_tools;
        let mut full = false;
        let changed = self
            .state
            .update_record(&self.session, |rec| {
                let has = rec.dynamic_tools.iter().any(|t| t == name);
                match (has, present) {
                    (false, true) if rec.dynamic_tools.len() >= max => {
                        full = true;
                        return false;
                    }
                    (false, true) => rec.dynamic_tools.push(name.to_owned()),
                    (true, false) => rec.dynamic_tools.retain(|t| t != name),
                    _ => return false,
                }
                true
            })
            .await?;
        if full {
            return Err(ToolError::InvalidParams(format!(
                "a session may register at most {max} tools; unregister one first"
            )));
        }
        if changed {
            self.notify_session(vec![jsonrpc::notification(
                "notifications/tools/list_changed",
                json!({}),
            )])
            .await?;
        }
        Ok(changed)
    }

    /// Runs `work` in the background until it ends, the session ends or the
    /// server stops. A session runs at most
    /// [`ServerConfig::max_background_per_session`](crate::ServerConfig) such
    /// tasks at once; past that this refuses (`InvalidParams`, so the caller
    /// sees why) instead of letting one session grow without bound.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, work: F) -> Result<(), ToolError> {
        let max = self.state.config.max_background_per_session;
        {
            let mut running = self
                .state
                .background
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let n = running.entry(self.session.clone()).or_default();
            if *n >= max {
                return Err(ToolError::InvalidParams(format!(
                    "this session already runs {max} background tasks; wait for one to finish"
                )));
            }
            *n += 1;
        }
        let slot = BackgroundSlot {
            state: self.state.clone(),
            session: self.session.clone(),
        };
        let mut shutdown = self.state.shutdown.clone();
        self.state.spawn(async move {
            tokio::select! {
                _ = work => {}
                _ = crate::state::stopped(&mut shutdown) => {}
            }
            drop(slot);
        });
        Ok(())
    }
}

/// Frees a session's background slot when its task ends, however it ends.
struct BackgroundSlot {
    state: AppState,
    session: String,
}

impl Drop for BackgroundSlot {
    fn drop(&mut self) {
        let mut running = self
            .state
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = running.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.session);
            }
        }
    }
}

/// Runs a tool call; the result or error is a JSON-RPC response for `id`.
pub(crate) async fn call(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    id: &Value,
    params: &Value,
) -> Value {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return jsonrpc::error(id, jsonrpc::INVALID_PARAMS, "tools/call needs a \"name\"");
    };
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let ctx = ToolContext {
        state: state.clone(),
        session: session.to_owned(),
        stream,
        progress_token: params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .cloned(),
    };
    let outcome = match state.tools.get(name) {
        Some(tool) => (tool.handler)(ctx, args).await,
        None => match state.record(session).await {
            Ok(rec) if rec.dynamic_tools.iter().any(|t| t == name) => {
                Ok(text_result(format!("{name} called with {args}")))
            }
            Ok(_) => Err(ToolError::InvalidParams(format!("unknown tool {name:?}"))),
            Err(e) => Err(ToolError::Log(e)),
        },
    };
    match outcome {
        Ok(v) => jsonrpc::result(id, v),
        Err(ToolError::InvalidParams(m)) => jsonrpc::error(id, jsonrpc::INVALID_PARAMS, m),
        Err(ToolError::Failed(m)) => jsonrpc::result(
            id,
            json!({"content": [{"type": "text", "text": m}], "isError": true}),
        ),
        Err(ToolError::Log(e)) => jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, e.to_string()),
    }
}
