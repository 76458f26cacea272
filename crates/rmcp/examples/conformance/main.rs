//! The fixture server of the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`), written with rmcp's macros and
//! served on mcp-resume's durable transport: every message it sends is
//! committed to the log before a client sees it, and its sampling and
//! elicitation requests ride the calling tool's resumable request stream.
//!
//! ```sh
//! cargo build --release --examples
//! target/release/examples/conformance --listen 127.0.0.1:0 [--store memory|disk:DIR|redis://HOST:PORT/DB]
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
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};

#[derive(Parser)]
#[command(about = "The MCP conformance fixtures, served on mcp-resume's durable transport")]
struct Args {
    #[command(flatten)]
    serving: example::Serving,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    example::init_tracing();
    example::exit("conformance", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let log = args.serving.open_log().await?;
    // One prototype, cloned per session: shared routers, per-session state.
    let proto = fixture::Conformance::new();
    let backend = Arc::new(RmcpBackend::new(move || proto.clone()));
    let server = McpServer::with_backend(log, backend, ServerConfig::default());
    let listener = args.serving.listen().await?;
    server
        .serve(listener, example::ctrl_c())
        .await
        .map_err(|e| e.to_string())
}
