//! Resumable listen streams (an extension of MCP 2026-07-28,
//! docs/protocol.md 3.7): `subscriptions/listen` as a stream read from a
//! cursor, like a session stream.

use mcp_resume_proto::{headers as h, RESUMABLE_LISTEN_EXTENSION, STATELESS_PROTOCOL_VERSIONS};
use serde_json::{json, Value};

use crate::session::check_status;
use crate::{ClientError, McpClient};

impl McpClient {
    /// Subscribes to the list changes `notifications` names (e.g.
    /// `{"toolsListChanged": true}`) with a resumable listen stream, and
    /// returns a client attached to it: read it with
    /// [`reader`](McpClient::reader), over SSE or the cursor-safe WebSocket
    /// upgrade, from any cursor, after any disconnect. No `initialize` is
    /// needed (the request carries its own `_meta`). A server that does not
    /// offer the extension is a [`ClientError::Protocol`].
    pub async fn listen(&self, notifications: Value) -> Result<McpClient, ClientError> {
        let version = STATELESS_PROTOCOL_VERSIONS[0];
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
            "notifications": notifications,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": version,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {RESUMABLE_LISTEN_EXTENSION: {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-client", "version": env!("CARGO_PKG_VERSION")}
            }
        }});
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(h::MCP_PROTOCOL_VERSION, version)
            .header(h::MCP_METHOD, "subscriptions/listen");
        if let Some(t) = &self.token {
            rb = rb.bearer_auth(t);
        }
        let resp = check_status(rb.body(body.to_string()).send().await?).await?;
        let Some(listen) = resp
            .headers()
            .get(h::RESUME_LISTEN)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
        else {
            let text = resp.text().await.unwrap_or_default();
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            return Err(ClientError::Protocol(format!(
                "the server did not open a resumable listen stream (extension {RESUMABLE_LISTEN_EXTENSION}): {}",
                if v.is_null() { text } else { v.to_string() }
            )));
        };
        // The POST's body is the stream from its start; the reader takes over.
        drop(resp);
        let mut attached = self.clone().with_session(listen);
        attached.protocol_version = version.to_owned();
        Ok(attached)
    }
}
