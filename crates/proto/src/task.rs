//! The cursors of a task's event stream (docs/protocol.md 3.9): a client
//! names an event by the draft's `seq`, counted from 0, where the log counts
//! from 1, so every number a client sends (`after`, `Last-Event-ID`,
//! `cursor-ack`) meets a `+ 1` here, checked, once: a number past the head
//! is refused (`after-ahead`, 4409), never a wrap to the stream's start or
//! an overflow panic.

use crate::Seq;

/// The log seq of the event a client names by its wire `seq`: one more, or
/// `None` for `u64::MAX`, which no event can have (it is past any head).
pub fn log_seq(wire: u64) -> Option<Seq> {
    wire.checked_add(1)
}

/// The wire `seq` of log seq `log`: one less, or `None` for 0 (before the
/// first event: no `seq` names it).
pub fn wire_seq(log: Seq) -> Option<u64> {
    log.checked_sub(1)
}

/// Parses the cursor of `GET P/tasks/{taskId}/events` (`Last-Event-ID` or
/// `?last_event_id=`): a wire `seq`, a non-negative decimal integer that
/// fits in 64 bits, with the whitespace around it ignored, as `u64`'s
/// `FromStr` reads it (a leading `+` and leading zeros are taken). `None`
/// for anything else (the server's `400 invalid-cursor`).
pub fn parse_wire_cursor(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

/// An `after` past the task's latest event: `-32602` with
/// `{"reason": "after-ahead", "latestSeq"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("after {after} is past the task's latest event ({latest:?})")]
pub struct AfterAhead {
    /// The `after` the client sent.
    pub after: u64,
    /// The latest event's wire `seq`; `None` when the stream has none yet.
    pub latest: Option<u64>,
}

/// Where a reader of a task's events starts, as a log cursor (the last log
/// seq it has), from its `after` (a wire `seq`, exclusive) and the stream's
/// `head` and `floor` (log seqs, `floor <= head + 1`): without `after`, just
/// before the earliest event retained (`floor - 1`); with one, `after + 1`,
/// refused with [`AfterAhead`] when that passes the head (`u64::MAX` included).
/// A cursor below the floor is not judged here: the log's admission says
/// `events_gone`.
pub fn start_cursor(after: Option<u64>, head: Seq, floor: Seq) -> Result<Seq, AfterAhead> {
    match after {
        None => Ok(floor.saturating_sub(1)),
        Some(after) => match log_seq(after) {
            Some(cursor) if cursor <= head => Ok(cursor),
            _ => Err(AfterAhead {
                after,
                latest: wire_seq(head),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_past_the_head_is_ahead_never_a_wrap() {
        // head 5 (wire 0..=4), floor 1.
        assert_eq!(start_cursor(None, 5, 1), Ok(0));
        assert_eq!(start_cursor(Some(0), 5, 1), Ok(1));
        assert_eq!(start_cursor(Some(4), 5, 1), Ok(5));
        for after in [5, 6, u64::MAX - 1, u64::MAX] {
            assert_eq!(
                start_cursor(Some(after), 5, 1),
                Err(AfterAhead {
                    after,
                    latest: Some(4)
                }),
                "{after}"
            );
        }
        // An empty stream: every after is ahead, and there is no latest.
        assert_eq!(
            start_cursor(Some(0), 0, 1),
            Err(AfterAhead {
                after: 0,
                latest: None
            })
        );
        assert_eq!(start_cursor(None, 0, 1), Ok(0));
        // Even at the log's last seq, u64::MAX is not wrapped to 0.
        assert_eq!(start_cursor(Some(u64::MAX - 1), u64::MAX, 1), Ok(u64::MAX));
        assert!(start_cursor(Some(u64::MAX), u64::MAX, 1).is_err());
        assert_eq!(log_seq(u64::MAX), None);
        assert_eq!(wire_seq(0), None);
    }

    #[test]
    fn a_wire_cursor_is_a_u64_with_whitespace_around_it() {
        assert_eq!(parse_wire_cursor("0"), Some(0));
        assert_eq!(parse_wire_cursor(" 17\t"), Some(17));
        assert_eq!(parse_wire_cursor("18446744073709551615"), Some(u64::MAX));
        for bad in ["", " ", "-1", "1.0", "18446744073709551616", "1 2", "?"] {
            assert_eq!(parse_wire_cursor(bad), None, "{bad:?}");
        }
    }
}
