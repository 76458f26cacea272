//! The typed messages of a stream's newest events, kept for its readers, so
//! that a reader of a live stream does not parse back what this process has
//! just serialized.
//!
//! rmcp's SSE writer takes only its typed messages, and a reader reads the
//! log: without this, every event a handler sends is serialized (for the
//! log), parsed back (for rmcp) and serialized again (for the wire). The
//! parse is the largest cost of a busy notification stream (serde buffers
//! rmcp's untagged message enums).
//!
//! It never decides what a reader sees: the reader still reads every event
//! from the log, in order, from its cursor. It only takes the parse's result
//! from here when the entry filed under the event's seq holds exactly the
//! bytes the log returned. An entry is filed under the seq the queue
//! predicted, before the commit, and a prediction can be wrong (a session
//! stream with another writer), so the byte comparison is the check: equal
//! bytes parse to the same message.
//!
//! Only session streams use it: a call's events reach its live reader
//! through the request-stream gate, typed already.
//!
//! Bounded: a stream keeps entries only while it has a reader, and what
//! its slowest reader has passed goes. One stream keeps at most
//! [`STREAM_BUDGET`] bytes, all streams together at most [`BUDGET`] (as
//! [`Entry::cost`] estimates them), so one reader that lags or stalls cannot
//! take the cache from the others. A stream at its share with one reader
//! keeps its oldest entries (what the reader reads next) and takes no new
//! one until the reader passes some: a reader that fell behind a burst
//! still finds the events it reads next. Evicting the oldest instead, with
//! a ring of 1,024, left such a reader finding none: 18,908 of 20,000
//! `emit` notifications were parsed back. A stream with several readers
//! drops its oldest entry to make room (the slowest reader parses it back);
//! a cache that the other streams have filled takes nothing new until their
//! readers pass some.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mcp_resume_log::Seq;
use rmcp::model::ServerJsonRpcMessage;

/// What all streams together keep, in bytes as [`Entry::cost`] counts them:
/// room for eight streams at their share.
pub(crate) const BUDGET: usize = 8 << 20;

/// What one stream keeps at most: 1 MiB, about 1,550 of `emit`'s
/// notifications (125 bytes of JSON, 674 as [`Entry::cost`] counts them):
/// a little more than the 1,024-entry ring this replaced held of them
/// (690 KB), now bounded in bytes (that ring held 1,024 messages whatever
/// their size).
///
/// Not more: under callgrind, where the reader falls far behind, a 16 MiB
/// share left no event of a 20,000-event burst to parse back (47,365 →
/// 40,732 instructions a notification), but at full speed the server's CPU
/// for 100,000 notifications did not move (117 and 122 ticks, medians of 4
/// alternating rounds) while its peak RSS grew by 5 to 20 MB.
pub(crate) const STREAM_BUDGET: usize = 1 << 20;

/// The kept messages of every stream that has a reader in this process, by
/// the stream's log session.
#[derive(Default)]
pub(crate) struct Recent {
    map: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    streams: HashMap<String, Ring>,
    /// The [`Entry::cost`] of every entry of every stream.
    bytes: usize,
    /// The id the next reader gets.
    next_reader: u64,
}

/// One stream's kept messages, in seq order.
#[derive(Default)]
struct Ring {
    /// Each reader's id and the seq it last read (0 before its first).
    readers: Vec<(u64, Seq)>,
    events: VecDeque<Entry>,
    /// The [`Entry::cost`] of `events`.
    bytes: usize,
}

struct Entry {
    seq: Seq,
    record: Bytes,
    message: Arc<ServerJsonRpcMessage>,
}

impl Entry {
    /// An estimate of the memory the entry holds: its record, the typed
    /// message inline, and as much again as its record for what the
    /// message holds on the heap (its strings and `Value`s).
    fn cost(record: &[u8]) -> usize {
        2 * record.len()
            + std::mem::size_of::<Entry>()
            + std::mem::size_of::<ServerJsonRpcMessage>()
    }
}

impl Ring {
    /// Drops entries `..upto`; what they cost.
    fn drain(&mut self, upto: usize) -> usize {
        let freed: usize = self
            .events
            .drain(..upto)
            .map(|e| Entry::cost(&e.record))
            .sum();
        self.bytes -= freed;
        freed
    }

