//! Event ids and cursors (docs/protocol.md 2): parsed and validated once, here.

use std::fmt;
use std::str::FromStr;

/// A position in one stream: 1, 2, 3 ...; a cursor of 0 means "nothing seen".
pub type Seq = u64;

/// An SSE event id as it appears on the wire.
///
/// The session stream is numbered by a bare seq; request stream `R` by `R/n`.
/// Keeping both in one type means a `Last-Event-ID` is classified exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventId {
    /// Position in the session stream.
    Session(Seq),
    /// Position `n` in request stream `stream`.
    Request {
        /// The request stream number `R` (1, 2, 3 ...).
        stream: u64,
        /// The seq inside that stream.
        seq: Seq,
    },
}

/// Why a cursor string was refused; every variant maps to `400 invalid-cursor`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseCursorError {
    /// Empty string.
    #[error("the cursor is empty")]
    Empty,
    /// Something other than ASCII digits (a sign, a space, a letter).
    #[error("the cursor {0:?} is not a decimal number")]
    NotDecimal(String),
    /// `07`: ambiguous spellings would let two ids name one event.
    #[error("the cursor {0:?} has a leading zero")]
    LeadingZero(String),
    /// Does not fit in 64 bits.
    #[error("the cursor {0:?} overflows u64")]
    Overflow(String),
    /// `R/n` with `R = 0`: request streams are numbered from 1.
    #[error("request stream numbers start at 1, got {0:?}")]
    ZeroStream(String),
}

fn parse_decimal(s: &str, whole: &str) -> Result<u64, ParseCursorError> {
    if s.is_empty() {
        return Err(ParseCursorError::Empty);
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseCursorError::NotDecimal(whole.to_owned()));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(ParseCursorError::LeadingZero(whole.to_owned()));
    }
    s.parse::<u64>()
        .map_err(|_| ParseCursorError::Overflow(whole.to_owned()))
}

impl FromStr for EventId {
    type Err = ParseCursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            None => parse_decimal(s, s).map(EventId::Session),
            Some((r, n)) => {
                let stream = parse_decimal(r, s)?;
                if stream == 0 {
                    return Err(ParseCursorError::ZeroStream(s.to_owned()));
                }
                let seq = parse_decimal(n, s)?;
                Ok(EventId::Request { stream, seq })
            }
        }
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventId::Session(seq) => write!(f, "{seq}"),
            EventId::Request { stream, seq } => write!(f, "{stream}/{seq}"),
        }
    }
}

/// Parses a session-stream cursor; `R/n` is refused, as WebSocket upgrades need.
pub fn parse_session_cursor(s: &str) -> Result<Seq, ParseCursorError> {
    parse_decimal(s, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!("0".parse(), Ok(EventId::Session(0)));
        assert_eq!("47".parse(), Ok(EventId::Session(47)));
        assert_eq!("7/3".parse(), Ok(EventId::Request { stream: 7, seq: 3 }));
        assert_eq!(
            "18446744073709551615".parse(),
            Ok(EventId::Session(u64::MAX))
        );
    }

    #[test]
    fn refuses_what_the_grammar_does_not_allow() {
        for bad in [
            "",
            "-1",
            "+1",
            " 1",
            "1 ",
            "01",
            "1.0",
            "abc",
            "1/",
            "/1",
            "0/1",
            "1/2/3",
            "18446744073709551616",
            "1/01",
            "٣",
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn display_round_trips() {
        for id in [EventId::Session(0), EventId::Request { stream: 3, seq: 9 }] {
            assert_eq!(id.to_string().parse(), Ok(id));
        }
    }
}
