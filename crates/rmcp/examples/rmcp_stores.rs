//! rmcp's own `StreamableHttpService`, unchanged but for its stores: its
//! events and sessions in an mcp-resume log on Redis, so any instance on the
//! same Redis serves any session and replays any stream
//! (docs/server-author.md; docs/rmcp.md says what differs from
//! `mcp-resume serve`).
//!
//! ```sh
//! cargo run -p mcp-resume-rmcp --example rmcp_stores -- redis://127.0.0.1:6379/0 127.0.0.1:8092
//! ```

use std::{sync::Arc, time::Duration};

use axum::serve::ListenerExt;
use mcp_resume_log::{Log, RedisLog, Retention};
use mcp_resume_rmcp::{DurableSessionManager, LogSessionStore};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{schemars, tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;

#[derive(Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct EchoArgs {
    /// What to answer.
    text: String,
}

#[derive(Clone)]
struct Echo {
    tool_router: Arc<ToolRouter<Self>>,
}

#[tool_router]
impl Echo {
    #[tool(description = "Returns the text it is given.")]
    async fn echo(
        &self,
        Parameters(EchoArgs { text }): Parameters<EchoArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let redis = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379/0".into());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());

    let log: Arc<dyn Log> = Arc::new(RedisLog::connect(&redis, Retention::default(), 0).await?);
    // Housekeeping is the application's here (`mcp-resume serve` runs its
    // own): retention by age, sessions idle for an hour end, ended ids are
    // forgotten after a day. Each call's request stream is a log session of
    // its own until it idles out (docs/rmcp.md, item 10).
    let maintenance = log.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(30)).await;
            if let Err(e) = maintenance
                .maintain(Duration::from_secs(3600), Duration::from_secs(86400))
                .await
            {
                eprintln!("log maintenance: {e}");
            }
        }
    });

    let mut config = StreamableHttpServerConfig::default();
    config.session_store = Some(Arc::new(LogSessionStore::new(log.clone())));
    let handler = Echo {
        tool_router: Arc::new(Echo::tool_router()),
    };
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(DurableSessionManager::new(log.clone())),
        config,
    );
    let app = axum::Router::new().nest_service("/mcp", service);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/mcp", listener.local_addr()?);
    // TCP_NODELAY on every connection: docs/rmcp.md, "Serving it".
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    log.close().await?;
    Ok(())
}
