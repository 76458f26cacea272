//! The memory backend: the hub alone, keeping every retained event.
//!
//! Committed means appended in this process; nothing survives a restart.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::hub::{Cached, Hub, SessionState};
use crate::types::now_ms;
use crate::{
    Bounds, Event, EventLog, Leases, LogError, Maintenance, Pass, PinId, Retention, Seq,
    SessionInfo, SessionRecords, StreamKey, Subscription, BUCKETS,
};

/// A log that lives and dies with the process; for tests and throwaway servers.
pub struct MemoryLog {
    hub: Hub,
    instance: String,
}

/// Buffer of a subscriber before it counts as lagging.
pub(crate) const DEFAULT_SUB_CAPACITY: usize = 4096;

impl MemoryLog {
    /// A log with the given retention.
    pub fn new(retention: Retention) -> Self {
        Self::with_subscriber_capacity(retention, DEFAULT_SUB_CAPACITY)
    }

    /// A log whose subscribers lag after `capacity` unread events.
    pub fn with_subscriber_capacity(retention: Retention, capacity: usize) -> Self {
        Self {
            hub: Hub::new(retention, capacity, usize::MAX),
            instance: crate::types::new_instance_id(),
        }
    }
}

impl MemoryLog {
    /// For tests and measurements: how many ended sessions are remembered.
    #[doc(hidden)]
    pub fn tombstones(&self) -> usize {
        self.hub.tombstones()
    }

    /// For tests and measurements: how many streams of live sessions keep
    /// full state (retired request streams do not).
    #[doc(hidden)]
    pub fn stream_states(&self) -> usize {
        self.hub.stream_states()
    }

    /// Appends `messages` to `stream` of the session whose state is `st`
    /// (its lock held), trimming by count; the last seq.
    fn publish(
        &self,
        st: &mut crate::hub::SessionState,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError> {
        let Bounds { head, floor, .. } = st.bounds_of(id, stream)?;
        let at_ms = now_ms();
        let events: Vec<Event> = messages
            .into_iter()
            .zip(head + 1..)
            .map(|(message, seq)| Event {
                seq,
                at_ms,
                message,
            })
            .collect();
        let last = head + events.len() as u64;
        let new_floor = st.count_floor(stream, last, floor, self.hub.retention.max_events);
        st.publish(stream, events, new_floor, self.hub.cache_limit());
        Ok(last)
    }
}

impl Default for MemoryLog {
    fn default() -> Self {
        Self::new(Retention::default())
    }
}

/// Floor after age retention: the first retained event younger than `cutoff_ms`.
fn age_floor<'a>(events: impl Iterator<Item = &'a Event>, head: Seq, cutoff_ms: u64) -> Seq {
    events
        .filter(|e| e.at_ms >= cutoff_ms)
        .map(|e| e.seq)
        .next()
        .unwrap_or(head + 1)
}

#[async_trait]
impl EventLog for MemoryLog {
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError> {
        self.hub.with_live(id, |st| {
            let r = st.next_request;
            if r > max {
                return Err(LogError::TooManyStreams {
                    session: id.to_owned(),
                    max,
                });
            }
            st.next_request += 1;
            st.streams
                .insert(r, Box::new(crate::hub::StreamState::opened(meta)));
            Ok(r)
        })
    }

