//! An rmcp server (the official Rust SDK's own `StreamableHttpService`) whose
//! events and sessions live in an mcp-resume log, with the demo tools `echo`,
//! `emit`, `progress` and `confirm` (what `mcp-resume chaos --hosted`
//! judges). Two instances on one Redis serve the same sessions.
//!
//! With `--transport mcp-resume` the same handler runs on mcp-resume's own
//! transport instead (`McpServer::with_backend` + `RmcpBackend`): the way to
//! compare the two transports, and the cost of hosting rmcp, on one handler.
//! With `--transport rmcp-alone` it is rmcp without durability (its
//! in-memory `LocalSessionManager`, no event store, `--store` unused): the
//! baseline the first two are measured against (`mcp-resume-load paths`).
//!
//! ```sh
//! rmcp_durable --listen 127.0.0.1:0 --store memory|disk:DIR|redis://HOST:PORT/DB [--transport rmcp|mcp-resume|rmcp-alone]
//! ```

// The demo's `emit` sends `notifications/message`, which rmcp 3.11 marks
// deprecated (SEP-2577); it is still the message the issue and clients expect.
#![allow(deprecated)]

use std::{sync::Arc, time::Duration};

use clap::Parser;

#[path = "common/example.rs"]
mod example;
use mcp_resume_rmcp::{DurableSessionManager, LogSessionStore};
use mcp_resume_server::{McpServer, ServerConfig as McpConfig};
use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
        ElicitationAction, ElicitationSchema, JsonObject, ListToolsResult, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProgressNotificationParam,
        ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    ErrorData, RoleServer, ServerHandler,
};
use serde_json::{json, Value};

/// The largest `count` emit accepts, as in `mcp-resume serve`.
const MAX_EMIT: u64 = 100_000;

#[derive(Parser)]
#[command(about = "rmcp's StreamableHttpService on an mcp-resume log")]
struct Args {
    #[command(flatten)]
    serving: example::Serving,
    /// `rmcp`: rmcp's own StreamableHttpService with the log as its stores;
    /// `mcp-resume`: mcp-resume's transport hosting the same handler;
    /// `rmcp-alone`: rmcp's service in memory with no event store (nothing
    /// durable, no resumption), as a baseline.
    #[arg(long, default_value = "rmcp", value_parser = ["rmcp", "mcp-resume", "rmcp-alone"])]
    transport: String,
    /// With `--transport mcp-resume`: seconds a session's handler may have
    /// nothing in flight before it is parked (dropped, and made again from
    /// the session's stored `initialize` on its next message), as
    /// `mcp-resume serve --park-after-secs`.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    park_after_secs: u64,
}

/// The demo tools.
#[derive(Clone)]
struct Demo;

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

/// A failed send to the client, as the tool's error.
fn internal(e: rmcp::service::ServiceError) -> ErrorData {
    ErrorData::internal_error(e.to_string(), None)
}

fn uint(args: &JsonObject, key: &str, default: Option<u64>) -> Result<u64, ErrorData> {
    match args.get(key) {
        Some(v) => v.as_u64().ok_or_else(|| {
            ErrorData::invalid_params(format!("{key} must be a non-negative integer"), None)
        }),
        None => {
            default.ok_or_else(|| ErrorData::invalid_params(format!("{key} is required"), None))
        }
    }
}

