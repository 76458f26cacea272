//! One session's and one stream's visible state, behind the session's lock.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use bytes::Bytes;

use crate::subscription::{EndReason, Feed};
use crate::types::now_ms;
use crate::{Bounds, Event, LogError, PinId, Seq, StreamKey};

/// One stream's visible state.
pub(crate) struct StreamState {
    pub head: Seq,
    pub floor: Seq,
    /// Contiguous, ending at `head` when not empty.
    pub cache: VecDeque<Event>,
    pub(super) subs: Vec<Feed>,
    /// A request stream's opaque record from `open_request_stream`; `None`
    /// for the session stream and once retention has taken every event.
    pub meta: Option<Bytes>,
    /// Committed events damaged storage lost (docs/protocol.md 6.1).
    pub lost: Option<(Seq, Seq)>,
}

impl StreamState {
    /// A stream at `head` whose retained events start at `floor`.
    pub fn new(head: Seq, floor: Seq) -> Self {
        Self {
            head,
            floor,
            cache: VecDeque::new(),
            subs: Vec::new(),
            meta: None,
            lost: None,
        }
    }

    /// A request stream as opened, with its record.
    pub fn opened(meta: Bytes) -> Self {
        Self {
            meta: Some(meta),
            ..Self::new(0, 1)
        }
    }

    /// Whether retention has taken every event ever appended (none were
    /// kept, and some were appended).
    pub fn emptied(&self) -> bool {
        self.head > 0 && self.floor > self.head
    }

    /// Head and floor now.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            head: self.head,
            floor: self.floor,
            lost: self.lost,
        }
    }

    /// Ends every subscriber for `why`.
    pub(super) fn end_all(&mut self, why: EndReason) {
        for sub in self.subs.drain(..) {
            sub.end(why);
        }
    }
}

/// A hold on retention from `seq` on, until `until`.
pub(super) struct Pin {
    pub id: PinId,
    pub stream: StreamKey,
    pub seq: Seq,
    pub until: Instant,
}

/// One session's visible state.
pub(crate) struct SessionState {
    pub ended: bool,
    /// When it ended (ms since the epoch), for the tombstone's expiry.
    pub ended_ms: u64,
    pub created_ms: u64,
    pub last_active: Instant,
    pub meta: Bytes,
    /// The next request stream number to hand out.
    pub next_request: u64,
    /// Boxed: a session's map is made with room for four streams, and most
    /// sessions only ever have their session stream.
    pub streams: HashMap<u64, Box<StreamState>>,
    /// Request streams whose events retention took, by number: only their
    /// head is kept (so reads still answer `Truncated`), not their state.
    pub retired: HashMap<u64, Seq>,
    pub(super) pins: Vec<Pin>,
    /// The last keyed appends (`EventLog::append_once`): stream, key and the
    /// head they left, at most [`KEYED`]; boxed, and made only for a session
    /// that used one (the box keeps a session that never did at one word).
    #[allow(clippy::box_collection)]
    keyed: Option<Box<VecDeque<(u64, u64, Seq)>>>,
}

/// How many keyed appends a session of a one-process log remembers: a key
/// repeated after that many others appends again. Two writers that race
/// under one key (the end of a task, of an orphaned call) do so at once.
pub(crate) const KEYED: usize = 8;

impl SessionState {
    /// A live session with its session stream, handing out request streams from `next_request`.
    pub fn new(created_ms: u64, meta: Bytes, next_request: u64) -> Self {
        let mut streams = HashMap::new();
        streams.insert(0, Box::new(StreamState::new(0, 1)));
        Self {
            ended: false,
            ended_ms: 0,
            created_ms,
            last_active: Instant::now(),
            meta,
            next_request,
            streams,
            retired: HashMap::new(),
            pins: Vec::new(),
            keyed: None,
        }
    }

    /// The head a keyed append to `key` under `k` left, if it is remembered.
    pub fn keyed_head(&self, key: StreamKey, k: u64) -> Option<Seq> {
        let n = key.number();
        self.keyed
            .as_ref()?
            .iter()
            .find(|(s, kk, _)| *s == n && *kk == k)
            .map(|(_, _, head)| *head)
    }

    /// Remembers that the append to `key` under `k` left `head`.
    pub fn remember_keyed(&mut self, key: StreamKey, k: u64, head: Seq) {
        let ring = self.keyed.get_or_insert_with(Default::default);
        if ring.len() >= KEYED {
            ring.pop_front();
        }
        ring.push_back((key.number(), k, head));
    }

