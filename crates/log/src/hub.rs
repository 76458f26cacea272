//! In-process state every backend shares: heads, floors, a hot tail of recent
//! events, pins and the subscribers that committed events fan out to.
//!
//! Publishing and subscribing take the same per-session lock, which is what
//! makes [`Hub::subscribe`] a commit point: an event is either at or below
//! the head it returns, or delivered to the new subscriber, never neither.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::subscription::{EndReason, Feed};
use crate::types::now_ms;
use crate::{Bounds, Event, LogError, PinId, Retention, Seq, SessionInfo, StreamKey, Subscription};

/// One stream's visible state.
pub(crate) struct StreamState {
    pub head: Seq,
    pub floor: Seq,
    /// Contiguous, ending at `head` when not empty.
    pub cache: VecDeque<Event>,
    subs: Vec<Feed>,
    /// A request stream's opaque record from `open_request_stream`; `None`
    /// for the session stream and once retention has taken every event.
    pub meta: Option<Bytes>,
}

impl StreamState {
    pub fn new(head: Seq, floor: Seq) -> Self {
        Self {
            head,
            floor,
            cache: VecDeque::new(),
            subs: Vec::new(),
            meta: None,
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

    pub fn bounds(&self) -> Bounds {
        Bounds {
            head: self.head,
            floor: self.floor,
        }
    }

    fn end_all(&mut self, why: EndReason) {
        for sub in self.subs.drain(..) {
            sub.end(why);
        }
    }
}

struct Pin {
    id: PinId,
    stream: StreamKey,
    seq: Seq,
    until: Instant,
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
    pub streams: HashMap<u64, StreamState>,
    /// Request streams whose events retention took, by number: only their
    /// head is kept (so reads still answer `Truncated`), not their state.
    pub retired: HashMap<u64, Seq>,
    pins: Vec<Pin>,
}

impl SessionState {
    pub fn new(created_ms: u64, meta: Bytes, next_request: u64) -> Self {
        let mut streams = HashMap::new();
        streams.insert(0, StreamState::new(0, 1));
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
        }
    }

    /// A stream's bounds, retired ones included (all their events are gone).
    pub fn bounds_of(&self, id: &str, key: StreamKey) -> Result<Bounds, LogError> {
        let n = key.number();
        match (self.streams.get(&n), self.retired.get(&n)) {
            (Some(s), _) => Ok(s.bounds()),
            (None, Some(&head)) => Ok(Bounds {
                head,
                floor: head + 1,
            }),
            (None, None) => Err(no_stream(id, key)),
        }
    }

    /// A stream's state to change; a retired stream comes back (empty, at its head).
    pub fn stream_mut(&mut self, id: &str, key: StreamKey) -> Result<&mut StreamState, LogError> {
        let n = key.number();
        if let Some(head) = self.retired.remove(&n) {
            self.streams.insert(n, StreamState::new(head, head + 1));
        }
        self.streams.get_mut(&n).ok_or_else(|| no_stream(id, key))
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
        s.floor = floor.max(s.floor);
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

/// Result of trying to serve a read from memory.
pub(crate) enum Cached {
    /// Served from the hot tail.
    Hit(Vec<Event>),
    /// Must be read from storage; the bounds were checked.
    Miss(Bounds),
}

/// All sessions of one log instance.
pub(crate) struct Hub {
    sessions: RwLock<HashMap<Arc<str>, Arc<Mutex<SessionState>>>>,
    pub retention: Retention,
    sub_capacity: usize,
    cache_limit: usize,
    next_pin: AtomicU64,
    live: std::sync::atomic::AtomicUsize,
}

pub(crate) type Cell = Arc<Mutex<SessionState>>;

pub(crate) fn lock(cell: &Cell) -> std::sync::MutexGuard<'_, SessionState> {
    // A panic while holding the lock is a bug; the state itself is still
    // consistent (every mutation is completed before anything can panic).
    cell.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    pub fn new(retention: Retention, sub_capacity: usize, cache_limit: usize) -> Self {
        Self {
            sessions: RwLock::new(HashMap::new()),
            retention,
            sub_capacity,
            cache_limit,
            next_pin: AtomicU64::new(1),
            live: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn cache_limit(&self) -> usize {
        self.cache_limit
    }

    /// Adds a session (live or a tombstone); refuses a known id.
    pub fn insert(&self, id: &str, state: SessionState) -> Result<(), LogError> {
        let mut map = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        if map.contains_key(id) {
            return Err(LogError::SessionExists(id.to_owned()));
        }
        if !state.ended {
            self.live.fetch_add(1, Ordering::Relaxed);
        }
        map.insert(Arc::from(id), Arc::new(Mutex::new(state)));
        Ok(())
    }

    /// Ends a live session: subscribers end, streams and pins go.
    pub fn end(&self, id: &str) -> Result<(), LogError> {
        self.with_live(id, |st| {
            st.end();
            Ok(())
        })?;
        self.live.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// How many sessions are live.
    pub fn live(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// The session's cell, live or ended.
    pub fn cell(&self, id: &str) -> Result<Cell, LogError> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
            .ok_or_else(|| LogError::NoSession(id.to_owned()))
    }

    /// Runs `f` on a live session.
    pub fn with_live<T>(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionState) -> Result<T, LogError>,
    ) -> Result<T, LogError> {
        let cell = self.cell(id)?;
        let mut st = lock(&cell);
        if st.ended {
            return Err(LogError::NoSession(id.to_owned()));
        }
        f(&mut st)
    }

    pub fn info(&self, id: &str) -> Result<SessionInfo, LogError> {
        self.with_live(id, |st| {
            Ok(SessionInfo {
                id: id.to_owned(),
                created_ms: st.created_ms,
                meta: st.meta.clone(),
            })
        })
    }

    pub fn touch(&self, id: &str) -> Result<(), LogError> {
        self.with_live(id, |st| {
            st.last_active = Instant::now();
            Ok(())
        })
    }

    pub fn bounds(&self, id: &str, key: StreamKey) -> Result<Bounds, LogError> {
        self.with_live(id, |st| st.bounds_of(id, key))
    }

    /// The commit point.
    pub fn subscribe(&self, id: &str, key: StreamKey) -> Result<(Bounds, Subscription), LogError> {
        self.with_live(id, |st| {
            let s = st.stream_mut(id, key)?;
            let (feed, sub) = Feed::pair(self.sub_capacity, s.head);
            s.subs.push(feed);
            Ok((s.bounds(), sub))
        })
    }

    /// Checks `after` against the bounds and serves from the hot tail if it can.
    pub fn read_cached(
        &self,
        id: &str,
        key: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Cached, LogError> {
        self.with_live(id, |st| {
            let b = st.bounds_of(id, key)?;
            b.admit(after).map_err(LogError::from_discontinuity)?;
            // A retired stream admits only its head: nothing to read.
            let Some(s) = st.streams.get(&key.number()).filter(|_| after < b.head) else {
                return Ok(Cached::Hit(Vec::new()));
            };
            match s.cache.front() {
                Some(first) if first.seq <= after + 1 => {
                    let skip = (after + 1 - first.seq) as usize;
                    Ok(Cached::Hit(
                        s.cache.iter().skip(skip).take(max).cloned().collect(),
                    ))
                }
                _ => Ok(Cached::Miss(b)),
            }
        })
    }

    pub fn pin(
        &self,
        id: &str,
        key: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError> {
        self.with_live(id, |st| {
            st.bounds_of(id, key)?;
            let pin = PinId(self.next_pin.fetch_add(1, Ordering::Relaxed));
            st.pins.push(Pin {
                id: pin,
                stream: key,
                seq,
                until: Instant::now() + ttl,
            });
            Ok(pin)
        })
    }

    pub fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        if let Ok(cell) = self.cell(id) {
            lock(&cell).pins.retain(|p| p.id != pin);
        }
        Ok(())
    }

    /// Ids of live sessions idle for longer than `idle`.
    pub fn idle_sessions(&self, idle: Duration) -> Vec<String> {
        let now = Instant::now();
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, c)| {
                let st = lock(c);
                !st.ended && now.duration_since(st.last_active) > idle
            })
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Every live session's cell, for housekeeping.
    pub fn live_cells(&self) -> Vec<(String, Cell)> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, c)| !lock(c).ended)
            .map(|(id, c)| (id.to_string(), c.clone()))
            .collect()
    }

    /// The record of request stream `r` of a live session.
    pub fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.with_live(id, |st| st.request_meta(id, r))
    }

