//! Any bytes as a `Last-Event-ID`: parsing never panics, accepts only the
//! grammar of docs/protocol.md 2, and what it accepts prints back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::EventId;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(id) = text.parse::<EventId>() {
        assert_eq!(id.to_string(), text, "one spelling per id");
        assert!(text.bytes().all(|b| b.is_ascii_digit() || b == b'/'));
    }
    let _ = mcp_resume_proto::cursor::parse_session_cursor(text);
});
