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

/// Whether a client-supplied id has the shape of one (PROTOCOL.md 1).
pub fn valid_session_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
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
}

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