    /// How many request streams a live session has opened (the highest `R`).
    pub fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        self.with_live(id, |st| Ok(st.next_request - 1))
    }

    /// The ids of every live session.
    pub fn live_ids(&self) -> Vec<String> {
        self.live_cells().into_iter().map(|(id, _)| id).collect()
    }

    /// Ids of sessions that ended at least `ttl` ago.
    pub fn expired_tombstones(&self, ttl: Duration) -> Vec<String> {
        let cutoff = now_ms().saturating_sub(ttl.as_millis() as u64);
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, c)| {
                let st = lock(c);
                st.ended && st.ended_ms <= cutoff
            })
            .map(|(id, _)| id.to_string())
            .collect()
    }

    /// Forgets ended sessions: their ids become unknown (and may be used
    /// again). Live ones are left alone.
    pub fn forget(&self, ids: &[String]) {
        let mut map = self.sessions.write().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            if map.get(id.as_str()).is_some_and(|c| lock(c).ended) {
                map.remove(id.as_str());
            }
        }
        if map.capacity() > 2 * map.len() + 64 {
            map.shrink_to_fit();
        }
    }

    /// How many streams of live sessions keep full state.
    pub fn stream_states(&self) -> usize {
        self.live_cells()
            .iter()
            .map(|(_, c)| lock(c).streams.len())
            .sum()
    }

    /// How many ended sessions are remembered.
    pub fn tombstones(&self) -> usize {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
            .saturating_sub(self.live())
    }

    /// Retires the emptied request streams of every live session; returns how many.
    pub fn retire_emptied(&self) -> usize {
        self.live_cells()
            .iter()
            .map(|(_, c)| lock(c).retire_emptied())
            .sum()
    }

    /// Ends every subscription: the log is closing.
    pub fn close_all(&self) {
        for (_, cell) in self
            .sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            for s in lock(cell).streams.values_mut() {
                s.end_all(EndReason::Closed);
            }
        }
    }
}
