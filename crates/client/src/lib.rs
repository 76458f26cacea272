//! A client that keeps the mcp-resume promise on its side: it resumes from
//! its cursor, upgrades to WebSocket only when the server proves continuity,
//! checks every seq, and reports a gap, a duplicate or a 409 as a typed
//! [`ClientError::Discontinuity`], never papering over it.
//!
//! It speaks `https://` and `wss://` with rustls (the Mozilla roots, plus a
//! private CA with [`McpClient::trust_ca_pem`]).
//!
//! A durable task's events ([`McpClient::stream_task`], SEP-2694) are read
//! the same way: from a cursor, each checked to be the next, resumed after
//! a drop on any instance.
//!
//! Against a plain Streamable HTTP server (opaque event ids) it still works:
//! it resumes with `Last-Event-ID` and does not upgrade.
#![deny(missing_docs)]

mod error;
mod jitter;
mod listen;
mod reader;
mod session;
mod task_stream;
/// The SSE parser (the one codec lives in `mcp_resume_proto::sse`).
pub use mcp_resume_proto::sse;
mod tls;
mod upgrade;

pub use error::ClientError;
pub use jitter::Xorshift64;
pub use reader::{ReadEvent, ReaderOptions, SessionReader, Transport};
pub use session::McpClient;
pub use task_stream::{TaskEvent, TaskStream};
pub use tls::TlsError;
