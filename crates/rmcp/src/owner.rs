//! Who a request stream belongs to, kept as the metadata of its log session.
//!
//! rmcp names a request stream by a UUID and runs its call in one process's
//! memory; this record ties the stream to its MCP session (so another
//! session's `Last-Event-ID` is refused) and to the log instance running the
//! call (so a replay can end a call whose process died, instead of staying
//! open and silent forever).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The owner record of one request stream.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RequestOwner {
    /// The MCP session the call was made in.
    pub session: String,
    /// The log instance (process) whose rmcp worker runs the call.
    pub instance: String,
    /// The JSON-RPC id of the call, for the error that ends an orphaned call.
    pub request_id: Value,
}

impl RequestOwner {
    pub fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    pub fn parse(meta: &[u8]) -> Option<Self> {
        serde_json::from_slice(meta).ok()
    }

    /// The JSON-RPC error that answers the call when its process is gone.
    pub fn orphan_error(&self) -> Bytes {
        self.error("the server process running this call stopped before answering; its result is lost (call again)")
    }

    /// The JSON-RPC error (-32603) that answers the call with `message`.
    pub fn error(&self, message: &str) -> Bytes {
        let v = serde_json::json!({
            "jsonrpc": "2.0",
            "id": self.request_id,
            "error": {"code": -32603, "message": message}
        });
        Bytes::from(v.to_string())
    }
}
