//! WebSocket frames of docs/protocol.md 5.3: one JSON object per text frame.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::Seq;

/// A frame the server sends.
#[derive(Debug, Clone)]
pub enum ServerFrame {
    /// One log event.
    Event {
        /// Its seq in the session stream.
        seq: Seq,
        /// The JSON-RPC message, verbatim from the log.
        message: Box<RawValue>,
    },
    /// The committed cursor `C` of the upgrade, first of all frames, for a
    /// client that offered [`crate::CURSOR_FRAME_SUBPROTOCOL`].
    Cursor {
        /// The same value as `X-MCP-Resume-Cursor`.
        cursor: Seq,
    },
    /// Sent in silence; `head` lets the client detect a loss at the tail.
    Heartbeat {
        /// The committed head, all of which was already sent on this socket.
        head: Seq,
    },
}

/// A frame the client sends.
#[derive(Debug, Clone)]
pub enum ClientFrame {
    /// Opens the gate: the client has the replay up to `cursor`.
    CursorAck {
        /// Must equal the echoed `X-MCP-Resume-Cursor`.
        cursor: Seq,
    },
    /// A client-to-server JSON-RPC message.
    Message {
        /// Request, notification or response.
        message: Box<RawValue>,
    },
}

/// Why a client frame was refused; each maps to a close code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not JSON, not an object, a missing field or an unknown `type` (4400).
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// The flat shape every frame parses into first: serde's internally tagged
/// enums buffer their content and cannot keep a `RawValue`, so the tag is
/// matched by hand.
#[derive(Deserialize)]
struct Flat {
    #[serde(rename = "type")]
    kind: String,
    seq: Option<Seq>,
    head: Option<Seq>,
    cursor: Option<Seq>,
    message: Option<Box<RawValue>>,
}

fn flat(text: &str) -> Result<Flat, FrameError> {
    // serde reads a struct from an array too, by position
    // (`["cursor-ack",1,2,3]` would be an ack of 3): a frame is an object.
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return Err(FrameError::Malformed("a frame is a JSON object".into()));
    }
    serde_json::from_str(text).map_err(|e| FrameError::Malformed(e.to_string()))
}

fn missing(kind: &str, field: &str) -> FrameError {
    FrameError::Malformed(format!("a {kind:?} frame needs {field:?}"))
}

fn object_message(kind: &str, m: Option<Box<RawValue>>) -> Result<Box<RawValue>, FrameError> {
    let m = m.ok_or_else(|| missing(kind, "message"))?;
    if !m.get().starts_with('{') {
        return Err(FrameError::Malformed(
            "\"message\" must be a JSON object".into(),
        ));
    }
    Ok(m)
}

impl ClientFrame {
    /// Parses one text frame.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        let f = flat(text)?;
        match f.kind.as_str() {
            "cursor-ack" => Ok(Self::CursorAck {
                cursor: f.cursor.ok_or_else(|| missing("cursor-ack", "cursor"))?,
            }),
            "message" => Ok(Self::Message {
                message: object_message("message", f.message)?,
            }),
            other => Err(FrameError::Malformed(format!(
                "unknown frame type {other:?}"
            ))),
        }
    }

    /// Encodes the frame as the text the server expects.
    pub fn encode(&self) -> String {
        match self {
            Self::CursorAck { cursor } => format!(r#"{{"type":"cursor-ack","cursor":{cursor}}}"#),
            Self::Message { message } => {
                format!(r#"{{"type":"message","message":{}}}"#, message.get())
            }
        }
    }
}

impl ServerFrame {
    /// Parses one text frame from the server.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        let f = flat(text)?;
        match f.kind.as_str() {
            "event" => Ok(Self::Event {
                seq: f.seq.ok_or_else(|| missing("event", "seq"))?,
                message: object_message("event", f.message)?,
            }),
            "heartbeat" => Ok(Self::Heartbeat {
                head: f.head.ok_or_else(|| missing("heartbeat", "head"))?,
            }),
            "cursor" => Ok(Self::Cursor {
                cursor: f.cursor.ok_or_else(|| missing("cursor", "cursor"))?,
            }),
            other => Err(FrameError::Malformed(format!(
                "unknown frame type {other:?}"
            ))),
        }
    }
}

/// Encodes an event frame around a message that is already JSON.
///
/// The hot path of every WebSocket reader: the log stores the message bytes,
/// so they are spliced in rather than parsed and re-serialised.
pub fn encode_event(seq: Seq, message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 40);
    out.push_str(r#"{"type":"event","seq":"#);
    out.push_str(&seq.to_string());
    out.push_str(r#","message":"#);
    out.push_str(message);
    out.push('}');
    out
}

/// Encodes a heartbeat frame.
pub fn encode_heartbeat(head: Seq) -> String {
    format!(r#"{{"type":"heartbeat","head":{head}}}"#)
}

/// The cursor frame (see [`ServerFrame::Cursor`]).
pub fn encode_cursor(cursor: Seq) -> String {
    format!(r#"{{"type":"cursor","cursor":{cursor}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzz/fuzz_targets/frame.rs: serde reads a struct from a JSON
    /// array, so `["cursor-ack",5,6,444]` parsed as an ack of 444.
    #[test]
    fn a_json_array_is_not_a_frame() {
        for text in [
            "[\t\"cursor-ack\",5,6,444,44]",
            r#"["cursor-ack",null,null,7]"#,
            r#"["message",null,null,null,{}]"#,
        ] {
            assert!(ClientFrame::parse(text).is_err(), "{text}");
        }
        for text in [r#"["event",1,null,null,{}]"#, r#"["heartbeat",null,3]"#] {
            assert!(ServerFrame::parse(text).is_err(), "{text}");
        }
        assert!(matches!(
            ClientFrame::parse(" \n{\"type\":\"cursor-ack\",\"cursor\":4}"),
            Ok(ClientFrame::CursorAck { cursor: 4 })
        ));
    }

    #[test]
    fn event_frames_round_trip() {
        let text = encode_event(7, r#"{"jsonrpc":"2.0","method":"x"}"#);
        match ServerFrame::parse(&text).unwrap() {
            ServerFrame::Event { seq, message } => {
                assert_eq!(seq, 7);
                assert_eq!(message.get(), r#"{"jsonrpc":"2.0","method":"x"}"#);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ServerFrame::parse(&encode_heartbeat(3)).unwrap(),
            ServerFrame::Heartbeat { head: 3 }
        ));
    }

    #[test]
    fn client_frames() {
        assert!(matches!(
            ClientFrame::parse(r#"{"type":"cursor-ack","cursor":12}"#),
            Ok(ClientFrame::CursorAck { cursor: 12 })
        ));
        assert!(matches!(
            ClientFrame::parse(
                r#"{"type":"message","message":{"jsonrpc":"2.0","id":1,"method":"ping"}}"#
            ),
            Ok(ClientFrame::Message { .. })
        ));
        for bad in [
            "",
            "[]",
            "3",
            "{}",
            r#"{"type":"nope"}"#,
            r#"{"type":"cursor-ack"}"#,
            r#"{"type":"cursor-ack","cursor":-1}"#,
            r#"{"type":"cursor-ack","cursor":"3"}"#,
        ] {
            assert!(ClientFrame::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
