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
//! Bounded: a stream keeps entries only while it has a reader, at most
//! [`KEPT`] of them, and a stream's only reader drops what it has passed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use mcp_resume_log::Seq;
use rmcp::model::ServerJsonRpcMessage;

/// How many of a stream's newest events are kept for its readers: as many
/// as its queue may hold uncommitted, so a reader that keeps up finds them.
pub(crate) const KEPT: usize = crate::queue::MAX_QUEUED as usize;

/// The kept messages of every stream that has a reader in this process, by
/// the stream's log session.
#[derive(Default)]
pub(crate) struct Recent {
    map: Mutex<HashMap<String, Ring>>,
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

impl Recent {
    /// Keeps `message` (whose log record is `record`) as event `seq` of
    /// `stream`, if the stream has a reader. The caller numbers the stream's
    /// events and calls this in their order.
    pub(crate) fn keep(
        &self,
        stream: &str,
        seq: Seq,
        record: &Bytes,
        message: &Arc<ServerJsonRpcMessage>,
    ) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let Some(ring) = map.get_mut(stream) else {
            return;
        };
        if ring.events.back().is_some_and(|e| e.seq >= seq) {
            // Numbered again from an earlier seq: what is kept no longer
            // goes in order, so it goes.
            ring.events.clear();
        }
        if ring.events.len() == KEPT {
            ring.events.pop_front();
        }
        ring.events.push_back(Entry {
            seq,
            record: record.clone(),
            message: message.clone(),
        });
    }

    /// Counts a reader of `stream` until the returned handle drops.
    pub(crate) fn read(self: &Arc<Self>, stream: &str) -> Reading {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(stream.to_owned()).or_default().readers += 1;
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
        let mut map = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        let ring = map.get_mut(&self.stream)?;
        let at = ring.events.partition_point(|e| e.seq < seq);
        let found = ring
            .events
            .get(at)
            .filter(|e| e.seq == seq && e.record[..] == *record)
            .map(|e| e.message.clone());
        if ring.readers == 1 {
            let upto = ring.events.partition_point(|e| e.seq <= seq);
            ring.events.drain(..upto);
        }
        found
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        let mut map = self.recent.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ring) = map.get_mut(&self.stream) {
            ring.readers -= 1;
            if ring.readers == 0 {
                map.remove(&self.stream);
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
        assert!(
            recent.map.lock().unwrap().is_empty(),
            "the last reader lets go"
        );
    }

    #[test]
    fn two_readers_share_and_the_ring_is_bounded() {
        let recent = Arc::new(Recent::default());
        let (a, b) = (recent.read("s"), recent.read("s"));
        let (rec, m) = message(7);
        for seq in 1..=(KEPT as Seq + 10) {
            recent.keep("s", seq, &rec, &m);
        }
        assert!(a.take(1, &rec).is_none(), "the oldest went");
        let last = KEPT as Seq + 10;
        assert!(a.take(last, &rec).is_some());
        assert!(
            b.take(last, &rec).is_some(),
            "a reader does not take from the other"
        );
        // Numbered again from an earlier seq: the old entries go.
        recent.keep("s", 3, &rec, &m);
        assert!(a.take(last, &rec).is_none());
        assert!(a.take(3, &rec).is_some());
    }
}
