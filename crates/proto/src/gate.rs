//! The server's gate (docs/protocol.md 5.4): no event above the committed cursor
//! `C` leaves before the client has acknowledged `C`.
//!
//! The socket task feeds it what happens (an event is ready, an ack arrived,
//! the timer fired) and does what it answers; the rules live here, free of I/O.

use crate::Seq;

/// What to do with the next event the log offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateVerdict {
    /// Send it now.
    Send,
    /// Keep it (and everything after it) until the ack.
    Hold,
}

/// Why the gate closes the connection; each maps to a close code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    /// The ack named a cursor other than `C` (4409).
    #[error("cursor-ack {got} does not match the committed cursor {expected}")]
    WrongAck {
        /// The echoed `C`.
        expected: Seq,
        /// What the client acked.
        got: Seq,
    },
    /// A second ack (4409).
    #[error("cursor-ack received twice")]
    SecondAck,
    /// No ack before the upgrade timeout (4408).
    #[error("no cursor-ack within the upgrade timeout")]
    AckTimeout,
    /// The log offered an event out of order: an internal fault, never skipped (4409).
    #[error("log offered seq {got}, expected {expected}")]
    OutOfOrder {
        /// `last_sent + 1`.
        expected: Seq,
        /// What was offered.
        got: Seq,
    },
}

/// The per-connection gate.
#[derive(Debug, Clone)]
pub struct Gate {
    committed: Seq,
    last_sent: Seq,
    acked: bool,
}

impl Gate {
    /// A gate for a reader at `prior` that was told `committed` in the 101.
    pub fn new(prior: Seq, committed: Seq) -> Self {
        debug_assert!(prior <= committed);
        Self {
            committed,
            last_sent: prior,
            acked: false,
        }
    }

    /// The cursor echoed in the 101.
    pub fn committed(&self) -> Seq {
        self.committed
    }

    /// The last seq sent on this connection.
    pub fn last_sent(&self) -> Seq {
        self.last_sent
    }

    /// Whether the client has acked.
    pub fn is_open(&self) -> bool {
        self.acked
    }

    /// Whether the replay `prior+1 ..= C` has been sent in full.
    pub fn replay_done(&self) -> bool {
        self.last_sent >= self.committed
    }

    /// Asks whether event `seq` may go out now. `Send` records it as sent.
    pub fn offer(&mut self, seq: Seq) -> Result<GateVerdict, GateError> {
        // Past u64::MAX nothing follows: refused, never a wrap.
        let Some(expected) = self.last_sent.checked_add(1) else {
            return Err(GateError::OutOfOrder {
                expected: self.last_sent,
                got: seq,
            });
        };
        if seq != expected {
            return Err(GateError::OutOfOrder { expected, got: seq });
        }
        if seq > self.committed && !self.acked {
            return Ok(GateVerdict::Hold);
        }
        self.last_sent = seq;
        Ok(GateVerdict::Send)
    }

    /// Takes a `cursor-ack`.
    pub fn ack(&mut self, cursor: Seq) -> Result<(), GateError> {
        if self.acked {
            return Err(GateError::SecondAck);
        }
        if cursor != self.committed {
            return Err(GateError::WrongAck {
                expected: self.committed,
                got: cursor,
            });
        }
        self.acked = true;
        Ok(())
    }

    /// The upgrade timer fired.
    pub fn on_timeout(&self) -> Result<(), GateError> {
        if self.acked {
            Ok(())
        } else {
            Err(GateError::AckTimeout)
        }
    }

    /// Whether a heartbeat announcing `head` is honest now: only after the
    /// ack, and only once everything up to `head` was sent here.
    pub fn heartbeat_allowed(&self, head: Seq) -> bool {
        self.acked && self.last_sent >= head
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_follows_u64_max_and_the_gate_never_wraps() {
        let mut g = Gate::new(u64::MAX, u64::MAX);
        for seq in [0, 1, u64::MAX] {
            assert!(
                matches!(g.offer(seq), Err(GateError::OutOfOrder { .. })),
                "{seq}"
            );
        }
        assert_eq!(g.last_sent(), u64::MAX);
        assert!(g.ack(u64::MAX).is_ok());
    }
}
