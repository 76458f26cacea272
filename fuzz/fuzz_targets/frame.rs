//! Any bytes as a WebSocket text frame: parsing never panics, and whatever
//! parses as a client frame re-encodes to something that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::{ClientFrame, ServerFrame};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(frame) = ClientFrame::parse(text) {
        let again = ClientFrame::parse(&frame.encode()).expect("an encoded frame parses");
        match (frame, again) {
            (ClientFrame::CursorAck { cursor: a }, ClientFrame::CursorAck { cursor: b }) => assert_eq!(a, b),
            (ClientFrame::Message { message: a }, ClientFrame::Message { message: b }) => assert_eq!(a.get(), b.get()),
            _ => panic!("the frame type changed on re-encoding"),
        }
    }
    let _ = ServerFrame::parse(text);
});
