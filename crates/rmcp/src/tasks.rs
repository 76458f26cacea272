//! Durable tasks for rmcp handlers: the tasks extension of MCP 2026-07-28
//! (`io.modelcontextprotocol/tasks`) with each task's state and result in
//! mcp-resume's log instead of rmcp's in-memory `TaskManager`.
//!
//! A tool that materializes a task returns
//! `CallToolResponse::Task(tasks.spawn(&context, |task| ...).await?)`; the
//! work runs on this instance, and `tasks/get`, `tasks/update` and
//! `tasks/cancel` are answered by the transport from the log, on any
//! instance, even after this one is killed (the task then reads `failed`,
//! `data.reason: "server-restarted"`, unless its result was committed).
//! The API mirrors rmcp's `TaskManager::spawn`, so a handler moves over by
//! changing its task store. A task's work also emits events a client reads
//! and resumes with `tasks/stream` on any instance
//! ([`DurableTaskContext::event`], SEP-2694).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use mcp_resume_log::{Log, MemoryLog, Retention};
//! # use mcp_resume_server::{McpServer, ServerConfig, tasks::TaskStore};
//! # #[derive(Clone)] struct MyServer { tasks: mcp_resume_rmcp::DurableTasks }
//! # impl rmcp::ServerHandler for MyServer {}
//! use mcp_resume_rmcp::{DurableTasks, RmcpBackend};
//! let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
//! let store = TaskStore::new(log.clone());
//! let tasks = DurableTasks::new(store.clone());
//! let backend = RmcpBackend::new(move || MyServer { tasks: tasks.clone() });
//! let server = McpServer::with_backend(log, Arc::new(backend), ServerConfig::default())
//!     .with_tasks(store);
//! ```

use std::future::Future;
use std::pin::Pin;

use mcp_resume_server::backend::RequestParts;
use mcp_resume_server::tasks::{Caller, TaskContext, TaskEnd, TaskError, TaskStore};
use rmcp::model::{CallToolResult, CreateTaskResult, ErrorData, InputRequest, Task};
use rmcp::service::RequestContext;
use rmcp::task_manager::TaskExit;
use rmcp::RoleServer;
use serde_json::Value;

/// The work of a durable task: rmcp's `TaskFuture` shape.
pub type DurableTaskFuture = Pin<Box<dyn Future<Output = Result<CallToolResult, TaskExit>> + Send>>;

/// Creates durable tasks for a handler; cheap to clone into every handler.
#[derive(Clone)]
pub struct DurableTasks {
    store: TaskStore,
}

impl DurableTasks {
    /// Tasks in `store`, which the server answers `tasks/*` from
    /// ([`McpServer::with_tasks`](mcp_resume_server::McpServer::with_tasks)).
    pub fn new(store: TaskStore) -> Self {
        Self { store }
    }

    /// Creates a task for the request of `context` (readable by its caller
    /// only) and runs `make`'s work for it; returns the `CreateTaskResult`
    /// once the task is committed, so `tasks/get` finds it at once on any
    /// instance. A tool result with `isError` completes the task; a
    /// [`TaskExit::Error`] fails it with that error.
    pub async fn spawn<F>(
        &self,
        context: &RequestContext<RoleServer>,
        make: F,
    ) -> Result<CreateTaskResult, ErrorData>
    where
        F: FnOnce(DurableTaskContext) -> DurableTaskFuture + Send + 'static,
    {
        let caller = context
            .extensions
            .get::<RequestParts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
            .unwrap_or_default();
        let created = self
            .store
            .spawn(caller, move |ctx| async move {
                match make(DurableTaskContext(ctx)).await {
                    Ok(result) => match serde_json::to_value(result) {
                        Ok(v) => TaskEnd::Completed(v),
                        Err(e) => TaskEnd::Failed(
                            serde_json::to_value(ErrorData::internal_error(e.to_string(), None))
                                .unwrap_or_default(),
                        ),
                    },
                    Err(TaskExit::Cancelled) => TaskEnd::Cancelled,
                    Err(TaskExit::Error(e)) => {
                        TaskEnd::Failed(serde_json::to_value(e).unwrap_or_default())
                    }
                }
            })
            .await
            .map_err(|e| {
                ErrorData::internal_error(format!("the task could not be created: {e}"), None)
            })?;
        let task: Task = serde_json::from_value(Value::Object(created))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CreateTaskResult::new(task))
    }
}

/// What a durable task's work holds: rmcp's `TaskContext` shape.
#[derive(Clone)]
pub struct DurableTaskContext(TaskContext);

impl DurableTaskContext {
    /// The task's id.
    pub fn task_id(&self) -> &str {
        self.0.task_id()
    }

    /// Asks the client for input under `key` (the task reads
    /// `input_required` until it answers with `tasks/update`); returns the
    /// client's answer.
    pub async fn request_input(&self, key: &str, request: InputRequest) -> Result<Value, TaskExit> {
        let request = serde_json::to_value(request)
            .map_err(|e| TaskExit::Error(ErrorData::internal_error(e.to_string(), None)))?;
        self.0
            .request_input(key, request)
            .await
            .map_err(|e| match e {
                TaskError::Cancelled => TaskExit::Cancelled,
                other => TaskExit::Error(ErrorData::internal_error(other.to_string(), None)),
            })
    }

    /// Emits an event of type `kind` (vendor-prefixed, e.g.
    /// `com.example.progress`) with a JSON-object `payload` to the task's
    /// resumable event stream (`tasks/stream`, SEP-2694): queued and
    /// committed in batches, so this never waits for an fsync. A refused
    /// type or payload is an invalid-params error; a cancelled task is
    /// [`TaskExit::Cancelled`].
    pub async fn event(&self, kind: &str, payload: Value) -> Result<(), TaskExit> {
        self.0.event(kind, payload).await.map_err(|e| match e {
            TaskError::Cancelled => TaskExit::Cancelled,
            TaskError::Invalid(why) => TaskExit::Error(ErrorData::invalid_params(why, None)),
            other => TaskExit::Error(ErrorData::internal_error(other.to_string(), None)),
        })
    }

    /// Completes when the client cancels the task.
    pub async fn cancelled(&self) {
        self.0.cancelled().await
    }
}
