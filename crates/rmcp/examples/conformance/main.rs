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

mod fixture;
#[path = "../common/store.rs"]
mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::Parser;
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};

#[derive(Parser)]
#[command(about = "The MCP conformance fixtures, served on mcp-resume's durable transport")]
struct Args {
    /// Address to listen on (port 0 picks a free one; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where sessions live: memory, disk:DIR or redis://HOST:PORT/DB.
    #[arg(long, default_value = "memory")]
    store: String,
    /// Replicas that must acknowledge each Redis append (WAIT).
    #[arg(long, default_value_t = 0)]
    redis_replicas: usize,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let log = match store::open_log(&args.store, args.redis_replicas).await {
        Ok(log) => log,
        Err(e) => {
            eprintln!("conformance: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // One prototype, cloned per session: shared routers, per-session state.
    let proto = fixture::Conformance::new();
    let backend = Arc::new(RmcpBackend::new(move || proto.clone()));
    let server = McpServer::with_backend(log, backend, ServerConfig::default());
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("conformance: binding {}: {e}", args.listen);
            return std::process::ExitCode::FAILURE;
        }
    };
    match listener.local_addr() {
        Ok(addr) => println!("listening on http://{addr}/mcp"),
        Err(e) => {
            eprintln!("conformance: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match server.serve(listener, shutdown).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("conformance: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
