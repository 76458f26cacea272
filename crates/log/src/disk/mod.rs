//! The disk backend, the default: fjall (an LSM tree with a write-ahead
//! journal) with fsync'd group commit.
//!
//! One committer thread owns every write. It drains whatever appends are
//! queued (from any number of sessions), writes them in one atomic batch,
//! commits it with `SyncAll` (one fsync of the journal for the whole batch)
//! and only then publishes the events to the hub, so nothing a reader sees can
//! be lost by a crash.
//!
//! Why fjall and not redb: both were measured on this workload (the closing
//! note of issue 2). A B-tree rewrites one leaf page per session per commit;
//! a journal appends sequentially, which made group commit several times
//! faster, with replay just as fast.
//!
//! Layout: four keyspaces; keys are the session id, a 0 byte (ids are
//! visible ASCII, so it cannot occur in them), then big-endian numbers, so
//! byte order is stream order.
//! - `sessions`: id -> created_ms | next_request | ended | meta (live) or ended_ms (ended)
//! - `streams`: id 0 stream -> head | floor
//! - `events`: id 0 stream seq -> at_ms | message
//! - `requests`: id 0 R -> the request stream's record, until retention
//!   takes its last event

use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::oneshot;

use crate::hub::{Cached, Hub};
use crate::{
    Bounds, Event, EventLog, Leases, LogError, PinId, Retention, Seq, SessionInfo, SessionRecords,
    StreamKey, Subscription,
};

mod batch;
mod check;
mod commit;
mod damage;
mod heads;
mod maintain;
mod open;
mod pins;
mod store;

pub use check::CheckReport;
use commit::{Committer, Op, Reply, Sent};
pub use damage::{Damage, DamageKind};
use open::open_store;
use store::{load, read_events, storage, Store};

/// Events per stream kept in memory for readers near the head.
const CACHE_EVENTS: usize = 128;

/// The durable log in one fjall directory.
pub struct DiskLog {
    hub: Arc<Hub>,
    store: Store,
    ops: std_mpsc::Sender<Sent>,
    committer: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
    faults: crate::retention::ReadFaults,
    instance: String,
    /// Damage this open found (and made loud), docs/protocol.md 6.1.
    found: Vec<Damage>,
}

impl Drop for DiskLog {
    /// Stops the committer after it has committed what was queued, so the
    /// file is released when this returns and can be opened again.
    fn drop(&mut self) {
        let (closed, _) = std_mpsc::channel();
        drop(std::mem::replace(&mut self.ops, closed));
        if let Some(handle) = self.committer.take() {
            let _ = handle.join();
        }
    }
}

impl DiskLog {
    /// Opens (or creates) the log in directory `path`, checking what it finds.
    ///
    /// A journal that fails its checksums, or streams that do not hold
    /// exactly their `floor ..= head`, are refused with [`LogError::Corrupt`].
    pub fn open(path: impl AsRef<Path>, retention: Retention) -> Result<Self, LogError> {
        Self::open_with(path, retention, crate::memory::DEFAULT_SUB_CAPACITY)
    }

