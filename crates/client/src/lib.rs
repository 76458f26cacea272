//! A client that keeps the mcp-resume promise on its side: it resumes from
//! its cursor, upgrades to WebSocket only when the server proves continuity,
//! checks every seq, and reports a gap, a duplicate or a 409 as a typed
//! [`ClientError::Discontinuity`], never papering over it.
//!
//! Against a plain Streamable HTTP server (opaque event ids) it still works:
//! it resumes with `Last-Event-ID` and does not upgrade.

mod error;
mod reader;
mod session;
pub mod sse;

pub use error::ClientError;
pub use reader::{ReadEvent, ReaderOptions, SessionReader, Transport};
pub use session::McpClient;