    /// A stream's bounds, retired ones included (all their events are gone).
    pub fn bounds_of(&self, id: &str, key: StreamKey) -> Result<Bounds, LogError> {
        let n = key.number();
        match (self.streams.get(&n), self.retired.get(&n)) {
            (Some(s), _) => Ok(s.bounds()),
            (None, Some(&head)) => Ok(Bounds::new(head, head + 1)),
            (None, None) => Err(no_stream(id, key)),
        }
    }

    /// A stream's state to change; a retired stream comes back (empty, at its head).
    pub fn stream_mut(&mut self, id: &str, key: StreamKey) -> Result<&mut StreamState, LogError> {
        let n = key.number();
        if let Some(head) = self.retired.remove(&n) {
            self.streams
                .insert(n, Box::new(StreamState::new(head, head + 1)));
        }
        self.streams
            .get_mut(&n)
            .map(|s| &mut **s)
            .ok_or_else(|| no_stream(id, key))
    }

    /// The record of request stream `r`; `Truncated` once retention took
    /// its events (the record goes with them).
    pub fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        let key = StreamKey::Request(r);
        if r == 0 {
            return Err(no_stream(id, key));
        }
        let b = self.bounds_of(id, key)?;
        match self.streams.get(&r).and_then(|s| s.meta.clone()) {
            Some(meta) => Ok(meta),
            None => Err(LogError::Truncated {
                cursor: 0,
                head: b.head,
                floor: b.floor,
            }),
        }
    }

    /// Drops the state of request streams whose events retention took and
    /// that nobody reads or pins, keeping only their head; returns how many.
    pub fn retire_emptied(&mut self) -> usize {
        let now = Instant::now();
        self.pins.retain(|p| p.until > now);
        let pinned: Vec<u64> = self.pins.iter().map(|p| p.stream.number()).collect();
        let done: Vec<u64> = self
            .streams
            .iter_mut()
            .filter(|(n, s)| **n > 0 && s.emptied() && !pinned.contains(n))
            .filter_map(|(n, s)| {
                s.subs.retain(|f| !f.is_closed());
                s.subs.is_empty().then_some(*n)
            })
            .collect();
        for n in &done {
            if let Some(s) = self.streams.remove(n) {
                self.retired.insert(*n, s.head);
            }
        }
        done.len()
    }

    /// The lowest seq a live pin protects on `key`, if any.
    pub fn pinned(&mut self, key: StreamKey) -> Option<Seq> {
        let now = Instant::now();
        self.pins.retain(|p| p.until > now);
        self.pins
            .iter()
            .filter(|p| p.stream == key)
            .map(|p| p.seq)
            .min()
    }

    /// Where the floor may move to keep at most `max_events`, honouring pins.
    pub fn count_floor(&mut self, key: StreamKey, head: Seq, floor: Seq, max_events: u64) -> Seq {
        let wanted = (head + 1).saturating_sub(max_events).max(floor);
        match self.pinned(key) {
            Some(pin) => wanted.min(pin.max(floor)),
            None => wanted,
        }
    }

    /// Ends the session in memory: subscribers end, streams and pins go.
    pub fn end(&mut self) {
        self.ended = true;
        self.ended_ms = now_ms();
        for (_, mut s) in std::mem::take(&mut self.streams) {
            s.end_all(EndReason::SessionEnded);
        }
        // Taken, not cleared: a tombstone keeps no capacity.
        self.retired = HashMap::new();
        self.pins = Vec::new();
        self.keyed = None;
        self.meta = Bytes::new();
    }

    /// Makes committed events visible and moves the floor; the only way
    /// events enter the visible state.
    pub fn publish(&mut self, key: StreamKey, events: Vec<Event>, floor: Seq, cache_limit: usize) {
        let n = key.number();
        if !events.is_empty() && self.retired.contains_key(&n) {
            let _ = self.stream_mut("", key);
        }
        let Some(s) = self.streams.get_mut(&n) else {
            return;
        };
        for ev in events {
            debug_assert_eq!(ev.seq, s.head + 1, "publish out of order");
            s.head = ev.seq;
            s.subs.retain(|sub| sub.offer(&ev));
            s.cache.push_back(ev);
        }
        // Retention passing the lost range forgets it (the one rule: Bounds::with_floor).
        let moved = s.bounds().with_floor(floor.max(s.floor));
        (s.floor, s.lost) = (moved.floor, moved.lost);
        while s.cache.front().is_some_and(|e| e.seq < s.floor) || s.cache.len() > cache_limit {
            s.cache.pop_front();
        }
        if s.emptied() {
            // A request stream's record goes with its events (storage drops it too).
            s.meta = None;
        }
    }
}

fn no_stream(id: &str, key: StreamKey) -> LogError {
    LogError::NoStream {
        session: id.to_owned(),
        stream: key.number(),
    }
}
