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
//! Bounded: a stream keeps entries only while it has a reader, and a
//! stream's only reader drops what it has passed. All streams together keep
//! at most [`BUDGET`] bytes (as [`Entry::cost`] estimates them). A full cache
//! keeps what an only reader needs next (its oldest entries) and takes no
//! new entry for that stream until the reader passes some: a reader that
//! fell behind a burst still finds the events it reads next. Evicting the
//! oldest instead, with a ring of 1,024, left such a reader finding none:
//! 18,908 of 20,000 `emit` notifications were parsed back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mcp_resume_log::Seq;
use rmcp::model::ServerJsonRpcMessage;

/// What all streams together keep, in bytes as [`Entry::cost`] counts them:
/// 16 MiB, about 28,000 small notifications (a reader of a 20,000-event
/// burst fell up to about 16,000 behind its producer on this machine).
pub(crate) const BUDGET: usize = 16 << 20;

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
}

/// One stream's kept messages, in seq order.
#[derive(Default)]
struct Ring {
    readers: usize,
    events: VecDeque<Entry>,
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

impl Kept {
    /// Drops entries `..upto` of `stream`'s ring.
    fn drain(&mut self, stream: &str, upto: usize) {
        if let Some(ring) = self.streams.get_mut(stream) {
            for e in ring.events.drain(..upto) {
                self.bytes -= Entry::cost(&e.record);
            }
        }
    }
}

impl Recent {
    /// Keeps `message` (whose log record is `record`) as event `seq` of
    /// `stream`, if the stream has a reader and the budget has room. The
    /// caller numbers the stream's events and calls this in their order.
    pub(crate) fn keep(
        &self,
        stream: &str,
        seq: Seq,
        record: &Bytes,
        message: &Arc<ServerJsonRpcMessage>,
    ) {
        let mut kept = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ring) = kept.streams.get(stream) else {
            return;
        };
        if ring.events.back().is_some_and(|e| e.seq >= seq) {
            // Numbered again from an earlier seq: what is kept no longer
            // goes in order, so it goes.
            let all = ring.events.len();
            kept.drain(stream, all);
        }
        let cost = Entry::cost(record);
        while kept.bytes + cost > BUDGET {
            let ring = &kept.streams[stream];
            if ring.readers == 1 || ring.events.is_empty() {
                // The only reader reads in order and has not reached the
                // oldest entry yet: that is the one it needs next, so the
                // new one is not kept (nor one that would crowd out other
                // streams'). Room comes back as readers pass what is kept.
                return;
            }
            // Readers at different places: none of them drains the ring,
            // so its oldest entry goes.
            kept.drain(stream, 1);
        }
        kept.bytes += cost;
        if let Some(ring) = kept.streams.get_mut(stream) {
            ring.events.push_back(Entry {
                seq,
                record: record.clone(),
                message: message.clone(),
            });
        }
    }

    /// Counts a reader of `stream` until the returned handle drops.
    pub(crate) fn read(self: &Arc<Self>, stream: &str) -> Reading {
        let mut kept = self.map.lock().unwrap_or_else(|e| e.into_inner());
        kept.streams.entry(stream.to_owned()).or_default().readers += 1;
        Reading {
            recent: self.clone(),
            stream: stream.to_owned(),
        }
    }
}

/// One reader of a stream's kept messages.
pub(crate) struct Reading {
    recent: Arc<Recent>,
    stream: String,
}

impl Reading {
    /// The message of event `seq`, whose log record is `record`, if it is
    /// kept under that seq with exactly those bytes. A stream's only reader
    /// lets go of every entry up to `seq`: it reads in order.
    pub(crate) fn take(&self, seq: Seq, record: &[u8]) -> Option<Arc<ServerJsonRpcMessage>> {
        let mut kept = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        let ring = kept.streams.get(&self.stream)?;
        let at = ring.events.partition_point(|e| e.seq < seq);
        let found = ring
            .events
            .get(at)
            .filter(|e| e.seq == seq && e.record[..] == *record)
            .map(|e| e.message.clone());
        if ring.readers == 1 {
            let upto = ring.events.partition_point(|e| e.seq <= seq);
            kept.drain(&self.stream, upto);
        }
        found
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut kept = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ring) = kept.streams.get_mut(&self.stream) {
            ring.readers -= 1;
            if ring.readers == 0 {
                let all = ring.events.len();
                kept.drain(&self.stream, all);
                kept.streams.remove(&self.stream);
            }
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
        drop(r);
        let kept = recent.map.lock().unwrap();
        assert!(kept.streams.is_empty(), "the last reader lets go");
        assert_eq!(kept.bytes, 0);
    }

    /// How many copies of `rec` the budget holds.
    fn fitting(rec: &[u8]) -> Seq {
        (BUDGET / Entry::cost(rec)) as Seq
    }

    #[test]
    fn a_full_cache_keeps_what_an_only_reader_needs_next() {
        let recent = Arc::new(Recent::default());
        let r = recent.read("s");
        let (rec, m) = message(7);
        let fits = fitting(&rec);
        let last = fits + 10;
        for seq in 1..=last {
            recent.keep("s", seq, &rec, &m);
        }
        assert!(r.take(last, &rec).is_none(), "no room was made for it");
        // The reader passed everything up to `last`: nothing is kept, and
        // the next event is kept again.
        assert_eq!(recent.map.lock().unwrap().bytes, 0);
        recent.keep("s", last + 1, &rec, &m);
        assert!(r.take(last + 1, &rec).is_some());
        let r2 = Arc::new(Recent::default());
        let only = r2.read("s");
        for seq in 1..=last {
            r2.keep("s", seq, &rec, &m);
        }
        for seq in 1..=fits {
            assert!(only.take(seq, &rec).is_some(), "event {seq} was kept");
        }
        assert!(only.take(fits + 1, &rec).is_none());
    }

    #[test]
    fn two_readers_share_and_the_budget_is_kept() {
        let recent = Arc::new(Recent::default());
        let (a, b) = (recent.read("s"), recent.read("s"));
        let (rec, m) = message(7);
        let last = fitting(&rec) + 10;
        for seq in 1..=last {
            recent.keep("s", seq, &rec, &m);
        }
        assert!(recent.map.lock().unwrap().bytes <= BUDGET);
        assert!(a.take(1, &rec).is_none(), "the oldest went");
        assert!(a.take(last, &rec).is_some());
        assert!(
            b.take(last, &rec).is_some(),
            "a reader does not take from the other"
        );
        // Numbered again from an earlier seq: the old entries go.
        recent.keep("s", 3, &rec, &m);
        assert!(a.take(last, &rec).is_none());
        assert!(a.take(3, &rec).is_some());
        drop((a, b));
        assert_eq!(recent.map.lock().unwrap().bytes, 0);
    }
}
