//! Any bytes as a WebSocket text frame (crates/proto/src/frame.rs): parsing
//! never panics; a client frame that parses says what a plain JSON reading
//! of the text says (its `cursor` a `u64`, its `message` an object) and
//! re-encodes to something that parses the same; a server frame that parses
//! re-encodes, with the server's encoders, to the same frame.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::frame::{encode_cursor, encode_event, encode_heartbeat};
use mcp_resume_proto::{ClientFrame, ServerFrame};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(frame) = ClientFrame::parse(text) {
        // serde_json's `Value` refuses some texts the frame reader need not
        // judge: a number no f64 holds (`1E400`) inside a message, which
        // keeps its bytes as they came (a `RawValue`); a lone surrogate
        // escape in a field the reader skips. Those are read no further.
        let Ok(json) = serde_json::from_str::<Value>(text) else {
            return;
        };
        match &frame {
            ClientFrame::CursorAck { cursor } => {
                assert_eq!(json["type"], "cursor-ack");
                assert_eq!(json["cursor"].as_u64(), Some(*cursor));
            }
            ClientFrame::Message { message } => {
                assert_eq!(json["type"], "message");
                assert!(json["message"].is_object());
                assert_eq!(
                    serde_json::from_str::<Value>(message.get()).ok().as_ref(),
                    Some(&json["message"])
                );
            }
        }
        let again = ClientFrame::parse(&frame.encode()).expect("an encoded frame parses");
        match (frame, again) {
            (ClientFrame::CursorAck { cursor: a }, ClientFrame::CursorAck { cursor: b }) => {
                assert_eq!(a, b)
            }
            (ClientFrame::Message { message: a }, ClientFrame::Message { message: b }) => {
                assert_eq!(a.get(), b.get())
            }
            _ => panic!("the frame type changed on re-encoding"),
        }
    }
    if let Ok(frame) = ServerFrame::parse(text) {
        let again = match &frame {
            ServerFrame::Event { seq, message } => encode_event(*seq, message.get()),
            ServerFrame::Heartbeat { head } => encode_heartbeat(*head),
            ServerFrame::Cursor { cursor } => encode_cursor(*cursor),
        };
        match (
            frame,
            ServerFrame::parse(&again).expect("an encoded frame parses"),
        ) {
            (
                ServerFrame::Event { seq: a, message: m },
                ServerFrame::Event { seq: b, message: n },
            ) => {
                assert_eq!(a, b);
                assert_eq!(m.get(), n.get());
            }
            (ServerFrame::Heartbeat { head: a }, ServerFrame::Heartbeat { head: b }) => {
                assert_eq!(a, b)
            }
            (ServerFrame::Cursor { cursor: a }, ServerFrame::Cursor { cursor: b }) => {
                assert_eq!(a, b)
            }
            _ => panic!("the frame type changed on re-encoding"),
        }
    }
});
