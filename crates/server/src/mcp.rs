//! What the transport knows of MCP's `initialize`: the revision to answer
//! with, and the built-in tools' result.

use mcp_resume_proto::SUPPORTED_PROTOCOL_VERSIONS;
use serde_json::{json, Value};

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