    async fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.hub.request_meta(id, r)
    }

    async fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        self.hub.request_streams(id)
    }

    async fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        self.hub.live_request_streams(id)
    }

    async fn retire_request_stream(&self, id: &str, r: u64) -> Result<(), LogError> {
        self.hub.retire_request(id, r)
    }

    async fn append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError> {
        self.hub
            .with_live(id, |st| self.publish(st, id, stream, messages))
    }

    /// At most once per `key`: a repeat of a key among the session's last
    /// 8 keyed appends returns the head that append left
    /// and appends nothing, atomically with the append (under the
    /// session's lock): two writers that end one task or one call at once
    /// commit one end.
    async fn append_once(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        self.hub.with_live(id, |st| {
            if let Some(head) = st.keyed_head(stream, key) {
                return Ok(head);
            }
            let last = self.publish(st, id, stream, messages)?;
            st.remember_keyed(stream, key, last);
            Ok(last)
        })
    }

    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        match self.hub.read_cached(id, stream, after, max)? {
            Cached::Hit(events) => Ok(events),
            // The memory backend's cache holds everything retained.
            Cached::Miss(b, _) => Err(LogError::Truncated {
                cursor: after,
                head: b.head,
                floor: b.floor,
            }),
        }
    }

    async fn bounds(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError> {
        self.hub.bounds(id, stream)
    }

    async fn subscribe(
        &self,
        id: &str,
        stream: StreamKey,
    ) -> Result<(Bounds, Subscription), LogError> {
        self.hub.subscribe(id, stream)
    }

    async fn pin(
        &self,
        id: &str,
        stream: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError> {
        self.hub.pin(id, stream, seq, ttl)
    }

    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        self.hub.unpin(id, pin)
    }
}

#[async_trait]
impl SessionRecords for MemoryLog {
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.hub.insert(id, SessionState::new(now_ms(), meta, 1))
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, LogError> {
        self.hub.info(id)
    }

    async fn set_meta(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.hub.with_live(id, |st| {
            st.meta = meta;
            Ok(())
        })
    }

    async fn swap_meta(&self, id: &str, expect: Bytes, meta: Bytes) -> Result<bool, LogError> {
        self.hub.with_live(id, |st| {
            let same = st.meta == expect;
            if same {
                st.meta = meta;
            }
            Ok(same)
        })
    }

    async fn touch(&self, id: &str) -> Result<(), LogError> {
        self.hub.touch(id)
    }

    async fn end_session(&self, id: &str) -> Result<(), LogError> {
        self.hub.end(id)
    }

    async fn live_sessions(&self) -> usize {
        self.hub.live()
    }

    async fn session_ids(&self) -> Result<Vec<String>, LogError> {
        Ok(self.hub.live_ids())
    }
}

#[async_trait]
impl Leases for MemoryLog {
    fn instance(&self) -> &str {
        &self.instance
    }

    async fn instance_alive(&self, instance: &str) -> Result<bool, LogError> {
        Ok(instance == self.instance)
    }

    async fn open_carrier(
        &self,
        id: &str,
        _owner: &str,
        meta: Bytes,
        max: u64,
    ) -> Result<Option<u64>, LogError> {
        self.open_request_stream(id, meta, max).await.map(Some)
    }
}

#[async_trait]
impl Maintenance for MemoryLog {
    async fn maintain(&self, idle: Duration, tombstone_ttl: Duration) -> Result<Pass, LogError> {
        let cutoff = now_ms().saturating_sub(self.hub.retention.max_age.as_millis() as u64);
        let cache_limit = self.hub.cache_limit();
        for (_, cell) in self.hub.live_cells() {
            let mut st = crate::hub::lock(&cell);
            let keys: Vec<u64> = st.streams.keys().copied().collect();
            for n in keys {
                let key = StreamKey::from_number(n);
                let s = &st.streams[&n];
                let mut floor = age_floor(s.cache.iter(), s.head, cutoff);
                if let Some(pin) = st.pinned(key) {
                    floor = floor.min(pin);
                }
                st.publish(key, Vec::new(), floor, cache_limit);
            }
        }
        self.hub.retire_emptied();
        let idle_ids = self.hub.idle_sessions(idle);
        for id in &idle_ids {
            let _ = self.end_session(id).await;
        }
        self.hub.forget(&self.hub.expired_tombstones(tombstone_ttl));
        Ok(Pass {
            ended: idle_ids,
            sweep: self.hub.first_sweep(),
            buckets: BUCKETS,
        })
    }

    async fn close(&self) -> Result<(), LogError> {
        self.hub.close_all();
        Ok(())
    }
}