    /// As [`DiskLog::open`], with subscribers lagging after `capacity` unread events.
    pub fn open_with(
        path: impl AsRef<Path>,
        retention: Retention,
        capacity: usize,
    ) -> Result<Self, LogError> {
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path)
            .map_err(|e| storage(format!("creating {}: {e}", path.display())))?;
        let store = open_store(&path)?;
        let named = |e: LogError| match e {
            LogError::Corrupt(m) => LogError::Corrupt(format!("{}: {m}", path.display())),
            other => other,
        };
        let found = damage::check_heads(&store, &path).map_err(named)?;
        let hub = Arc::new(Hub::new(retention, capacity, CACHE_EVENTS));
        load(&store, &hub).map_err(named)?;
        pins::load_pins(&store, &hub).map_err(named)?;
        let heads = heads::HeadsWriter::create(&path, &commit::snapshot(&hub)).map_err(|e| {
            storage(format!(
                "{}: the committed-heads record: {e}",
                path.display()
            ))
        })?;
        damage::keep_heads(&store)?;
        damage::report(&path, &found, &hub);
        let (tx, rx) = std_mpsc::channel();
        let committer = Committer {
            store: store.clone(),
            hub: hub.clone(),
            heads,
        };
        let handle = std::thread::Builder::new()
            .name("mcp-resume-log-committer".into())
            .spawn(move || committer.run(rx))
            .map_err(storage)?;
        Ok(Self {
            hub,
            store,
            ops: tx,
            committer: Some(handle),
            path,
            faults: Default::default(),
            instance: crate::types::new_instance_id(),
            found,
        })
    }

    /// Verifies the log directory `path` offline (docs/protocol.md 6.1):
    /// every record, every event, the committed-heads record against what
    /// is there. With `repair`, makes a damaged directory servable without
    /// losing what is intact: missing events become lost ranges, records
    /// that belong to nothing go, a lost committed-heads record is started
    /// anew; then opens it once to prove it. `Err` when it cannot be read at
    /// all (not a log, locked by a running server, unreadable tables).
    pub fn check(path: impl AsRef<Path>, repair: bool) -> Result<CheckReport, LogError> {
        check::check(path.as_ref(), repair)
    }

    /// The damage this open found: committed state the files no longer
    /// held, now served under docs/protocol.md 6.1 (kept heads, lost ranges
    /// refused with `data-lost`, lost sessions ended). Empty on a healthy log.
    pub fn damage_found(&self) -> &[Damage] {
        &self.found
    }

    /// Every stream with a lost range now, found by this open or an earlier
    /// one (retention clears a range once it passes it).
    pub fn lost_ranges(&self) -> Vec<Damage> {
        self.hub
            .lost_ranges()
            .into_iter()
            .map(|(session, stream, from, to)| Damage {
                session,
                kind: DamageKind::EventsLost { stream, from, to },
            })
            .collect()
    }

    /// The directory this log lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

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

    /// For measurements: flushes every memtable and compacts every keyspace
    /// fully, so that the directory's size shows what is stored, not what
    /// awaits compaction (deleted keys leave markers until then).
    #[doc(hidden)]
    pub fn compact(&self) -> Result<(), LogError> {
        let s = &self.store;
        for ks in [&s.sessions, &s.streams, &s.events, &s.requests] {
            ks.rotate_memtable_and_wait().map_err(storage)?;
            ks.major_compact().map_err(storage)?;
        }
        Ok(())
    }

    /// For measurements: bytes of the keyspaces' tables and of the journal.
    #[doc(hidden)]
    pub fn storage_bytes(&self) -> (u64, u64) {
        let s = &self.store;
        let tables = [&s.sessions, &s.streams, &s.events, &s.requests]
            .iter()
            .map(|ks| ks.disk_space())
            .sum();
        (tables, s.db.journal_disk_space().unwrap_or(0))
    }

    /// For tests: the next `n` reads fail (`u64::MAX`: all until reset with
    /// 0), to prove that housekeeping trims nothing it could not read.
    #[doc(hidden)]
    pub fn fail_reads(&self, n: u64) {
        self.faults.set(n);
    }

    async fn submit<T>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Result<T, LogError> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Sent::One(make(tx)))
            .map_err(|_| LogError::Closed)?;
        rx.await.map_err(|_| LogError::Closed)?
    }
}

