//! Durable tasks (the `io.modelcontextprotocol/tasks` extension) and their
//! resumable event streams (`tasks/stream`, SEP-2694) from an rmcp handler:
//! the task's state, events and result are in the log, so `tasks/get` and
//! `tasks/stream` answer on any instance and after a `kill -9`
//! (docs/server-author.md).
//!
//! ```sh
//! cargo run -p mcp-resume-rmcp --example durable_tasks -- 127.0.0.1:8093
//! ```

use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{MemoryLog, Retention};
use mcp_resume_rmcp::{DurableTasks, RmcpBackend};
use mcp_resume_server::tasks::TaskStore;
use mcp_resume_server::{McpServer, ServerConfig};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, ServerCapabilities,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::TaskExit;
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct CountArgs {
    /// How many events the task emits before it completes.
    n: u64,
}

#[derive(Clone)]
struct Counter {
    tool_router: Arc<ToolRouter<Self>>,
    tasks: DurableTasks,
}

#[tool_router]
impl Counter {
    #[tool(
        description = "A task: emits `n` events (com.example.count, {k}) 100 ms apart, then completes."
    )]
    async fn count_to(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(CountArgs { n }): Parameters<CountArgs>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            // The client did not declare the tasks extension: -32021.
            return Err(ErrorData::missing_required_client_capability(
                ClientCapabilities::builder().enable_tasks().build(),
            ));
        }
        let task = self
            .tasks
            .spawn(&context, move |task| {
                Box::pin(async move {
                    for k in 1..=n {
                        tokio::select! {
                            _ = task.cancelled() => return Err(TaskExit::Cancelled),
                            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                        // Committed to the task's stream, read from any cursor.
                        task.event("com.example.count", json!({ "k": k })).await?;
                    }
                    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                        "counted to {n}"
                    ))]))
                })
            })
            .await?;
        Ok(task.into())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Counter {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Memory here; a DiskLog or a RedisLog keeps tasks across restarts.
    let log = Arc::new(MemoryLog::new(Retention::default()));
    // The tasks live in the server's own log: the server answers tasks/*
    // from it, the handler creates them through DurableTasks.
    let store = TaskStore::new(log.clone());
    let prototype = Counter {
        tool_router: Arc::new(Counter::tool_router()),
        tasks: DurableTasks::new(store.clone()),
    };
    let backend = Arc::new(RmcpBackend::new(move || prototype.clone()));
    let server = McpServer::with_backend(log, backend, ServerConfig::default()).with_tasks(store);

    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    server
        .serve(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
