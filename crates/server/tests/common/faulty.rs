//! A `Log` that forwards to a real one and injects the faults a test names:
//! reads that skip an event or come back empty, slow reads, appends racing a pin,
//! appends refused.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use mcp_resume_log::{
    Bounds, Event, EventLog, Leases, Log, LogError, Maintenance, PinId, Seq, SessionInfo,
    SessionRecords, StreamKey, Subscription,
};

/// The faults, switched on and off while the test runs.
#[derive(Default)]
pub struct Faults {
    /// Reads leave out this seq of the session stream (0: none).
    pub skip_seq: AtomicU64,
    /// Reads of the session stream come back empty.
    pub empty_reads: AtomicBool,
    /// Every read sleeps this many milliseconds first.
    pub read_delay_ms: AtomicU64,
    /// `pin` first appends this many events to the session stream (a writer
    /// racing the upgrade), then pins.
    pub append_before_pin: AtomicUsize,
    /// The next this many appends are refused as `Unavailable` (a Redis
    /// failover), committing nothing.
    pub refuse_appends: AtomicUsize,
    /// The next this many openings of a request stream are refused as
    /// `Unavailable` (a Redis restart), opening nothing.
    pub refuse_opens: AtomicUsize,
    /// The next this many listings of a session's request streams (their
    /// count, or the ones that hold something) fail as `Unavailable`.
    pub refuse_stream_lists: AtomicUsize,
    /// While set, appends wait (a slow fsync), committing nothing yet.
    pub hold_appends: AtomicBool,
    /// While set, appends panic (a log backend with a bug).
    pub panic_appends: AtomicBool,
    /// While set, session lookups fail as `Unavailable` with a secret-looking text.
    pub lookups_unavailable: AtomicBool,
    /// Request streams whose events `from ..= to` damaged storage lost
    /// (docs/protocol.md 6.1): their bounds name it, reads into it are
    /// `DataLost` and reads before it stop short of it, as a disk log's do.
    pub lost_range: std::sync::Mutex<Option<(Seq, Seq)>>,
}

impl Faults {
    fn lost(&self, stream: StreamKey) -> Option<(Seq, Seq)> {
        let lost = *self.lost_range.lock().unwrap();
        lost.filter(|_| stream != StreamKey::Session)
    }
}

/// The wrapper.
pub struct FaultyLog {
    pub inner: Arc<dyn Log>,
    pub faults: Arc<Faults>,
}

impl FaultyLog {
    /// `Unavailable` while [`Faults::refuse_stream_lists`] counts down.
    fn refuse_list(&self) -> Result<(), LogError> {
        let refuse = self.faults.refuse_stream_lists.fetch_update(
            Ordering::AcqRel,
            Ordering::Acquire,
            |n| n.checked_sub(1),
        );
        match refuse {
            Ok(_) => Err(LogError::Unavailable(
                "injected: the log is restarting".into(),
            )),
            Err(_) => Ok(()),
        }
    }
}

#[async_trait]
impl EventLog for FaultyLog {
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError> {
        let refuse =
            self.faults
                .refuse_opens
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if refuse.is_ok() {
            return Err(LogError::Unavailable(
                "injected: the log is restarting".into(),
            ));
        }
        self.inner.open_request_stream(id, meta, max).await
    }

    async fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.inner.request_meta(id, r).await
    }

    async fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        self.refuse_list()?;
        self.inner.request_streams(id).await
    }

    async fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        self.refuse_list()?;
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
        let refuse =
            self.faults
                .refuse_appends
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if refuse.is_ok() {
            return Err(LogError::Unavailable(
                "injected: the log is failing over".into(),
            ));
        }
        while self.faults.hold_appends.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            !self.faults.panic_appends.load(Ordering::Acquire),
            "injected: the log backend panicked"
        );
        self.inner.append(id, stream, messages).await
    }

    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        let delay = self.faults.read_delay_ms.load(Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if let Some((from, to)) = self.faults.lost(stream) {
            if after + 1 >= from && after < to {
                let b = self.inner.bounds(id, stream).await?;
                return Err(LogError::DataLost {
                    cursor: after,
                    from,
                    to,
                    head: b.head,
                    floor: b.floor,
                });
            }
        }
        let mut events = self.inner.read(id, stream, after, max).await?;
        if let Some((from, to)) = self.faults.lost(stream) {
            events.retain(|e| e.seq < from || e.seq > to);
            if after < from {
                events.retain(|e| e.seq < from);
            }
        }
        if stream == StreamKey::Session {
            if self.faults.empty_reads.load(Ordering::Relaxed) {
                return Ok(Vec::new());
            }
            let skip = self.faults.skip_seq.load(Ordering::Relaxed);
            events.retain(|e| e.seq != skip);
        }
        Ok(events)
    }

    async fn bounds(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError> {
        let mut b = self.inner.bounds(id, stream).await?;
        b.lost = b.lost.or(self.faults.lost(stream));
        Ok(b)
    }

    async fn subscribe(
        &self,
        id: &str,
        stream: StreamKey,
    ) -> Result<(Bounds, Subscription), LogError> {
        let (mut b, sub) = self.inner.subscribe(id, stream).await?;
        b.lost = b.lost.or(self.faults.lost(stream));
        Ok((b, sub))
    }

    async fn pin(
        &self,
        id: &str,
        stream: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError> {
        let n = self.faults.append_before_pin.swap(0, Ordering::Relaxed);
        if n > 0 {
            let msgs = (0..n)
                .map(|i| Bytes::from(format!(r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{{"racing":{i}}}}}}}"#)))
                .collect();
            self.inner.append(id, StreamKey::Session, msgs).await?;
        }
        self.inner.pin(id, stream, seq, ttl).await
    }

    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        self.inner.unpin(id, pin).await
    }
}

#[async_trait]
impl SessionRecords for FaultyLog {
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.inner.create_session(id, meta).await
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, LogError> {
        if self.faults.lookups_unavailable.load(Ordering::Acquire) {
            return Err(LogError::Unavailable(
                "redis://admin:hunter2@10.0.0.7:6379 refused".into(),
            ));
        }
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
impl Leases for FaultyLog {
    fn instance(&self) -> &str {
        self.inner.instance()
    }

    async fn instance_alive(&self, instance: &str) -> Result<bool, LogError> {
        self.inner.instance_alive(instance).await
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
impl Maintenance for FaultyLog {
    async fn maintain(
        &self,
        idle: Duration,
        tombstone_ttl: Duration,
    ) -> Result<mcp_resume_log::Pass, LogError> {
        self.inner.maintain(idle, tombstone_ttl).await
    }
    async fn watch(&self) -> Result<Vec<String>, LogError> {
        self.inner.watch().await
    }
    async fn close(&self) -> Result<(), LogError> {
        self.inner.close().await
    }
}
