//! Session ids and the server's per-session record kept in the log.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A new session id: 256 bits from the OS CSPRNG, hex (visible ASCII only).
pub fn new_session_id() -> String {
    let mut buf = [0u8; 32];
    getrandom::fill(&mut buf).expect("the OS random source failed");
    let mut s = String::with_capacity(64);
    for b in buf {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Whether a client-supplied id has the shape this server generates (64
/// lower-case hex digits). Anything else cannot name a session of ours, so it
/// never reaches the log or a storage key: the caller answers 404.
pub fn valid_session_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What the server remembers of a session; stored as the log's opaque meta,
/// so it survives a restart on the disk log.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The negotiated MCP revision.
    #[serde(rename = "v")]
    pub protocol_version: String,
    /// Tools this session registered with `register_tool`.
    #[serde(rename = "dyn", default)]
    pub dynamic_tools: Vec<String>,
    /// Who created the session (a token's `sub`, or the static bearer
    /// token's principal); any other principal is told the session does not exist.
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The client's `initialize` params, kept for a session served by a
    /// [`Backend`](crate::backend::Backend): any instance restores the
    /// session's backend from them (its peer's capabilities and info).
    #[serde(rename = "i", default, skip_serializing_if = "Option::is_none")]
    pub init: Option<serde_json::Value>,
    /// Set for a durable task ([`crate::tasks`]), which is a log session of
    /// its own but never an MCP session: a client naming it as one gets 404.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub task: Option<crate::tasks::TaskRecord>,
    /// Set for a resumable listen stream (MCP 2026-07-28 extension): a log
    /// session read like a session stream, fed by the backend on its owner.
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<ListenRecord>,
}

/// What the server keeps of a resumable listen stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenRecord {
    /// The instance whose backend feeds it; `None` when any instance may
    /// (the built-in tools' `emit`), so no instance's death ends it.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// The MCP revision whose sessions may still send JSON-RPC batches (they
/// were removed in 2025-06-18).
pub const BATCH_REVISION: &str = "2025-03-26";

impl SessionRecord {
    /// Encodes for the log.
    pub fn encode(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decodes from the log; an unreadable record reads as the default.
    pub fn decode(b: &[u8]) -> Self {
        serde_json::from_slice(b).unwrap_or_default()
    }
}
