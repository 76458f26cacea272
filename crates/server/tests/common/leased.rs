//! A `Log` that forwards everything to a real shared one (Redis) and lets a
//! test lapse its lease epoch (a heartbeat that went unrefreshed), refuse
//! its next claims (Redis failing at the re-claim), and see what it
//! committed after it first learned that it lost a session's lease.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mcp_resume_log::{
    Bounds, Event, EventLog, Leases, Log, LogError, Maintenance, Pass, PinId, Seq, SessionInfo,
    SessionRecords, StreamKey, Subscription,
};

/// The wrapper and its switches.
pub struct LeasedLog {
    pub inner: Arc<dyn Log>,
    /// Added to the inner log's lease epoch: what runs under an older one stops.
    pub lapses: AtomicU64,
    /// The next this many claims fail as `Unavailable`.
    pub refuse_claims: AtomicUsize,
    /// Set once a fenced append came back `LeaseLost`.
    pub learned: AtomicBool,
    /// What was committed (session, stream, first message) after that.
    pub after_learning: Mutex<Vec<(String, StreamKey, String)>>,
}

impl LeasedLog {
    pub fn new(inner: Arc<dyn Log>) -> Self {
        Self {
            inner,
            lapses: AtomicU64::new(0),
            refuse_claims: AtomicUsize::new(0),
            learned: AtomicBool::new(false),
            after_learning: Mutex::default(),
        }
    }

    /// Records a commit that went through, once the lease was known lost.
    fn committed<T>(
        &self,
        id: &str,
        stream: StreamKey,
        messages: &[Bytes],
        r: Result<T, LogError>,
    ) -> Result<T, LogError> {
        match &r {
            Ok(_) if self.learned.load(Ordering::Acquire) => {
                let first = messages
                    .first()
                    .map(|m| String::from_utf8_lossy(m).into_owned())
                    .unwrap_or_default();
                self.after_learning
                    .lock()
                    .unwrap()
                    .push((id.to_owned(), stream, first));
            }
            Err(LogError::LeaseLost(_)) => self.learned.store(true, Ordering::Release),
            _ => {}
        }
        r
    }
}

#[async_trait]
impl EventLog for LeasedLog {
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError> {
        self.inner.open_request_stream(id, meta, max).await
    }
    async fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.inner.request_meta(id, r).await
    }
    async fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        self.inner.request_streams(id).await
    }
    async fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        self.inner.live_request_streams(id).await
    }
    async fn retire_request_stream(&self, id: &str, r: u64) -> Result<(), LogError> {
        self.inner.retire_request_stream(id, r).await
    }
    async fn append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError> {
        let r = self.inner.append(id, stream, messages.clone()).await;
        self.committed(id, stream, &messages, r)
    }
    async fn append_once(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        let r = self
            .inner
            .append_once(id, stream, messages.clone(), key)
            .await;
        self.committed(id, stream, &messages, r)
    }
    async fn append_fenced(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        let r = self
            .inner
            .append_fenced(id, stream, messages.clone(), key)
            .await;
        self.committed(id, stream, &messages, r)
    }
    async fn append_if_held_by(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
        holder: Option<&str>,
    ) -> Result<Seq, LogError> {
        let r = self
            .inner
            .append_if_held_by(id, stream, messages.clone(), key, holder)
            .await;
        self.committed(id, stream, &messages, r)
    }
    async fn append_or_create(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        meta: Bytes,
    ) -> Result<Seq, LogError> {
        let r = self
            .inner
            .append_or_create(id, stream, messages.clone(), meta)
            .await;
        self.committed(id, stream, &messages, r)
    }
    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        self.inner.read(id, stream, after, max).await
    }
    async fn bounds(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError> {
        self.inner.bounds(id, stream).await
    }
    async fn subscribe(
        &self,
        id: &str,
        stream: StreamKey,
    ) -> Result<(Bounds, Subscription), LogError> {
        self.inner.subscribe(id, stream).await
    }
    async fn pin(
        &self,
        id: &str,
        stream: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError> {
        self.inner.pin(id, stream, seq, ttl).await
    }
    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        self.inner.unpin(id, pin).await
    }
}

#[async_trait]
impl SessionRecords for LeasedLog {
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.inner.create_session(id, meta).await
    }
    async fn session(&self, id: &str) -> Result<SessionInfo, LogError> {
        self.inner.session(id).await
    }
    async fn set_meta(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.inner.set_meta(id, meta).await
    }
    async fn swap_meta(&self, id: &str, expect: Bytes, meta: Bytes) -> Result<bool, LogError> {
        self.inner.swap_meta(id, expect, meta).await
    }
    async fn live_sessions(&self) -> usize {
        self.inner.live_sessions().await
    }
    async fn touch(&self, id: &str) -> Result<(), LogError> {
        self.inner.touch(id).await
    }
    async fn end_session(&self, id: &str) -> Result<(), LogError> {
        self.inner.end_session(id).await
    }
    async fn session_ids(&self) -> Result<Vec<String>, LogError> {
        self.inner.session_ids().await
    }
}

#[async_trait]
impl Leases for LeasedLog {
    fn instance(&self) -> &str {
        self.inner.instance()
    }
    async fn instance_alive(&self, instance: &str) -> Result<bool, LogError> {
        self.inner.instance_alive(instance).await
    }
    async fn claim(&self, id: &str) -> Result<Option<String>, LogError> {
        let refuse = self
            .refuse_claims
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if refuse.is_ok() {
            return Err(LogError::Unavailable(
                "injected: Redis is failing over".into(),
            ));
        }
        self.inner.claim(id).await
    }
    fn shared(&self) -> bool {
        self.inner.shared()
    }
    fn leases_fresh(&self) -> bool {
        self.inner.leases_fresh()
    }
    fn lease_epoch(&self) -> u64 {
        self.inner.lease_epoch() + self.lapses.load(Ordering::Acquire)
    }
    async fn lease_holder(&self, id: &str) -> Result<Option<String>, LogError> {
        self.inner.lease_holder(id).await
    }
    async fn release(&self, id: &str, seen: Option<u64>) -> Result<bool, LogError> {
        self.inner.release(id, seen).await
    }
    async fn open_carrier(
        &self,
        id: &str,
        owner: &str,
        meta: Bytes,
        max: u64,
    ) -> Result<Option<u64>, LogError> {
        self.inner.open_carrier(id, owner, meta, max).await
    }
}

#[async_trait]
impl Maintenance for LeasedLog {
    async fn maintain(&self, idle: Duration, tombstone_ttl: Duration) -> Result<Pass, LogError> {
        self.inner.maintain(idle, tombstone_ttl).await
    }
    async fn watch(&self) -> Result<Vec<String>, LogError> {
        self.inner.watch().await
    }
    async fn close(&self) -> Result<(), LogError> {
        self.inner.close().await
    }
}
