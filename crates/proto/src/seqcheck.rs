//! The reader's gap check (docs/protocol.md 5.6): every event must be `last + 1`.

use crate::{CursorDiscontinuity, Seq};

/// Tracks one reader's cursor and refuses anything that is not contiguous.
///
/// Used for SSE and WebSocket alike; after an upgrade it also knows the
/// committed cursor `C`, so it can say when the replay is complete and the
/// ack may be sent.
#[derive(Debug, Clone)]
pub struct SeqChecker {
    last: Seq,
    replay_until: Option<Seq>,
}

impl SeqChecker {
    /// A reader that has processed everything up to `cursor`.
    pub fn new(cursor: Seq) -> Self {
        Self {
            last: cursor,
            replay_until: None,
        }
    }

    /// The reader's cursor: the last seq it accepted.
    pub fn cursor(&self) -> Seq {
        self.last
    }

    /// After a `101` echoing `committed`: expect exactly `last+1 ..= committed` before acking.
    pub fn expect_replay_until(&mut self, committed: Seq) {
        self.replay_until = Some(committed);
    }

    /// The cursor to ack, once the replay is complete; `None` while it is not.
    pub fn ack_due(&self) -> Option<Seq> {
        match self.replay_until {
            Some(c) if self.last == c => Some(c),
            _ => None,
        }
    }

    /// Marks the ack as sent; later events are live.
    pub fn acked(&mut self) {
        self.replay_until = None;
    }

    /// Accepts event `seq` or names the discontinuity. A refused event leaves the cursor unchanged.
    pub fn on_event(&mut self, seq: Seq) -> Result<(), CursorDiscontinuity> {
        // A cursor at u64::MAX has no next event: anything offered is a gap
        // (checked, never a wrap to 0 or an overflow panic).
        let Some(expected) = self.last.checked_add(1) else {
            return Err(CursorDiscontinuity::Gap {
                expected: self.last,
                got: seq,
            });
        };
        if seq != expected {
            return Err(CursorDiscontinuity::Gap { expected, got: seq });
        }
        if let Some(c) = self.replay_until {
            if seq > c {
                // The gate was supposed to hold this until our ack.
                return Err(CursorDiscontinuity::Gap {
                    expected: c,
                    got: seq,
                });
            }
        }
        self.last = seq;
        Ok(())
    }

    /// Checks a heartbeat: a head above our cursor means something was lost.
    pub fn on_heartbeat(&self, head: Seq) -> Result<(), CursorDiscontinuity> {
        if head > self.last {
            return Err(CursorDiscontinuity::HeartbeatAhead {
                last: self.last,
                head,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_ok_gap_and_duplicate_refused() {
        let mut c = SeqChecker::new(3);
        c.on_event(4).unwrap();
        assert_eq!(
            c.on_event(6),
            Err(CursorDiscontinuity::Gap {
                expected: 5,
                got: 6
            })
        );
        assert_eq!(
            c.on_event(4),
            Err(CursorDiscontinuity::Gap {
                expected: 5,
                got: 4
            })
        );
        assert_eq!(c.cursor(), 4);
        assert!(c.on_heartbeat(4).is_ok());
        assert!(c.on_heartbeat(5).is_err());
    }

    #[test]
    fn replay_then_ack() {
        let mut c = SeqChecker::new(2);
        c.expect_replay_until(4);
        assert_eq!(c.ack_due(), None);
        c.on_event(3).unwrap();
        c.on_event(4).unwrap();
        assert_eq!(c.ack_due(), Some(4));
        assert!(
            c.on_event(5).is_err(),
            "an event above C before the ack is a gate breach"
        );
        c.acked();
        c.on_event(5).unwrap();
    }

    #[test]
    fn a_cursor_at_u64_max_refuses_every_event_without_wrapping() {
        let mut c = SeqChecker::new(u64::MAX);
        for seq in [0, 1, u64::MAX] {
            assert!(c.on_event(seq).is_err(), "{seq}");
        }
        assert_eq!(c.cursor(), u64::MAX);
    }
}
