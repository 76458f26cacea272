//! In-process state every backend shares: heads, floors, a hot tail of recent
//! events, pins and the subscribers that committed events fan out to.
//!
//! Publishing and subscribing take the same per-session lock, which is what
//! makes [`Hub::subscribe`] a commit point: an event is either at or below
//! the head it returns, or delivered to the new subscriber, never neither.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::subscription::{EndReason, Feed};
use crate::types::now_ms;
use crate::{Bounds, Event, LogError, PinId, Retention, Seq, SessionInfo, StreamKey, Subscription};

mod state;

use state::Pin;
pub(crate) use state::{SessionState, StreamState};

/// A live session's `(stream number, head)` pairs.
#[cfg(feature = "disk")]
pub(crate) type StreamHeads = Vec<(u64, Seq)>;

/// Result of trying to serve a read from memory.
pub(crate) enum Cached {
    /// Served from the hot tail.
    Hit(Vec<Event>),
    /// Must be read from storage, at most this many events (a read stops
    /// before a lost range); the bounds were checked.
    #[cfg_attr(not(feature = "disk"), allow(dead_code))]
    Miss(Bounds, usize),
}

/// All sessions of one log instance.
pub(crate) struct Hub {
    /// Hashed with foldhash: every operation looks its session up here.
    sessions: RwLock<foldhash::HashMap<Arc<str>, Arc<Mutex<SessionState>>>>,
    pub retention: Retention,
    sub_capacity: usize,
    cache_limit: usize,
    next_pin: AtomicU64,
    live: std::sync::atomic::AtomicUsize,
    /// Whether a maintenance pass already handed the live sessions over for the orphan sweep.
    swept: std::sync::atomic::AtomicBool,
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
            sessions: RwLock::new(foldhash::HashMap::default()),
            retention,
            sub_capacity,
            cache_limit,
            next_pin: AtomicU64::new(1),
            live: std::sync::atomic::AtomicUsize::new(0),
            swept: std::sync::atomic::AtomicBool::new(false),
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

    /// Marks a live session active now. Every request of a session does
    /// this, so it takes the session's lock under the map's read guard (the
    /// order `idle_sessions` takes them in) instead of cloning the
    /// session's `Arc` out of the map: no count on a line that every
    /// request of the session, on any worker, would write twice.
    /// [`Hub::with_live`] keeps the clone: its closures include a commit's
    /// publish, and holding the map's guard through that would make every
    /// other session wait behind it whenever a writer (a new session) is
    /// queued for the map.
    pub fn touch(&self, id: &str) -> Result<(), LogError> {
        let map = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        let cell = map
            .get(id)
            .ok_or_else(|| LogError::NoSession(id.to_owned()))?;
        let mut st = lock(cell);
        if st.ended {
            return Err(LogError::NoSession(id.to_owned()));
        }
        st.last_active = Instant::now();
        Ok(())
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
            // A read stops before a lost range; the next one is refused there.
            let max = match b.lost {
                Some((from, _)) if after + 1 < from => max.min((from - 1 - after) as usize),
                _ => max,
            };
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
                _ => Ok(Cached::Miss(b, max)),
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

    /// Puts back a pin a disk log kept through a restart, with its id;
    /// later pins get higher ids. Ignored for a session no longer live.
    #[cfg(feature = "disk")]
    pub fn restore_pin(&self, id: &str, key: StreamKey, seq: Seq, until: Instant, pin: PinId) {
        self.next_pin.fetch_max(pin.0 + 1, Ordering::Relaxed);
        let _ = self.with_live(id, |st| {
            st.pins.push(Pin {
                id: pin,
                stream: key,
                seq,
                until,
            });
            Ok(())
        });
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
    /// The live sessions on the first call (the first maintenance pass after
    /// opening: calls of an earlier process may be orphaned), nothing after.
    pub fn first_sweep(&self) -> Vec<String> {
        if self.swept.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Vec::new();
        }
        self.live_cells().into_iter().map(|(id, _)| id).collect()
    }

    pub fn live_cells(&self) -> Vec<(String, Cell)> {
        self.sessions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, c)| !lock(c).ended)
            .map(|(id, c)| (id.to_string(), c.clone()))
            .collect()
    }

    #[cfg(feature = "disk")]
    /// Every session's stream heads (retired streams too), `None` for an
    /// ended one: what the disk log's committed-heads snapshot holds.
    pub fn heads(&self) -> Vec<(String, Option<StreamHeads>)> {
        let map = self.sessions.read().unwrap_or_else(|e| e.into_inner());
        map.iter()
            .map(|(id, c)| {
                let st = lock(c);
                let heads = (!st.ended).then(|| {
                    st.streams
                        .iter()
                        .map(|(n, s)| (*n, s.head))
                        .chain(st.retired.iter().map(|(n, h)| (*n, *h)))
                        .collect()
                });
                (id.to_string(), heads)
            })
            .collect()
    }

    #[cfg(feature = "disk")]
    /// Streams with a lost range, as (session, stream, from, to).
    pub fn lost_ranges(&self) -> Vec<(String, StreamKey, Seq, Seq)> {
        let mut out = Vec::new();
        for (id, cell) in self.live_cells() {
            for (n, s) in &lock(&cell).streams {
                if let Some((from, to)) = s.lost {
                    out.push((id.clone(), StreamKey::from_number(*n), from, to));
                }
            }
        }
        out.sort();
        out
    }

    /// The record of request stream `r` of a live session.
    pub fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.with_live(id, |st| st.request_meta(id, r))
    }

    /// How many request streams a live session has opened (the highest `R`).
    pub fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        self.with_live(id, |st| Ok(st.next_request - 1))
    }

    /// The request streams of a live session whose state is held (not
    /// retired by retention or by [`Hub::retire_request`]), ascending.
    pub fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        self.with_live(id, |st| {
            let mut live: Vec<u64> = st.streams.keys().copied().filter(|n| *n > 0).collect();
            live.sort_unstable();
            Ok(live)
        })
    }

    /// Forgets request stream `r` of a live session: its state, its record,
    /// its events; its readers end as if the session had.
    pub fn retire_request(&self, id: &str, r: u64) -> Result<(), LogError> {
        self.with_live(id, |st| {
            if r == 0 {
                return Ok(());
            }
            st.retired.remove(&r);
            if let Some(mut s) = st.streams.remove(&r) {
                s.end_all(crate::subscription::EndReason::SessionEnded);
            }
            Ok(())
        })
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