#[async_trait]
impl EventLog for DiskLog {
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError> {
        self.submit(|reply| Op::OpenRequest {
            id: id.to_owned(),
            meta,
            max,
            reply,
        })
        .await
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

    /// Kept until the session ends: a disk log serves one process, where a
    /// carrier exists only between servers sharing this handle, and its
    /// committed-heads record would count a deleted stream as lost.
    async fn retire_request_stream(&self, id: &str, _r: u64) -> Result<(), LogError> {
        self.hub.with_live(id, |_| Ok(()))
    }

    /// The creation and the append go to the committer together, staged in
    /// one batch: one commit, where a refused append, a creation and the
    /// append took three round trips and two commits.
    async fn append_or_create(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        meta: Bytes,
    ) -> Result<Seq, LogError> {
        // A new session has only its session stream: a request stream's
        // append would fail after the creation, so it is only appended.
        if messages.is_empty() || stream != StreamKey::Session || self.hub.cell(id).is_ok() {
            return self.append(id, stream, messages).await;
        }
        let (created, create_rx) = oneshot::channel();
        let (appended, append_rx) = oneshot::channel();
        let create = Op::Create {
            id: id.to_owned(),
            meta,
            reply: created,
        };
        let append = Op::Append {
            id: id.to_owned(),
            stream,
            messages,
            key: None,
            reply: appended,
        };
        self.ops
            .send(Sent::Together([create, append]))
            .map_err(|_| LogError::Closed)?;
        match create_rx.await.map_err(|_| LogError::Closed)? {
            // Another writer created it first: the append is as good.
            Ok(()) | Err(LogError::SessionExists(_)) => {}
            Err(e) => return Err(e),
        }
        append_rx.await.map_err(|_| LogError::Closed)?
    }

    async fn append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError> {
        if messages.is_empty() {
            return Ok(self.hub.bounds(id, stream)?.head);
        }
        self.submit(|reply| Op::Append {
            id: id.to_owned(),
            stream,
            messages,
            key: None,
            reply,
        })
        .await
    }

    /// A repeat of a key among the session's last 8
    /// keyed appends (or one staged earlier in the batch) appends nothing,
    /// decided as the committer assigns seqs: two writers ending one task
    /// at once commit one end. Kept in memory (no writer outlives a start).
    async fn append_once(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        if messages.is_empty() {
            return Ok(self.hub.bounds(id, stream)?.head);
        }
        self.submit(|reply| Op::Append {
            id: id.to_owned(),
            stream,
            messages,
            key: Some(key),
            reply,
        })
        .await
    }

    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        self.faults.check()?;
        match self.hub.read_cached(id, stream, after, max)? {
            Cached::Hit(events) => Ok(events),
            Cached::Miss(b, max) => {
                let (id, store, hub) = (id.to_owned(), self.store.clone(), self.hub.clone());
                tokio::task::spawn_blocking(move || {
                    read_events(&store, &hub, &id, stream, after, max, b)
                })
                .await
                .map_err(storage)?
            }
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
        let pin = self.hub.pin(id, stream, seq, ttl)?;
        let until_ms = crate::types::now_ms() + ttl.as_millis() as u64;
        let value = Some(pins::pin_value(stream, seq, until_ms));
        let stored = self
            .submit(|reply| Op::Pin {
                id: id.to_owned(),
                pin,
                value,
                reply,
            })
            .await;
        if let Err(e) = stored {
            let _ = self.hub.unpin(id, pin);
            return Err(e);
        }
        Ok(pin)
    }

    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        self.hub.unpin(id, pin)?;
        // Not awaited: a pin left in storage only expires later, at the
        // next restart's load or with its session.
        let (reply, _) = oneshot::channel();
        let _ = self.ops.send(Sent::One(Op::Pin {
            id: id.to_owned(),
            pin,
            value: None,
            reply,
        }));
        Ok(())
    }
}

#[async_trait]
impl SessionRecords for DiskLog {
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.submit(|reply| Op::Create {
            id: id.to_owned(),
            meta,
            reply,
        })
        .await
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, LogError> {
        self.hub.info(id)
    }

    async fn set_meta(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.submit(|reply| Op::SetMeta {
            id: id.to_owned(),
            meta,
            expect: None,
            reply,
        })
        .await
        .map(|_| ())
    }

    async fn swap_meta(&self, id: &str, expect: Bytes, meta: Bytes) -> Result<bool, LogError> {
        let swapped = self
            .submit(|reply| Op::SetMeta {
                id: id.to_owned(),
                meta,
                expect: Some(expect),
                reply,
            })
            .await?;
        Ok(swapped == 1)
    }

    async fn touch(&self, id: &str) -> Result<(), LogError> {
        self.hub.touch(id)
    }

    async fn live_sessions(&self) -> usize {
        self.hub.live()
    }

    async fn end_session(&self, id: &str) -> Result<(), LogError> {
        self.submit(|reply| Op::End {
            id: id.to_owned(),
            reply,
        })
        .await
    }

    async fn session_ids(&self) -> Result<Vec<String>, LogError> {
        Ok(self.hub.live_ids())
    }
}

#[async_trait]
impl Leases for DiskLog {
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
