//! Serving your own tools on the mcp-resume transport, mounted beside your
//! own routes.
//!
//! ```sh
//! cargo run -p mcp-resume-server --example custom_tools
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use mcp_resume_log::{DiskLog, Retention};
use mcp_resume_server::tools::{text_result, ToolError};
use mcp_resume_server::{McpServer, ServerConfig, ToolRegistry};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tools = ToolRegistry::new()
        .tool(
            "shout",
            "Upper-cases the text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            |_ctx, args| async move {
                let text = args["text"].as_str().ok_or_else(|| ToolError::InvalidParams("text must be a string".into()))?;
                Ok(text_result(text.to_uppercase()))
            },
        )
        .tool(
            "countdown",
            "Notifies the session stream once a second, then returns.",
            json!({"type": "object", "properties": {"from": {"type": "integer"}}}),
            |ctx, args| async move {
                let from = args["from"].as_u64().unwrap_or(3);
                for k in (1..=from).rev() {
                    // Committed to the log before any client can see it; resumable by Last-Event-ID.
                    ctx.notify_session(vec![json!({
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "logger": "countdown", "data": {"left": k}}
                    })])
                    .await?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Ok(text_result("lift-off"))
            },
        );
    // The log lives in the system's temporary directory, so running the
    // example leaves nothing in the working tree.
    let data = std::env::temp_dir().join("mcp-resume-custom-tools/log");
    let log = Arc::new(DiskLog::open(&data, Retention::default())?);
    let server = McpServer::new(log, tools, ServerConfig::default());
    // The server's router brings /mcp, /metrics, /healthz and /readyz; add your own beside them.
    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello" }))
        .merge(server.router());
    // A free port unless one is given: `cargo run -p mcp-resume-server --example custom_tools -- 127.0.0.1:8090`.
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // Retention, idle expiry and a clean shutdown (1001 to sockets) on Ctrl-C.
    server
        .serve_app(listener, app, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
