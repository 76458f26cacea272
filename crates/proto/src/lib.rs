//! The mcp-resume wire contract (`docs/protocol.md`) as plain data and pure
//! state machines.
//!
//! Nothing here touches a socket, a clock or a disk: the server, the client
//! and the tests drive these types, so the rules that keep a cursor honest are
//! written once and can be exercised through random interleavings without any
//! I/O (the way `quinn-proto` keeps QUIC apart from tokio).
#![deny(missing_docs)]

pub mod close;
pub mod cursor;
pub mod error;
pub mod frame;
pub mod gate;
pub mod headers;
pub mod meta;
pub mod seqcheck;
pub mod sse;
pub mod task;
pub mod upgrade;

pub use cursor::{EventId, ParseCursorError, Seq};
pub use error::{CursorDiscontinuity, ErrorBody};
pub use frame::{ClientFrame, FrameError, ServerFrame};
pub use gate::{Gate, GateError, GateVerdict};
pub use seqcheck::SeqChecker;
pub use upgrade::decide_start;

/// MCP protocol revisions this implementation speaks, newest first; the first
/// one is what `initialize` offers when the client asks for one we do not know.
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// MCP revisions of the stateless era (no `initialize`, no sessions: every
/// request carries its protocol version and client capabilities in `_meta`),
/// which a backend may serve beside the session era on the same endpoint.
pub const STATELESS_PROTOCOL_VERSIONS: &[&str] = &["2026-07-28"];

/// The extension (in `server/discover`'s capabilities and a client's
/// `clientCapabilities.extensions`) that makes `subscriptions/listen` a
/// resumable stream read from a cursor (docs/protocol.md 3.7).
pub const RESUMABLE_LISTEN_EXTENSION: &str = "dev.mcp-resume/resumable-listen";

/// The WebSocket subprotocol that marks a cursor-safe upgrade (docs/protocol.md 5.1).
pub const SUBPROTOCOL: &str = "mcp.resume.v1";

/// An extra subprotocol a client offers (never echoed) when it cannot read the
/// `101`'s headers, as a browser's `WebSocket` cannot: the server then sends
/// the committed cursor `C` as the first frame, `{"type":"cursor","cursor":C}`,
/// before the replay, so the client can check the replay and ack `C`.
pub const CURSOR_FRAME_SUBPROTOCOL: &str = "mcp.resume.cursor-frame";

/// Prefix of the extra subprotocol that carries a bearer token for browsers.
pub const AUTH_SUBPROTOCOL_PREFIX: &str = "mcp.auth.";
