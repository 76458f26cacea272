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
//!
//! The registry is served like any other [`Backend`](crate::backend::Backend)
//! (`backend`): a call's answer and every notification a tool sends go
//! through the session's route and commit queue, as an rmcp handler's or a
//! gateway child's do.

mod backend;
mod context;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mcp_resume_log::LogError;
use serde_json::{json, Value};

pub(crate) use backend::{Shared, ToolsBackend};
pub use context::ToolContext;

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
    // Built in place: `json!` would copy `text` through a serializer.
    let mut block = serde_json::Map::new();
    block.insert("type".to_owned(), Value::String("text".to_owned()));
    block.insert("text".to_owned(), Value::String(text.into()));
    let mut result = serde_json::Map::new();
    result.insert(
        "content".to_owned(),
        Value::Array(vec![Value::Object(block)]),
    );
    Value::Object(result)
}
