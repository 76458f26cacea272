//! Error bodies and the one typed error for a cursor that cannot be honoured.

use serde::{Deserialize, Serialize};

use crate::Seq;

/// The JSON body of every non-JSON-RPC error (docs/protocol.md 3).
///
/// `code` is kebab-case and stable, so clients branch on it; `message` is for
/// people; `details` carries the numbers a client needs to recover.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable kebab-case code, e.g. `cursor-discontinuity`.
    pub error: String,
    /// A human sentence.
    pub message: String,
    /// Extra fields, flattened into the object.
    #[serde(flatten)]
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ErrorBody {
    /// A body with no details.
    pub fn new(error: &str, message: impl Into<String>) -> Self {
        Self {
            error: error.to_owned(),
            message: message.into(),
            details: serde_json::Map::new(),
        }
    }

    /// Adds one detail field.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }
}

/// Why continuity from a cursor cannot be proven.
///
/// Server and client raise the same type, so an application sees one error
/// whichever side noticed; every variant names the cursors involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CursorDiscontinuity {
    /// The reader claims to have seen more than was ever committed.
    #[error("cursor {prior} is ahead of the committed head {head}")]
    Ahead {
        /// The reader's cursor.
        prior: Seq,
        /// The committed head.
        head: Seq,
        /// The lowest retained seq.
        floor: Seq,
    },
    /// Events after the cursor were already trimmed by retention.
    #[error("cursor {prior} is below the retained floor {floor}: events {} to {} are gone", prior + 1, floor.saturating_sub(1))]
    Truncated {
        /// The reader's cursor.
        prior: Seq,
        /// The committed head.
        head: Seq,
        /// The lowest retained seq.
        floor: Seq,
    },
    /// Committed events after the cursor are gone because the storage that
    /// held them was damaged (docs/protocol.md 6.1): `from ..= to` will never
    /// be served; `to` and later cursors are.
    #[error("cursor {prior} needs events {from} to {to}, which damaged storage lost")]
    DataLost {
        /// The reader's cursor.
        prior: Seq,
        /// First lost seq.
        from: Seq,
        /// Last lost seq.
        to: Seq,
        /// The committed head.
        head: Seq,
        /// The lowest retained seq.
        floor: Seq,
    },
    /// A `101` without `X-MCP-Resume-Cursor`: the socket's ordering is unknown.
    #[error(
        "the upgrade response carried no X-MCP-Resume-Cursor; cannot prove continuity from {prior}"
    )]
    MissingEcho {
        /// The reader's cursor.
        prior: Seq,
    },
    /// The echoed cursor is behind what the reader has already processed.
    #[error("the upgrade echoed cursor {echo}, below the reader's cursor {prior}")]
    EchoBelowPrior {
        /// The reader's cursor.
        prior: Seq,
        /// The echoed cursor.
        echo: Seq,
    },
    /// An event arrived that is not `last + 1`.
    #[error("expected seq {expected}, got {got}")]
    Gap {
        /// `last + 1`.
        expected: Seq,
        /// What arrived.
        got: Seq,
    },
    /// The server's head is past what this reader received: something was lost.
    #[error("heartbeat says head {head} but the last event received is {last}")]
    HeartbeatAhead {
        /// Last seq received.
        last: Seq,
        /// The head the heartbeat announced.
        head: Seq,
    },
}

impl CursorDiscontinuity {
    /// The `reason` field of the 409 body, where this is a server-side refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Ahead { .. } => "ahead",
            Self::Truncated { .. } => "truncated",
            Self::DataLost { .. } => "data-lost",
            Self::MissingEcho { .. } => "missing-echo",
            Self::EchoBelowPrior { .. } => "echo-below-prior",
            Self::Gap { .. } => "gap",
            Self::HeartbeatAhead { .. } => "heartbeat-ahead",
        }
    }

    /// The 409 body of docs/protocol.md 4, for `Ahead`, `Truncated` and `DataLost`.
    pub fn to_body(&self) -> ErrorBody {
        let body =
            ErrorBody::new("cursor-discontinuity", self.to_string()).with("reason", self.reason());
        match *self {
            Self::Ahead { prior, head, floor } | Self::Truncated { prior, head, floor } => body
                .with("cursor", prior)
                .with("resume-cursor", head)
                .with("head", head)
                .with("floor", floor),
            Self::DataLost {
                prior,
                from,
                to,
                head,
                floor,
            } => body
                .with("cursor", prior)
                .with("resume-cursor", to)
                .with("lost-from", from)
                .with("lost-to", to)
                .with("head", head)
                .with("floor", floor),
            _ => body,
        }
    }
}
