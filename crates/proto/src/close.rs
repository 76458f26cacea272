//! WebSocket close codes of docs/protocol.md 5.5.
//!
//! Each code tells the client what to do next, so they are named by cause.

/// Normal closure.
pub const NORMAL: u16 = 1000;
/// Server shutting down: resume from the cursor, on any instance.
pub const GOING_AWAY: u16 = 1001;
/// A binary frame arrived; the protocol is text only.
pub const UNSUPPORTED_DATA: u16 = 1003;
/// Not authorised: stop.
pub const POLICY: u16 = 1008;
/// A frame over the size limit.
pub const TOO_BIG: u16 = 1009;
/// Malformed frame: not a JSON object, or unknown `type`.
pub const MALFORMED: u16 = 4400;
/// The session ended: re-initialise.
pub const SESSION_ENDED: u16 = 4404;
/// No `cursor-ack` within the upgrade timeout.
pub const ACK_TIMEOUT: u16 = 4408;
/// Cursor mismatch, second ack, or a gap seen by either side.
pub const CURSOR_MISMATCH: u16 = 4409;
/// The reader fell too far behind the log.
pub const LAGGED: u16 = 4429;

/// What a client should do after the server closed with `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAdvice {
    /// Nothing to do: the stream ended on purpose.
    Done,
    /// Reconnect and resume from the last processed cursor.
    Resume,
    /// The session is gone: initialise a new one.
    Reinitialise,
    /// A bug or a policy on the client's side: retrying will not help.
    Fatal,
}

/// Maps a close code to the client's next step (docs/protocol.md 5.5).
pub fn advice(code: u16) -> CloseAdvice {
    match code {
        NORMAL => CloseAdvice::Done,
        SESSION_ENDED => CloseAdvice::Reinitialise,
        UNSUPPORTED_DATA | POLICY | TOO_BIG | MALFORMED => CloseAdvice::Fatal,
        _ => CloseAdvice::Resume,
    }
}
