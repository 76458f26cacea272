//! An rmcp handler, written with the official Rust SDK's macros, served on
//! mcp-resume's durable transport: every message it sends is committed to the
//! log before a client sees it, and a session outlives the process
//! (docs/server-author.md).
//!
//! ```sh
//! cargo run -p mcp-resume-rmcp --example hosted_handler -- 127.0.0.1:8090
//! ```

use std::sync::Arc;

use mcp_resume_log::{DiskLog, Retention};
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;

/// `add`'s arguments: rmcp derives the tool's input schema from them.
#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct AddArgs {
    /// The first number.
    a: i64,
    /// The second number.
    b: i64,
}

/// The handler. Its router is shared by every session (and every stateless
/// request) through the `Arc`: docs/rmcp.md, "Share your routers".
#[derive(Clone)]
struct Calculator {
    tool_router: Arc<ToolRouter<Self>>,
}

#[tool_router]
impl Calculator {
    fn new() -> Self {
        Self {
            tool_router: Arc::new(Self::tool_router()),
        }
    }

    #[tool(description = "Adds two integers.")]
    async fn add(
        &self,
        Parameters(AddArgs { a, b }): Parameters<AddArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(
            (a + b).to_string(),
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Calculator {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The log: a directory of its own here; `RedisLog` to share sessions
    // among instances.
    let dir = tempfile::tempdir()?;
    let log = Arc::new(DiskLog::open(dir.path().join("log"), Retention::default())?);
    // One handler per session, cloned from a prototype.
    let prototype = Calculator::new();
    let backend = Arc::new(RmcpBackend::new(move || prototype.clone()));
    let server = McpServer::with_backend(log, backend, ServerConfig::default());

    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // Until Ctrl-C or SIGTERM; then a graceful stop (calls in flight finish).
    server.serve(listener, stop()).await?;
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn stop() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
