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
use crate::{Bounds, Event, LogError, PinId, Retention, Seq, SessionInfo, StreamKey, Subscription};

/// One stream's visible state.
pub(crate) struct StreamState {
    pub head: Seq,
    pub floor: Seq,
    /// Contiguous, ending at `head` when not empty.
    pub cache: VecDeque<Event>,
    subs: Vec<Feed>,
}

impl StreamState {
    pub fn new(head: Seq, floor: Seq) -> Self {
        Self {
            head,
            floor,
            cache: VecDeque::new(),
            subs: Vec::new(),
        }
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
    pub created_ms: u64,
    pub last_active: Instant,
    pub meta: Bytes,
    /// The next request stream number to hand out.
    pub next_request: u64,
    pub streams: HashMap<u64, StreamState>,
    pins: Vec<Pin>,
}

impl SessionState {
    pub fn new(created_ms: u64, meta: Bytes, next_request: u64) -> Self {
        let mut streams = HashMap::new();
        streams.insert(0, StreamState::new(0, 1));
        Self {
            ended: false,
            created_ms,
            last_active: Instant::now(),
            meta,
            next_request,
            streams,
            pins: Vec::new(),
        }
    }

    pub fn stream(&self, id: &str, key: StreamKey) -> Result<&StreamState, LogError> {
        self.streams
            .get(&key.number())
            .ok_or_else(|| no_stream(id, key))
    }

    pub fn stream_mut(&mut self, id: &str, key: StreamKey) -> Result<&mut StreamState, LogError> {
        self.streams
            .get_mut(&key.number())
            .ok_or_else(|| no_stream(id, key))
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
        for (_, mut s) in self.streams.drain() {
            s.end_all(EndReason::SessionEnded);
        }
        self.pins.clear();
        self.meta = Bytes::new();
    }

    /// Makes committed events visible and moves the floor; the only way
    /// events enter the visible state.
    pub fn publish(&mut self, key: StreamKey, events: Vec<Event>, floor: Seq, cache_limit: usize) {
        let Some(s) = self.streams.get_mut(&key.number()) else {
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
        self.with_live(id, |st| Ok(st.stream(id, key)?.bounds()))
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
            let s = st.stream(id, key)?;
            let b = s.bounds();
            b.admit(after).map_err(LogError::from_discontinuity)?;
            if after == s.head {
                return Ok(Cached::Hit(Vec::new()));
            }
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
            st.stream(id, key)?;
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
