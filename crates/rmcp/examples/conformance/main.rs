//! The fixture server of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`), written with rmcp's macros and
//! served on mcp-resume's durable transport: every message it sends is
//! committed to the log before a client sees it, and its sampling and
//! elicitation requests ride the calling tool's resumable request stream.
//!
//! With `--transport rmcp` the same handler factory runs on rmcp's own
//! `StreamableHttpService` instead (sessions for 2025-11-25 clients,
//! stateless 2026-07-28 requests, loopback `Host` only, nothing durable):
//! the reference the suite's numbers on mcp-resume compare against.
//!
//! ```sh
//! cargo build --release --examples
//! target/release/examples/conformance --listen 127.0.0.1:0 [--store memory|disk:DIR|redis://HOST:PORT/DB] [--transport mcp-resume|rmcp]
//! scripts/conformance URL   # the URL it printed
//! ```

// Sampling and `notifications/message` are what the 2025-11-25 suite calls;
// rmcp 3.11 marks them deprecated (SEP-2577).
#![allow(deprecated)]

#[path = "../common/example.rs"]
mod example;
mod fixture;

use std::sync::Arc;

use clap::Parser;
use mcp_resume_rmcp::DurableTasks;
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::tasks::TaskStore;
use mcp_resume_server::{McpServer, ServerConfig};
use rmcp::transport::streamable_http_server::{
    session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
};

#[derive(Parser)]
#[command(about = "The MCP conformance fixtures, served on mcp-resume's durable transport")]
struct Args {
    #[command(flatten)]
    serving: example::Serving,
    /// `mcp-resume`: mcp-resume's durable transport (`--store` holds the
    /// sessions); `rmcp`: rmcp's own StreamableHttpService, in memory
    /// (`--store` is ignored).
    #[arg(long, default_value = "mcp-resume", value_parser = ["mcp-resume", "rmcp"])]
    transport: String,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    example::init_tracing();
    example::exit("conformance", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    // One prototype, cloned per session (per request at 2026-07-28): shared
    // routers and listen streams, per-session state.
    if args.transport == "rmcp" {
        return serve_rmcp(&args, fixture::Conformance::new()).await;
    }
    let log = args.serving.open_log().await?;
    // Durable tasks in the same log: tasks/* are answered from it on any
    // instance, the fixture's task tools create them.
    let store = TaskStore::new(log.clone());
    let proto = fixture::Conformance::with_tasks(DurableTasks::new(store.clone()));
    let backend = Arc::new(RmcpBackend::new(move || proto.clone()));
    let server = McpServer::with_backend(log, backend, ServerConfig::default()).with_tasks(store);
    let listener = args.serving.listen().await?;
    server
        .serve(listener, example::stop_signal())
        .await
        .map_err(|e| e.to_string())
}

/// Serves the fixture on rmcp's `StreamableHttpService` at `/mcp`:
/// 2025-11-25 clients get sessions (`legacy_session_mode`), 2026-07-28
/// requests are served statelessly, and only loopback `Host`s are allowed.
async fn serve_rmcp(args: &Args, proto: fixture::Conformance) -> Result<(), String> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(true)
        .with_allowed_hosts(["localhost", "127.0.0.1", "::1", "[::1]"]);
    let service = StreamableHttpService::new(
        move || Ok(proto.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = args.serving.listen().await?;
    // TCP_NODELAY: see docs/rmcp.md, Serving it (Nagle meets delayed ACKs).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(example::stop_signal())
        .await
        .map_err(|e| e.to_string())
}
