//! An MCP server over Streamable HTTP whose every connection is a reader of
//! the session log from a cursor.
//!
//! - [`http`]: `POST`/`GET`/`DELETE` on the base path, and the SSE session stream;
//! - [`sse`]: the one SSE encoder and the replay-then-live reader;
//! - [`ws`]: the cursor-safe WebSocket upgrade (commit point, echo, gate);
//! - [`tools`]: the API a Rust author serves their own tools with; [`demo`]
//!   is one user of it.
//!
//! Mount it in your own axum application:
//!
//! ```no_run
//! use std::sync::Arc;
//! use mcp_resume_log::MemoryLog;
//! use mcp_resume_server::{demo::demo_tools, McpServer, ServerConfig};
//!
//! # async fn run() -> std::io::Result<()> {
//! let server = McpServer::new(Arc::new(MemoryLog::default()), demo_tools(), ServerConfig::default());
//! let app = axum::Router::new().merge(server.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod config;
pub mod demo;
mod error;
pub mod http;
mod jsonrpc;
pub mod listen;
mod mcp;
mod session;
pub mod sse;
mod state;
pub mod tools;
pub mod ws;

use std::future::Future;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use mcp_resume_log::Log;
use tokio::sync::{watch, Mutex};

pub use config::ServerConfig;
pub use error::ApiError;
pub use listen::{tls_config, ConnLimits, ListenError};
pub use state::AppState;
pub use tools::{ToolContext, ToolError, ToolRegistry};

/// One MCP server: its state, its routes and its shutdown switch.
pub struct McpServer {
    state: AppState,
    stop: watch::Sender<bool>,
}

impl McpServer {
    /// A server over `log` offering `tools`.
    pub fn new(log: Arc<dyn Log>, tools: ToolRegistry, config: ServerConfig) -> Self {
        let (stop, shutdown) = watch::channel(false);
        let state = AppState {
            log,
            tools: Arc::new(tools),
            config: Arc::new(config),
            shutdown,
            record_lock: Arc::new(Mutex::new(())),
        };
        Self { state, stop }
    }

    /// The shared state, for handlers of the embedding application.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The routes under the base path, ready to merge into an application.
    pub fn router(&self) -> Router {
        let p = self.state.config.base_path.clone();
        Router::new()
            .route(&p, get(http::get).post(http::post).delete(http::delete))
            .route(
                &format!("{p}/session/{{id}}/events"),
                get(http::session_events),
            )
            .with_state(self.state.clone())
    }

    /// Tells every stream to end and every socket to close with 1001.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Runs retention and idle expiry until shutdown.
    pub fn spawn_maintenance(&self) -> tokio::task::JoinHandle<()> {
        let state = self.state.clone();
        tokio::spawn(async move {
            let mut shutdown = state.shutdown.clone();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(state.config.maintenance_interval) => {}
                    _ = crate::state::stopped(&mut shutdown) => return,
                }
                match state.log.maintain(state.config.session_ttl).await {
                    Ok(ended) if !ended.is_empty() => {
                        tracing::info!(count = ended.len(), "idle sessions ended")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "maintenance failed"),
                }
            }
        })
    }

    /// Serves until `signal` completes, then stops accepting, closes sockets
    /// with 1001, ends SSE streams and closes the log. TLS and the connection
    /// limits come from [`ServerConfig::tls`] and [`ServerConfig::conn_limits`].
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let app = self.router();
        self.serve_app(listener, app, signal).await
    }

    /// As [`McpServer::serve`], for an application that merged [`McpServer::router`]
    /// with routes of its own: the same maintenance and clean shutdown.
    pub async fn serve_app(
        self,
        listener: tokio::net::TcpListener,
        app: Router,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let maintenance = self.spawn_maintenance();
        let stop = self.stop.clone();
        let config = &self.state.config;
        listen::serve(
            listener,
            app,
            config.tls.clone(),
            config.conn_limits,
            async move {
                signal.await;
                let _ = stop.send(true);
            },
        )
        .await?;
        self.shutdown();
        maintenance.abort();
        // Give sockets a moment to send their 1001 before the process goes.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        self.state
            .log
            .close()
            .await
            .map_err(std::io::Error::other)?;
        Ok(())
    }
}