impl ServerHandler for Demo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "echo",
                "Returns the text it is given.",
                schema(json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})),
            ),
            Tool::new(
                "progress",
                "Reports progress 1..=n to the call's progress token, `interval_ms` apart, then answers `counted n` (what `mcp-resume chaos --hosted` numbers).",
                schema(json!({"type": "object", "properties": {
                    "n": {"type": "integer", "minimum": 0},
                    "interval_ms": {"type": "integer", "minimum": 0}
                }, "required": ["n"]})),
            ),
            Tool::new(
                "confirm",
                "Asks the client to confirm `token` (elicitation, field `answer`); answers with what it said.",
                schema(json!({"type": "object", "properties": {"token": {"type": "string"}}, "required": ["token"]})),
            ),
            Tool::new(
                "emit",
                "Sends `count` notifications/message on the session's standalone stream, `interval_ms` apart, in the background.",
                schema(json!({"type": "object", "properties": {
                    "count": {"type": "integer", "minimum": 0},
                    "interval_ms": {"type": "integer", "minimum": 0}
                }, "required": ["count"]})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        match request.name.as_ref() {
            "echo" => {
                let text = args
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("text is required", None))?;
                Ok(CallToolResult::success(vec![ContentBlock::text(text.to_owned())]).into())
            }
            "progress" => {
                let n = uint(&args, "n", None)?.min(MAX_EMIT);
                let interval = Duration::from_millis(uint(&args, "interval_ms", Some(0))?);
                if let Some(token) = context.meta.get_progress_token() {
                    for i in 1..=n {
                        if i > 1 && !interval.is_zero() {
                            tokio::time::sleep(interval).await;
                        }
                        let p = ProgressNotificationParam::new(token.clone(), i as f64)
                            .with_total(n as f64);
                        context.peer.notify_progress(p).await.map_err(internal)?;
                    }
                }
                Ok(
                    CallToolResult::success(vec![ContentBlock::text(format!("counted {n}"))])
                        .into(),
                )
            }
            "confirm" => {
                let token = args
                    .get("token")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("token is required", None))?;
                let schema = ElicitationSchema::builder()
                    .required_string("answer")
                    .build()
                    .map_err(|e| ErrorData::internal_error(e, None))?;
                let got = context
                    .peer
                    .create_elicitation(ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message: format!("confirm {token}"),
                        requested_schema: schema,
                    })
                    .await
                    .map_err(internal)?;
                let said = match got.action {
                    ElicitationAction::Accept => got
                        .content
                        .as_ref()
                        .and_then(|c| c.get("answer"))
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    other => format!("{other:?}").to_lowercase(),
                };
                Ok(CallToolResult::success(vec![ContentBlock::text(said)]).into())
            }
            "emit" => {
                let count = uint(&args, "count", None)?;
                let interval = uint(&args, "interval_ms", Some(0))?;
                if count > MAX_EMIT {
                    return Err(ErrorData::invalid_params(
                        format!("count is limited to {MAX_EMIT}"),
                        None,
                    ));
                }
                // A 2026-07-28 request has no session, so no standalone
                // stream: what emit would send in the background after its
                // answer has nowhere to go. Say so instead of answering
                // success and sending nothing (issue 23, item 7).
                if context
                    .protocol_version()
                    .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
                {
                    return Ok(CallToolResult::error(vec![ContentBlock::text(
                        "emit sends on the session's standalone stream, which a MCP \
                         2026-07-28 request does not have: call it in a 2025-11-25 session",
                    )])
                    .into());
                }
                let peer = context.peer.clone();
                tokio::spawn(async move {
                    for k in 1..=count {
                        let mut params = LoggingMessageNotificationParam::new(
                            LoggingLevel::Info,
                            json!({"i": k, "count": count}),
                        );
                        params.logger = Some("emit".into());
                        if let Err(e) = peer.notify_logging_message(params).await {
                            tracing::info!(error = %e, "emit stopped");
                            return;
                        }
                        if interval > 0 {
                            tokio::time::sleep(Duration::from_millis(interval)).await;
                        }
                    }
                });
                Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "emitting {count} notifications"
                ))])
                .into())
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other:?}"),
                None,
            )),
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    example::init_tracing();
    example::exit("rmcp_durable", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let log = args.serving.open_log().await?;
    // Idle sessions and the request streams' own log sessions expire here.
    let maint = log.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if let Err(e) = maint
                .maintain(Duration::from_secs(3600), Duration::from_secs(3600))
                .await
            {
                tracing::warn!(error = %e, "log maintenance failed");
            }
        }
    });
    let listener = args.serving.listen().await?;
    if args.transport == "mcp-resume" {
        let backend = Arc::new(mcp_resume_rmcp::RmcpBackend::new(|| Demo));
        let mut config = McpConfig::default();
        config.park_after = Some(std::time::Duration::from_secs(args.park_after_secs));
        let server = McpServer::with_backend(log, backend, config);
        return server
            .serve(listener, example::stop_signal())
            .await
            .map_err(|e| e.to_string());
    }
    let app = if args.transport == "rmcp-alone" {
        axum::Router::new().nest_service(
            "/mcp",
            StreamableHttpService::new(
                || Ok(Demo),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            ),
        )
    } else {
        let mut config = StreamableHttpServerConfig::default();
        config.session_store = Some(Arc::new(LogSessionStore::new(log.clone())));
        let service = StreamableHttpService::new(
            || Ok(Demo),
            Arc::new(DurableSessionManager::new(log.clone())),
            config,
        );
        axum::Router::new().nest_service("/mcp", service)
    };
    // TCP_NODELAY: rmcp answers a POST as SSE in small writes, and Nagle's
    // algorithm holding them for the client's delayed ACK costs ~40 ms per
    // call (docs/rmcp.md, Serving it).
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(example::stop_signal())
        .await;
    let _ = log.close().await;
    served.map_err(|e| e.to_string())
}
