//! The log's typed errors.

use mcp_resume_proto::CursorDiscontinuity;

use crate::Seq;

/// Everything that can go wrong in the log; each maps to one HTTP status or
/// close code at the transport.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// Unknown, expired or ended session (404 / 4404).
    #[error("no such session {0:?}")]
    NoSession(String),
    /// `create_session` with an id already used, live or ended.
    #[error("session {0:?} already exists")]
    SessionExists(String),
    /// Unknown request stream of a live session.
    #[error("session {session:?} has no request stream {stream}")]
    NoStream {
        /// The session.
        session: String,
        /// The stream number.
        stream: u64,
    },
    /// A cursor past the committed head (409 `ahead`).
    #[error("cursor {cursor} is ahead of the head {head}")]
    Ahead {
        /// Asked-for cursor.
        cursor: Seq,
        /// Committed head.
        head: Seq,
        /// Retained floor.
        floor: Seq,
    },
    /// A cursor below the retained floor (409 `truncated`).
    #[error("cursor {cursor} is below the floor {floor}")]
    Truncated {
        /// Asked-for cursor.
        cursor: Seq,
        /// Committed head.
        head: Seq,
        /// Retained floor.
        floor: Seq,
    },
    /// Events after the cursor were committed but damaged storage lost them
    /// (409 `data-lost`, docs/protocol.md 6.1); `to` and later cursors are served.
    #[error("cursor {cursor} needs events {from} to {to}, which damaged storage lost")]
    DataLost {
        /// Asked-for cursor.
        cursor: Seq,
        /// First lost seq.
        from: Seq,
        /// Last lost seq.
        to: Seq,
        /// Committed head.
        head: Seq,
        /// Retained floor.
        floor: Seq,
    },
    /// A subscriber fell behind its buffer; it resumes from `cursor` (4429).
    #[error("reader lagged behind at cursor {cursor}")]
    Lagged {
        /// The last seq this subscription delivered.
        cursor: Seq,
    },
    /// The session opened its maximum of request streams already
    /// ([`crate::EventLog::open_request_stream`]'s `max`; 429): nothing was
    /// written.
    #[error("session {session:?} opened its maximum of {max} request streams")]
    TooManyStreams {
        /// The session.
        session: String,
        /// The limit it reached.
        max: u64,
    },
    /// The session ended while a subscription was open.
    #[error("the session ended")]
    SessionEnded,
    /// An append on behalf of a lease ([`crate::EventLog::append_fenced`]) from a
    /// handle that no longer holds it: another instance runs the session.
    #[error("this instance no longer holds the lease of session {0:?}")]
    LeaseLost(String),
    /// The log is shutting down.
    #[error("the log is closed")]
    Closed,
    /// The backend cannot be reached now (503 with `Retry-After`).
    #[error("log backend unavailable: {0}")]
    Unavailable(String),
    /// The storage engine failed.
    #[error("storage error: {0}")]
    Storage(String),
    /// Stored data failed its integrity checks.
    #[error("the log data is corrupt: {0}")]
    Corrupt(String),
}

impl LogError {
    /// The protocol's view of a cursor refusal, where this is one.
    pub fn discontinuity(&self) -> Option<CursorDiscontinuity> {
        match *self {
            LogError::Ahead {
                cursor,
                head,
                floor,
            } => Some(CursorDiscontinuity::Ahead {
                prior: cursor,
                head,
                floor,
            }),
            LogError::Truncated {
                cursor,
                head,
                floor,
            } => Some(CursorDiscontinuity::Truncated {
                prior: cursor,
                head,
                floor,
            }),
            LogError::DataLost {
                cursor,
                from,
                to,
                head,
                floor,
            } => Some(CursorDiscontinuity::DataLost {
                prior: cursor,
                from,
                to,
                head,
                floor,
            }),
            _ => None,
        }
    }

    pub(crate) fn from_discontinuity(d: CursorDiscontinuity) -> Self {
        match d {
            CursorDiscontinuity::Ahead { prior, head, floor } => LogError::Ahead {
                cursor: prior,
                head,
                floor,
            },
            CursorDiscontinuity::Truncated { prior, head, floor } => LogError::Truncated {
                cursor: prior,
                head,
                floor,
            },
            CursorDiscontinuity::DataLost {
                prior,
                from,
                to,
                head,
                floor,
            } => LogError::DataLost {
                cursor: prior,
                from,
                to,
                head,
                floor,
            },
            other => LogError::Storage(other.to_string()),
        }
    }
}