    /// Drops what every reader has passed; what it cost.
    fn drain_passed(&mut self) -> usize {
        let slowest = self.readers.iter().map(|&(_, at)| at).min().unwrap_or(0);
        let upto = self.events.partition_point(|e| e.seq <= slowest);
        self.drain(upto)
    }
}

impl Recent {
    /// Keeps `message` (whose log record is `record`) as event `seq` of
    /// `stream`, if the stream has a reader and its share and the budget
    /// have room. The caller numbers the stream's events and calls this in
    /// their order.
    pub(crate) fn keep(
        &self,
        stream: &str,
        seq: Seq,
        record: &Bytes,
        message: &Arc<ServerJsonRpcMessage>,
    ) {
        let mut kept = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Kept { streams, bytes, .. } = &mut *kept;
        let Some(ring) = streams.get_mut(stream) else {
            return;
        };
        if ring.events.back().is_some_and(|e| e.seq >= seq) {
            // Numbered again from an earlier seq: what is kept no longer
            // goes in order, so it goes.
            *bytes -= ring.drain(ring.events.len());
        }
        let cost = Entry::cost(record);
        if cost > STREAM_BUDGET {
            return;
        }
        while ring.bytes + cost > STREAM_BUDGET {
            if ring.readers.len() == 1 {
                // Its only reader reads in order and has not reached the
                // oldest entry yet: that is the one it needs next, so the
                // new one is not kept. Room comes back as it passes some.
                return;
            }
            // Several readers: the oldest goes (not empty: it holds more
            // than its share less `cost`).
            *bytes -= ring.drain(1);
        }
        if *bytes + cost > BUDGET {
            // The other streams hold the rest; room comes back as their
            // readers pass what is kept.
            return;
        }
        *bytes += cost;
        ring.bytes += cost;
        ring.events.push_back(Entry {
            seq,
            record: record.clone(),
            message: message.clone(),
        });
    }

    /// Counts a reader of `stream` until the returned handle drops.
    pub(crate) fn read(self: &Arc<Self>, stream: &str) -> Reading {
        let mut kept = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let id = kept.next_reader;
        kept.next_reader += 1;
        kept.streams
            .entry(stream.to_owned())
            .or_default()
            .readers
            .push((id, 0));
        Reading {
            recent: self.clone(),
            stream: stream.to_owned(),
            id,
        }
    }
}

/// One reader of a stream's kept messages.
pub(crate) struct Reading {
    recent: Arc<Recent>,
    stream: String,
    id: u64,
}

