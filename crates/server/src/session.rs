//! Session ids and the server's per-session record kept in the log.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A new session id: 256 bits from the OS CSPRNG, hex (visible ASCII only).
pub fn new_session_id() -> String {
    random_hex::<32>()
}

/// `N` bytes from the OS CSPRNG as `2N` lower-case hex digits (by table:
/// a `format!` per byte was a few percent of an open's CPU).
pub(crate) fn random_hex<const N: usize>() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the OS random source failed");
    let mut s = String::with_capacity(2 * N);
    for b in buf {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 15)] as char);
    }
    s
}

/// Whether a client-supplied id has the shape this server generates (64
/// lower-case hex digits). Anything else cannot name a session of ours, so it
/// never reaches the log or a storage key: the caller answers 404.
pub fn valid_session_id(id: &str) -> bool {
    valid_session_id_bytes(id.as_bytes())
}

/// [`valid_session_id`] on a header's bytes (hex digits are ASCII). Every
/// request checks its session id: the check folds over all 64 bytes without
/// an early exit, which the compiler turns into a few vector operations
/// instead of a branch per byte.
pub(crate) fn valid_session_id_bytes(id: &[u8]) -> bool {
    id.len() == 64
        && id.iter().fold(true, |ok, &b| {
            ok & ((b.wrapping_sub(b'0') < 10) | (b.wrapping_sub(b'a') < 6))
        })
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
    pub init: Option<Value>,
    /// Set for a durable task ([`crate::tasks`]), which is a log session of
    /// its own but never an MCP session: a client naming it as one gets 404.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskRecord>,
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

/// What every request checks of a [`SessionRecord`] (who created the
/// session, its revision, whether it is a task), decoded without building
/// the rest: the client's `initialize` params, decoded into a `Value` on
/// every request, were a tenth of the instructions of a `tools/call`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SessionHead {
    /// [`SessionRecord::protocol_version`].
    #[serde(rename = "v")]
    pub protocol_version: String,
    /// [`SessionRecord::principal`].
    #[serde(rename = "p", default)]
    pub principal: Option<String>,
    /// Whether [`SessionRecord::task`] is set (its content is skipped).
    #[serde(rename = "t", default)]
    task: Option<serde::de::IgnoredAny>,
    /// Whether [`SessionRecord::listen`] is set (its content is skipped).
    #[serde(rename = "l", default)]
    listen: Option<serde::de::IgnoredAny>,
}

impl SessionHead {
    /// Decodes from the log; an unreadable record reads as the default, as
    /// [`SessionRecord::decode`] does.
    pub(crate) fn decode(b: &[u8]) -> Self {
        serde_json::from_slice(b).unwrap_or_default()
    }

    /// Whether the record is a durable task's, not an MCP session's.
    pub(crate) fn is_task(&self) -> bool {
        self.task.is_some()
    }

    /// Whether the record is a resumable listen stream's, whose owner's
    /// death ends it (`http::subs::end_if_orphaned`).
    pub(crate) fn is_listen(&self) -> bool {
        self.listen.is_some()
    }
}

/// What the server keeps of a task in its session record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The instance that runs the task's work.
    #[serde(rename = "o")]
    pub owner: String,
    /// When it was created (Unix ms).
    #[serde(rename = "c")]
    pub created_ms: u64,
    /// How long it is kept after its last use (ms).
    #[serde(rename = "ttl")]
    pub ttl_ms: u64,
    /// How often a client should poll it (ms).
    #[serde(rename = "poll")]
    pub poll_ms: u64,
    /// Its state now; `None` in a record written by a release that kept
    /// states only in the task's stream (then folded from it).
    #[serde(rename = "st", default, skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<TaskState>,
    /// Whether its events are kept in request stream 1 for `tasks/stream`
    /// (false in a record written by a release without event streams).
    #[serde(rename = "ev", default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) events: bool,
}

/// A task's state, as its record keeps it; its transitions are
/// `crate::tasks::fold`'s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TaskState {
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    #[serde(rename = "s")]
    pub(crate) status: String,
    /// When it last changed (Unix ms).
    #[serde(rename = "u")]
    pub(crate) updated_ms: u64,
    /// What the wire shows beside the status: `inputRequests` (only those
    /// still outstanding), `result` or `error`.
    #[serde(rename = "p", default, skip_serializing_if = "Map::is_empty")]
    pub(crate) payload: Map<String, Value>,
    /// Answers a client gave that the work has not taken yet, by key.
    #[serde(rename = "a", default, skip_serializing_if = "Map::is_empty")]
    pub(crate) answers: Map<String, Value>,
}

/// Reads the server's record of a session.
pub(crate) async fn read_record(
    log: &dyn mcp_resume_log::Log,
    session: &str,
) -> Result<SessionRecord, mcp_resume_log::LogError> {
    Ok(SessionRecord::decode(&log.session(session).await?.meta))
}

/// Changes the session's record under `lock` (the server's one lock on
/// read-modify-write of records); `f` returns whether it changed anything.
pub(crate) async fn update_record(
    log: &dyn mcp_resume_log::Log,
    lock: &tokio::sync::Mutex<()>,
    session: &str,
    f: impl FnOnce(&mut SessionRecord) -> bool,
) -> Result<bool, mcp_resume_log::LogError> {
    let _guard = lock.lock().await;
    let mut rec = read_record(log, session).await?;
    if !f(&mut rec) {
        return Ok(false);
    }
    log.set_meta(session, rec.encode()).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_generated_shape_is_a_session_id() {
        let id = new_session_id();
        assert!(valid_session_id(&id), "{id}");
        let ok = "0123456789abcdef".repeat(4);
        assert!(valid_session_id(&ok));
        // Each byte just outside the two ranges, at either end of the id.
        for bad in [b'/', b':', b'`', b'g', b'A', b'F', b' ', 0x80] {
            for at in [0, 31, 63] {
                let mut v = ok.clone().into_bytes();
                v[at] = bad;
                assert!(!valid_session_id_bytes(&v), "{bad:#x} at {at}");
            }
        }
        assert!(!valid_session_id(&ok[..63]));
        assert!(!valid_session_id(&format!("{ok}0")));
        assert!(!valid_session_id(""));
        assert!(!valid_session_id(&"é".repeat(32)));
    }
}
