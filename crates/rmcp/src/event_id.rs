//! Where an event lives: the log session, the stream and the seq, spelled
//! into the SSE event id so that a replay is a range read of one stream.

use mcp_resume_log::{Seq, StreamKey};

use crate::StoreError;

/// Prefix of the log sessions that hold rmcp's request streams.
///
/// rmcp names a request stream with a fresh UUID and does not say which MCP
/// session it belongs to, so each request stream is a log session of its own,
/// `rmcp-req-UUID`, whose session stream holds the events.
pub const REQUEST_STREAM_PREFIX: &str = "rmcp-req-";

/// Suffix rmcp gives the standalone (GET) stream of session `S`: `S:common`.
const COMMON_SUFFIX: &str = ":common";

/// One stream of the log, named from an rmcp stream id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The log session that holds the stream.
    pub session: String,
    /// Which stream of that log session.
    pub stream: StreamKey,
}

impl Location {
    /// Maps rmcp's stream id to a log stream: `S:common` is the session stream
    /// of log session `S` (the MCP session); anything else is a request stream.
    pub fn from_stream_id(stream_id: &str) -> Result<Self, StoreError> {
        if stream_id.is_empty() || stream_id.contains('/') {
            return Err(StoreError::BadStreamId(stream_id.to_owned()));
        }
        match stream_id.strip_suffix(COMMON_SUFFIX) {
            Some(session) if !session.is_empty() => Ok(Location {
                session: session.to_owned(),
                stream: StreamKey::Session,
            }),
            _ => Ok(Location {
                session: format!("{REQUEST_STREAM_PREFIX}{stream_id}"),
                stream: StreamKey::Session,
            }),
        }
    }

    /// Whether this is an MCP session's standalone stream (not a request stream).
    pub fn is_standalone(&self) -> bool {
        !self.session.starts_with(REQUEST_STREAM_PREFIX)
    }

    /// The SSE event id of event `seq` of this stream: `SESSION/STREAM/SEQ`.
    ///
    /// Written with `itoa`, not `format!`: a reader spells one for every
    /// event it sends, and `fmt`'s machinery cost about 1,300 instructions
    /// an event there (callgrind, 20,000 `emit` notifications on our stores).
    pub fn event_id(&self, seq: Seq) -> String {
        let mut digits = itoa::Buffer::new();
        // Two `/` and two numbers of at most 20 digits each.
        let mut id = String::with_capacity(self.session.len() + 42);
        id.push_str(&self.session);
        id.push('/');
        id.push_str(digits.format(self.stream.number()));
        id.push('/');
        id.push_str(digits.format(seq));
        id
    }
}

/// Parses an id made by [`Location::event_id`] back into stream and seq.
pub fn parse_event_id(id: &str) -> Result<(Location, Seq), StoreError> {
    let bad = || StoreError::BadEventId(id.to_owned());
    let mut parts = id.rsplitn(3, '/');
    let seq = parts.next().ok_or_else(bad)?;
    let stream = parts.next().ok_or_else(bad)?;
    let session = parts.next().ok_or_else(bad)?;
    if session.is_empty() {
        return Err(bad());
    }
    let seq: Seq = seq.parse().map_err(|_| bad())?;
    let stream: u64 = stream.parse().map_err(|_| bad())?;
    Ok((
        Location {
            session: session.to_owned(),
            stream: StreamKey::from_number(stream),
        },
        seq,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let l = Location::from_stream_id("abc:common").unwrap();
        assert!(l.is_standalone());
        assert_eq!(l.event_id(7), "abc/0/7");
        assert_eq!(parse_event_id("abc/0/7").unwrap(), (l, 7));
        let r = Location::from_stream_id("0b1e").unwrap();
        assert!(!r.is_standalone());
        assert_eq!(parse_event_id(&r.event_id(3)).unwrap(), (r, 3));
        let far = Location {
            session: "s".into(),
            stream: StreamKey::from_number(12),
        };
        assert_eq!(far.event_id(u64::MAX), format!("s/12/{}", u64::MAX));
    }

    #[test]
    fn garbage_is_an_error() {
        for id in ["", "7", "a/7", "/0/7", "a/x/7", "a/0/-1", "a/0/"] {
            assert!(parse_event_id(id).is_err(), "{id}");
        }
        assert!(Location::from_stream_id("a/b").is_err());
    }
}
