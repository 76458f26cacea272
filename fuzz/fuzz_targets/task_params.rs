//! The numbers a client sends a task's event stream and where they meet
//! `+ 1` (crates/proto/src/task.rs, the gate and the reader's gap check):
//! the `Last-Event-ID` of `GET P/tasks/{taskId}/events`, the `after` of
//! `tasks/stream`, the `cursor-ack` of its WebSocket, and the seqs after them.
//!
//! - a cursor's text parses to a `u64` or is refused, never a panic, and a
//!   number parses back from its own spelling;
//! - an `after` at or past the latest event (up to `u64::MAX`) is
//!   `after-ahead`, never a wrap to the stream's start; any other starts the
//!   reader just after it, which the log's admission never calls ahead;
//! - the WebSocket's gate, fed any acks and any offered seqs, matches a
//!   model in wide arithmetic: it sends only the next seq, nothing above
//!   `C` before the one right ack, and refuses an ack of `u64::MAX`;
//! - the reader's gap check, fed any seqs, accepts exactly the next one
//!   (none after `u64::MAX`) and none above `C` before its ack is due.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use mcp_resume_proto::task::{log_seq, parse_wire_cursor, start_cursor, wire_seq, AfterAhead};
use mcp_resume_proto::{
    decide_start, CursorDiscontinuity, Gate, GateError, GateVerdict, SeqChecker,
};

/// A number, often near another: the edges are where the arithmetic breaks.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Num {
    Any(u64),
    Near(i8),
    FromTop(u8),
}

impl Num {
    fn at(self, base: u64) -> u64 {
        match self {
            Num::Any(n) => n,
            Num::Near(d) => base.wrapping_add(d as i64 as u64),
            Num::FromTop(k) => u64::MAX - k as u64,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// The log offers a seq (near the next one) to the gate and the reader.
    Offer(Num),
    /// The client acks a wire seq (near the latest).
    Ack(Num),
    /// The client's reader is told the ack went out.
    Acked,
    Heartbeat(Num),
}

#[derive(Arbitrary, Debug)]
struct Input {
    text: String,
    number: Num,
    head: Num,
    /// How far below `head + 1` the floor is.
    trimmed: Num,
    after: Option<Num>,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    // The text of a cursor.
    if let Some(n) = parse_wire_cursor(&input.text) {
        let t = input.text.trim();
        let digits = t.strip_prefix('+').unwrap_or(t);
        assert!(
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
            "{t:?}"
        );
        assert_eq!(
            digits.trim_start_matches('0').parse::<u128>().unwrap_or(0),
            n as u128
        );
    }
    let n = input.number.at(0);
    assert_eq!(parse_wire_cursor(&n.to_string()), Some(n));
    assert_eq!(
        wire_seq(log_seq(n).unwrap_or(0)),
        n.checked_add(1).and(Some(n))
    );

    // The bounds of a task stream: head >= 0, 1 <= floor <= head + 1.
    let head = input.head.at(0);
    // (A floor of head + 1 when head is u64::MAX does not fit: u64::MAX.)
    let floor = (head as u128 + 1 - (input.trimmed.at(0) as u128 % (head as u128 + 1)))
        .min(u64::MAX as u128) as u64;
    assert!(floor >= 1 && floor as u128 <= head as u128 + 1);
    let after = input.after.map(|a| a.at(head.wrapping_sub(1)));
    let cursor = match (after, start_cursor(after, head, floor)) {
        (None, Ok(c)) => {
            assert_eq!(c, floor - 1);
            c
        }
        (None, Err(e)) => panic!("no after, refused: {e:?}"),
        (Some(a), Ok(c)) => {
            assert!(
                (a as u128) < head as u128,
                "after {a} at or past head {head} accepted"
            );
            assert_eq!(c as u128, a as u128 + 1, "after {a} started at {c}");
            c
        }
        (Some(a), Err(AfterAhead { after, latest })) => {
            assert_eq!(after, a);
            assert!(
                a as u128 + 1 > head as u128,
                "after {a} below head {head} refused"
            );
            assert_eq!(latest, wire_seq(head));
            return;
        }
    };
    assert!(cursor <= head);
    match decide_start(cursor, Some(head), Some(floor)) {
        Ok(c) => assert!(c == cursor && cursor as u128 + 1 >= floor as u128),
        Err(CursorDiscontinuity::Truncated { .. }) => assert!((cursor as u128) + 1 < floor as u128),
        Err(other) => panic!("a started cursor is {other:?}"),
    }

    // The WebSocket: the gate and the reader, against a model in u128.
    let mut gate = Gate::new(cursor, head);
    let mut reader = SeqChecker::new(cursor);
    reader.expect_replay_until(head);
    let (mut sent, mut acked) = (cursor as u128, false);
    let (mut read, mut reader_acked) = (cursor as u128, false);
    for op in input.ops {
        match op {
            Op::Offer(s) => {
                let s = s.at(gate.last_sent().wrapping_add(1));
                let verdict = gate.offer(s);
                if s as u128 != sent + 1 {
                    assert!(
                        matches!(verdict, Err(GateError::OutOfOrder { .. })),
                        "{s} after {sent}: {verdict:?}"
                    );
                } else if s > head && !acked {
                    assert_eq!(verdict, Ok(GateVerdict::Hold));
                } else {
                    assert_eq!(verdict, Ok(GateVerdict::Send));
                    sent = s as u128;
                }
                assert_eq!(gate.last_sent() as u128, sent);
                assert!(
                    acked || sent <= head as u128,
                    "sent {sent} above C {head} before the ack"
                );

                let r = reader.on_event(s);
                if s as u128 == read + 1 && (reader_acked || s <= head) {
                    assert_eq!(r, Ok(()));
                    read = s as u128;
                } else {
                    assert!(r.is_err(), "the reader took {s} after {read}");
                }
                assert_eq!(reader.cursor() as u128, read);
            }
            Op::Ack(w) => {
                let w = w.at(head.wrapping_sub(1));
                // As the task socket does: a wire seq no event has is 4409.
                let Some(at) = log_seq(w) else {
                    assert_eq!(w, u64::MAX);
                    return;
                };
                assert_eq!(at as u128, w as u128 + 1);
                let r = gate.ack(at);
                if acked {
                    assert_eq!(r, Err(GateError::SecondAck));
                    return;
                } else if at != head {
                    assert!(matches!(r, Err(GateError::WrongAck { .. })));
                    return;
                }
                assert_eq!(r, Ok(()));
                acked = true;
            }
            Op::Acked => {
                if reader.ack_due().is_some() {
                    assert_eq!(read, head as u128);
                    reader.acked();
                    reader_acked = true;
                }
            }
            Op::Heartbeat(h) => {
                let h = h.at(head);
                assert_eq!(gate.heartbeat_allowed(h), acked && sent >= h as u128);
                assert_eq!(reader.on_heartbeat(h).is_ok(), h as u128 <= read);
            }
        }
        assert_eq!(
            reader.ack_due().is_some(),
            !reader_acked && read == head as u128
        );
        assert_eq!(gate.is_open(), acked);
    }
});
