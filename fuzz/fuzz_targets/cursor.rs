//! Any bytes as a `Last-Event-ID` (crates/proto/src/cursor.rs): parsing
//! never panics, accepts only the grammar of docs/protocol.md 2, and what
//! it accepts prints back to the same text; a session cursor is exactly a
//! bare seq of that grammar.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::EventId;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let id = text.parse::<EventId>();
    if let Ok(id) = id {
        assert_eq!(id.to_string(), text, "one spelling per id");
        assert!(text.bytes().all(|b| b.is_ascii_digit() || b == b'/'));
    }
    let session = mcp_resume_proto::cursor::parse_session_cursor(text);
    match (id, session) {
        (Ok(EventId::Session(a)), Ok(b)) => assert_eq!(a, b),
        (Ok(EventId::Session(_)), Err(e)) => {
            panic!("{text:?} is a session id but not a cursor: {e}")
        }
        (_, Ok(b)) => panic!("{text:?} is a session cursor {b} but not a session id"),
        _ => {}
    }
});
