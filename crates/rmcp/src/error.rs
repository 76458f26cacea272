//! Why a store call failed; rmcp sees these boxed, as `EventStoreError` or
//! `SessionStoreError`, and only logs their text, so the text names the cause.

use mcp_resume_log::LogError;

/// Everything the rmcp stores can refuse or fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// rmcp handed over a stream id this crate cannot place in the log.
    #[error("stream id {0:?} cannot name a log stream")]
    BadStreamId(String),
    /// A `Last-Event-ID` this store never issued (or mangled in transit).
    #[error("event id {0:?} was not issued by this store (expected SESSION/STREAM/SEQ)")]
    BadEventId(String),
    /// A `Last-Event-ID` the log cannot resume from: another session's, ahead
    /// of the head, already trimmed, or of a session that ended.
    #[error("cannot resume after event {id:?}: {source}")]
    Resume {
        /// The refused event id.
        id: String,
        /// The log's refusal (`Ahead`, `Truncated`, `NoSession` ...).
        #[source]
        source: LogError,
    },
    /// A `Last-Event-ID` of a stream that belongs to another MCP session.
    #[error("event id {id:?} belongs to another session than {session:?}")]
    WrongSession {
        /// The refused event id.
        id: String,
        /// The session the request named.
        session: String,
    },
    /// The log failed an operation (backend down, storage error ...).
    #[error("log {op} on {session:?} failed: {source}")]
    Log {
        /// What was being done.
        op: &'static str,
        /// The log session it was done on.
        session: String,
        /// The log's error.
        #[source]
        source: LogError,
    },
    /// Events of a stream were numbered and queued, and the log did not
    /// commit them (it failed, or put them elsewhere): the stream is shown
    /// no further and refuses every later event.
    #[error("stream {stream:?} is not committed: {why}")]
    NotCommitted {
        /// The log session that holds the stream.
        stream: String,
        /// The log's error, or what it did instead.
        why: String,
    },
    /// An event or session state could not be turned into JSON.
    #[error("encoding for the log failed: {0}")]
    Encode(#[source] serde_json::Error),
    /// A stored record is not what this crate writes.
    #[error("log record {what} is not readable: {source}")]
    Decode {
        /// Which record.
        what: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

impl StoreError {
    /// The log's error underneath, if any (for tests and callers that map it).
    pub fn log_error(&self) -> Option<&LogError> {
        match self {
            StoreError::Resume { source, .. } | StoreError::Log { source, .. } => Some(source),
            _ => None,
        }
    }
}
