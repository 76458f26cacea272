//! MCP methods of an initialized session: one request in, one response out.

use mcp_resume_log::StreamKey;
use mcp_resume_proto::SUPPORTED_PROTOCOL_VERSIONS;
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::state::AppState;
use crate::tools;

/// The revision to answer `initialize` with: the client's if we speak it, else our newest.
pub fn negotiate(params: &Value) -> &'static str {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .find(|v| **v == asked)
        .copied()
        .unwrap_or(SUPPORTED_PROTOCOL_VERSIONS[0])
}

/// The `initialize` result for revision `version`.
pub fn initialize_result(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": true}, "logging": {}},
        "serverInfo": {"name": "mcp-resume", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Every server-to-client message is committed to a durable log before it is sent; resume any stream with Last-Event-ID."
    })
}

/// Answers one request of session `session`; `stream` is where the
/// request's own notifications (progress) go.
pub async fn handle_request(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    id: &Value,
    method: &str,
    params: &Value,
) -> Value {
    match method {
        "ping" | "logging/setLevel" => jsonrpc::result(id, json!({})),
        "tools/list" => {
            let mut list: Vec<Value> = state.tools.iter().map(|t| t.describe()).collect();
            match state.record(session).await {
                Ok(rec) => list.extend(rec.dynamic_tools.iter().map(|name| {
                    json!({"name": name, "description": "registered by register_tool", "inputSchema": {"type": "object"}})
                })),
                Err(e) => return jsonrpc::error(id, jsonrpc::INTERNAL_ERROR, e.to_string()),
            }
            jsonrpc::result(id, json!({"tools": list}))
        }
        "tools/call" => tools::call(state, session, stream, id, params).await,
        "initialize" => jsonrpc::error(
            id,
            jsonrpc::INVALID_REQUEST,
            "the session is already initialized",
        ),
        other => jsonrpc::error(
            id,
            jsonrpc::METHOD_NOT_FOUND,
            format!("method {other:?} not found"),
        ),
    }
}
