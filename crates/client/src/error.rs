//! The client's typed errors.

use mcp_resume_proto::CursorDiscontinuity;

use crate::tls::{tls_cause, with_sources, TlsError};

/// What can go wrong; the application decides, nothing is swallowed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// Continuity from the cursor cannot be proven (a 409, a gap, a duplicate,
    /// a heartbeat ahead): re-synchronise (for MCP: re-list tools, resources, prompts).
    #[error("cursor discontinuity: {0}")]
    Discontinuity(CursorDiscontinuity),
    /// The session is gone (404 or close 4404): initialise a new one.
    #[error("the session is gone (unknown, expired or deleted)")]
    SessionGone,
    /// The server answered with an error status.
    #[error("server answered {status}: {body}")]
    Status {
        /// HTTP status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// A JSON-RPC error response.
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        /// Error code.
        code: i64,
        /// Error message.
        message: String,
    },
    /// The connection failed or dropped; retried where that is safe.
    #[error("transport: {0}")]
    Transport(String),
    /// The server broke the protocol (a malformed frame, a missing header).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The client was used wrongly (no session yet, for one).
    #[error("{0}")]
    Usage(String),
    /// The cursor file could not be read or written.
    #[error("cursor file: {0}")]
    CursorFile(String),
    /// TLS could not be set up, or the server's certificate was refused:
    /// never retried, since the same server will be refused again.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl ClientError {
    /// Whether reconnecting from the same cursor may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Transport(_) => true,
            Self::Status { status, .. } => *status >= 500 || *status == 429,
            _ => false,
        }
    }
}

impl From<reqwest::Error> for ClientError {
    fn from(e: reqwest::Error) -> Self {
        match tls_cause(&e) {
            Some(tls) => Self::Tls(tls),
            None => Self::Transport(with_sources(&e)),
        }
    }
}