impl Reading {
    /// The message of event `seq`, whose log record is `record`, if it is
    /// kept under that seq with exactly those bytes. The reader reads in
    /// order: it has passed every entry up to `seq`, and what all of the
    /// stream's readers have passed goes.
    pub(crate) fn take(&self, seq: Seq, record: &[u8]) -> Option<Arc<ServerJsonRpcMessage>> {
        let mut kept = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        let Kept { streams, bytes, .. } = &mut *kept;
        let ring = streams.get_mut(&self.stream)?;
        let at = ring.events.partition_point(|e| e.seq < seq);
        let found = ring
            .events
            .get(at)
            .filter(|e| e.seq == seq && e.record[..] == *record)
            .map(|e| e.message.clone());
        if let Some(me) = ring.readers.iter_mut().find(|(id, _)| *id == self.id) {
            me.1 = seq;
        }
        *bytes -= ring.drain_passed();
        found
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut kept = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        let Kept { streams, bytes, .. } = &mut *kept;
        let Some(ring) = streams.get_mut(&self.stream) else {
            return;
        };
        ring.readers.retain(|&(id, _)| id != self.id);
        if ring.readers.is_empty() {
            *bytes -= ring.drain(ring.events.len());
            streams.remove(&self.stream);
        } else {
            *bytes -= ring.drain_passed();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ServerResult;

    fn message(n: u64) -> (Bytes, Arc<ServerJsonRpcMessage>) {
        let m = ServerJsonRpcMessage::response(
            ServerResult::empty(()),
            rmcp::model::NumberOrString::Number(n as i64),
        );
        (Bytes::from(serde_json::to_vec(&m).unwrap()), Arc::new(m))
    }

    /// How many copies of `rec` one stream's share holds.
    fn fitting(rec: &[u8]) -> Seq {
        (STREAM_BUDGET / Entry::cost(rec)) as Seq
    }

    fn bytes(recent: &Recent) -> usize {
        recent.map.lock().unwrap().bytes
    }

    #[test]
    fn nothing_is_kept_for_a_stream_without_a_reader() {
        let recent = Arc::new(Recent::default());
        let (b, m) = message(1);
        recent.keep("s", 1, &b, &m);
        let r = recent.read("s");
        assert!(r.take(1, &b).is_none());
    }

    #[test]
    fn a_kept_message_is_taken_only_with_its_seq_and_exact_bytes() {
        let recent = Arc::new(Recent::default());
        let r = recent.read("s");
        let (b1, m1) = message(1);
        let (b2, m2) = message(2);
        recent.keep("s", 1, &b1, &m1);
        recent.keep("s", 2, &b2, &m2);
        // The log put another writer's event at 1: its bytes differ.
        assert!(r.take(1, &b2).is_none());
        // The only reader passed 1: it is gone, 2 is there.
        assert!(r.take(1, &b1).is_none());
        assert!(Arc::ptr_eq(&r.take(2, &b2).unwrap(), &m2));
        // Numbered again from an earlier seq: the old entries go.
        recent.keep("s", 5, &b1, &m1);
        recent.keep("s", 3, &b2, &m2);
        assert!(r.take(3, &b2).is_some());
        assert!(r.take(5, &b1).is_none());
        drop(r);
        let kept = recent.map.lock().unwrap();
        assert!(kept.streams.is_empty(), "the last reader lets go");
        assert_eq!(kept.bytes, 0);
    }

    #[test]
    fn a_full_share_keeps_what_an_only_reader_needs_next() {
        let recent = Arc::new(Recent::default());
        let r = recent.read("s");
        let (rec, m) = message(7);
        let fits = fitting(&rec);
        let last = fits + 10;
        for seq in 1..=last {
            recent.keep("s", seq, &rec, &m);
        }
        for seq in 1..=fits {
            assert!(r.take(seq, &rec).is_some(), "event {seq} was kept");
        }
        assert!(r.take(fits + 1, &rec).is_none(), "no room was made for it");
        // The reader passed everything kept: nothing is, and the next
        // event is kept again.
        assert_eq!(bytes(&recent), 0);
        recent.keep("s", last + 1, &rec, &m);
        assert!(r.take(last + 1, &rec).is_some());
    }

    #[test]
    fn one_stalled_reader_leaves_room_for_the_others() {
        let recent = Arc::new(Recent::default());
        let stalled = recent.read("a");
        let other = recent.read("b");
        let (rec, m) = message(7);
        for seq in 1..=fitting(&rec) + 10 {
            recent.keep("a", seq, &rec, &m);
        }
        assert!(bytes(&recent) <= STREAM_BUDGET);
        recent.keep("b", 1, &rec, &m);
        assert!(other.take(1, &rec).is_some(), "b is kept beside a");
        drop(stalled);
        assert_eq!(bytes(&recent), 0, "a's reader went: so did its entries");
    }

    #[test]
    fn two_readers_share_and_what_the_slowest_passed_goes() {
        let recent = Arc::new(Recent::default());
        let (a, b) = (recent.read("s"), recent.read("s"));
        let (rec, m) = message(7);
        let last = fitting(&rec) + 10;
        for seq in 1..=last {
            recent.keep("s", seq, &rec, &m);
        }
        assert!(bytes(&recent) <= STREAM_BUDGET);
        assert!(a.take(1, &rec).is_none(), "the oldest went for room");
        assert!(b.take(last, &rec).is_some());
        assert!(bytes(&recent) > 0, "a has not passed them yet");
        assert!(
            a.take(last, &rec).is_some(),
            "a reader does not take from the other"
        );
        assert_eq!(bytes(&recent), 0, "both passed everything");
        // A reader that goes no longer holds back the others.
        for seq in last + 1..=last + 3 {
            recent.keep("s", seq, &rec, &m);
        }
        assert!(b.take(last + 3, &rec).is_some());
        drop(a);
        assert_eq!(bytes(&recent), 0);
    }
}
