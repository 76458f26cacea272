//! The disk backend, the default: redb with fsync'd group commit.
//!
//! One committer thread owns every write. It drains whatever appends are
//! queued (from any number of sessions), writes them in one transaction,
//! commits it (one fsync for the whole batch) and only then publishes the
//! events to the hub, so nothing a reader sees can be lost by a crash.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use tokio::sync::oneshot;

use crate::hub::{lock, Cached, Hub, SessionState, StreamState};
use crate::memory::age_floor;
use crate::types::now_ms;
use crate::{
    Bounds, Event, Log, LogError, PinId, Retention, Seq, SessionInfo, StreamKey, Subscription,
};

/// id -> created_ms (8) | next_request (8) | ended (1) | meta.
const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
/// (id, stream) -> (head, floor).
const STREAMS: TableDefinition<(&str, u64), (u64, u64)> = TableDefinition::new("streams");
/// (id, stream, seq) -> (at_ms, message).
const EVENTS: TableDefinition<(&str, u64, u64), (u64, &[u8])> = TableDefinition::new("events");

/// Most ops folded into one transaction.
const MAX_BATCH: usize = 8192;
/// Events per stream kept in memory for readers near the head.
const CACHE_EVENTS: usize = 128;

type Reply<T> = oneshot::Sender<Result<T, LogError>>;

enum Op {
    Create {
        id: String,
        meta: Bytes,
        reply: Reply<()>,
    },
    SetMeta {
        id: String,
        meta: Bytes,
        reply: Reply<()>,
    },
    End {
        id: String,
        reply: Reply<()>,
    },
    OpenRequest {
        id: String,
        reply: Reply<u64>,
    },
    Append {
        id: String,
        stream: StreamKey,
        messages: Vec<Bytes>,
        reply: Reply<Seq>,
    },
    Trim {
        id: String,
        stream: StreamKey,
        floor: Seq,
        reply: Reply<()>,
    },
}

/// What a committed op changes in the hub, applied after the fsync.
enum Effect {
    Created(String, u64, Bytes),
    Meta(String, Bytes),
    Ended(String),
    Opened(String, u64),
    Published(String, StreamKey, Vec<Event>, Seq),
}

/// The durable log on one redb file.
pub struct DiskLog {
    hub: Arc<Hub>,
    db: Arc<Database>,
    ops: std_mpsc::Sender<Op>,
    committer: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
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

fn storage(e: impl std::fmt::Display) -> LogError {
    LogError::Storage(e.to_string())
}

#[derive(Clone)]
struct SessionRec {
    created_ms: u64,
    next_request: u64,
    ended: bool,
    meta: Bytes,
}

impl SessionRec {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17 + self.meta.len());
        v.extend_from_slice(&self.created_ms.to_le_bytes());
        v.extend_from_slice(&self.next_request.to_le_bytes());
        v.push(self.ended as u8);
        v.extend_from_slice(&self.meta);
        v
    }

    fn decode(id: &str, b: &[u8]) -> Result<Self, LogError> {
        if b.len() < 17 || b[16] > 1 {
            return Err(LogError::Corrupt(format!(
                "session record {id:?} is malformed"
            )));
        }
        Ok(Self {
            created_ms: u64::from_le_bytes(b[0..8].try_into().unwrap_or_default()),
            next_request: u64::from_le_bytes(b[8..16].try_into().unwrap_or_default()),
            ended: b[16] == 1,
            meta: Bytes::copy_from_slice(&b[17..]),
        })
    }
}

impl DiskLog {
    /// Opens (or creates) the log at `path`, checking what it finds.
    ///
    /// A file that fails redb's checksums, or whose streams do not hold
    /// exactly their `floor ..= head`, is refused with [`LogError::Corrupt`].
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
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| storage(format!("creating {}: {e}", dir.display())))?;
        }
        let db = Database::builder()
            .set_check_integrity_on_open(true)
            .create(&path)
            .map_err(|e| match e {
                redb::DatabaseError::Storage(redb::StorageError::Corrupted(m)) => {
                    LogError::Corrupt(format!("{}: {m}", path.display()))
                }
                redb::DatabaseError::DatabaseAlreadyOpen => storage(format!(
                    "{} is already open in another process",
                    path.display()
                )),
                other => LogError::Corrupt(format!("{}: cannot open: {other}", path.display())),
            })?;
        let hub = Arc::new(Hub::new(retention, capacity, CACHE_EVENTS));
        load(&db, &hub).map_err(|e| match e {
            LogError::Corrupt(m) => LogError::Corrupt(format!("{}: {m}", path.display())),
            other => other,
        })?;
        let db = Arc::new(db);
        let (tx, rx) = std_mpsc::channel();
        let committer = Committer {
            db: db.clone(),
            hub: hub.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("mcp-resume-log-committer".into())
            .spawn(move || committer.run(rx))
            .map_err(storage)?;
        Ok(Self {
            hub,
            db,
            ops: tx,
            committer: Some(handle),
            path,
        })
    }

    /// The file this log lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn submit<T>(&self, make: impl FnOnce(Reply<T>) -> Op) -> Result<T, LogError> {
        let (tx, rx) = oneshot::channel();
        self.ops.send(make(tx)).map_err(|_| LogError::Closed)?;
        rx.await.map_err(|_| LogError::Closed)?
    }
}

/// Reads committed, visible rows from the file; `b` is the visible bounds already checked.
fn read_events(
    db: &Database,
    hub: &Hub,
    id: &str,
    stream: StreamKey,
    after: Seq,
    max: usize,
    b: Bounds,
) -> Result<Vec<Event>, LogError> {
    let txn = db.begin_read().map_err(storage)?;
    let table = txn.open_table(EVENTS).map_err(storage)?;
    let n = stream.number();
    // Rows above the visible head may be committed but not yet published: never read them.
    let upper = b.head.min(after.saturating_add(max as u64));
    let mut out = Vec::with_capacity((upper - after) as usize);
    for row in table
        .range((id, n, after + 1)..=(id, n, upper))
        .map_err(storage)?
    {
        let (k, v) = row.map_err(storage)?;
        let (_, _, seq) = k.value();
        let (at_ms, message) = v.value();
        out.push(Event {
            seq,
            at_ms,
            message: Bytes::copy_from_slice(message),
        });
    }
    // Retention may have trimmed between the bounds check and this snapshot.
    if out.first().map(|e| e.seq) != Some(after + 1) || out.len() as u64 != upper - after {
        let now = hub.bounds(id, stream)?;
        return Err(LogError::Truncated {
            cursor: after,
            head: now.head,
            floor: now.floor,
        });
    }
    Ok(out)
}

fn load(db: &Database, hub: &Hub) -> Result<(), LogError> {
    // Make sure the tables exist, so a fresh file reads like an empty log.
    let w = db.begin_write().map_err(storage)?;
    w.open_table(SESSIONS).map_err(storage)?;
    w.open_table(STREAMS).map_err(storage)?;
    w.open_table(EVENTS).map_err(storage)?;
    w.commit().map_err(storage)?;

    let r = db.begin_read().map_err(storage)?;
    let sessions = r.open_table(SESSIONS).map_err(storage)?;
    let streams = r.open_table(STREAMS).map_err(storage)?;
    let events = r.open_table(EVENTS).map_err(storage)?;
    let mut states: HashMap<String, SessionState> = HashMap::new();
    for row in sessions.iter().map_err(storage)? {
        let (k, v) = row.map_err(storage)?;
        let id = k.value().to_owned();
        let rec = SessionRec::decode(&id, v.value())?;
        let mut st = SessionState::new(rec.created_ms, rec.meta, rec.next_request);
        if rec.ended {
            st.end();
        }
        states.insert(id, st);
    }
    for row in streams.iter().map_err(storage)? {
        let (k, v) = row.map_err(storage)?;
        let (id, n) = k.value();
        let (head, floor) = v.value();
        let st = states
            .get_mut(id)
            .ok_or_else(|| LogError::Corrupt(format!("stream {n} of unknown session {id:?}")))?;
        if floor > head + 1 {
            return Err(LogError::Corrupt(format!(
                "session {id:?} stream {n}: floor {floor} above head {head}"
            )));
        }
        // The rows must be exactly floor ..= head.
        let mut range = events
            .range((id, n, 0)..=(id, n, u64::MAX))
            .map_err(storage)?;
        let first = range
            .next()
            .transpose()
            .map_err(storage)?
            .map(|(k, _)| k.value().2);
        let last = range
            .next_back()
            .transpose()
            .map_err(storage)?
            .map(|(k, _)| k.value().2)
            .or(first);
        let want = if head >= floor {
            Some((floor, head))
        } else {
            None
        };
        if first.zip(last) != want {
            return Err(LogError::Corrupt(format!(
                "session {id:?} stream {n}: expected events {want:?}, found {:?}",
                first.zip(last)
            )));
        }
        if !st.ended {
            st.streams.insert(n, StreamState::new(head, floor));
        }
    }
    for (id, st) in states {
        hub.insert(&id, st)?;
    }
    Ok(())
}

struct Committer {
    db: Arc<Database>,
    hub: Arc<Hub>,
}

/// The state a batch sees: the hub's committed state plus this batch's writes.
#[derive(Default)]
struct Overlay {
    sessions: HashMap<String, SessionRec>,
    streams: HashMap<(String, u64), Bounds>,
}

impl Committer {
    fn run(self, rx: std_mpsc::Receiver<Op>) {
        while let Ok(first) = rx.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn session(&self, ov: &Overlay, id: &str) -> Result<SessionRec, LogError> {
        if let Some(rec) = ov.sessions.get(id) {
            return if rec.ended {
                Err(LogError::NoSession(id.to_owned()))
            } else {
                Ok(rec.clone())
            };
        }
        self.hub.with_live(id, |st| {
            Ok(SessionRec {
                created_ms: st.created_ms,
                next_request: st.next_request,
                ended: false,
                meta: st.meta.clone(),
            })
        })
    }

    fn stream(&self, ov: &Overlay, id: &str, key: StreamKey) -> Result<Bounds, LogError> {
        self.session(ov, id)?;
        match ov.streams.get(&(id.to_owned(), key.number())) {
            Some(b) => Ok(*b),
            None => self.hub.bounds(id, key),
        }
    }

    /// Where count retention (and `wanted`, for age) may move the floor, honouring pins.
    fn floor_after(&self, id: &str, key: StreamKey, b: Bounds, wanted: Option<Seq>) -> Seq {
        let max = self.hub.retention.max_events;
        let Ok(cell) = self.hub.cell(id) else {
            return b.floor;
        };
        let mut st = lock(&cell);
        let by_count = st.count_floor(key, b.head, b.floor, max);
        match (wanted, st.pinned(key)) {
            (Some(w), Some(pin)) => by_count.max(w.min(pin.max(b.floor))),
            (Some(w), None) => by_count.max(w),
            (None, _) => by_count,
        }
    }

    fn commit(&self, batch: Vec<Op>) {
        let mut ov = Overlay::default();
        let mut done: Vec<(Op, Result<Effect, LogError>)> = Vec::with_capacity(batch.len());
        let txn = match self.db.begin_write() {
            Ok(t) => t,
            Err(e) => return fail_all(batch, storage(e)),
        };
        let result: Result<(), redb::Error> = (|| {
            let mut sessions = txn.open_table(SESSIONS)?;
            let mut streams = txn.open_table(STREAMS)?;
            let mut events = txn.open_table(EVENTS)?;
            for op in batch {
                let effect = match &op {
                    Op::Create { id, meta, .. } => {
                        if ov.sessions.contains_key(id) || self.hub.cell(id).is_ok() {
                            Err(LogError::SessionExists(id.clone()))
                        } else {
                            let rec = SessionRec {
                                created_ms: now_ms(),
                                next_request: 1,
                                ended: false,
                                meta: meta.clone(),
                            };
                            sessions.insert(id.as_str(), rec.encode().as_slice())?;
                            streams.insert((id.as_str(), 0), (0, 1))?;
                            ov.streams
                                .insert((id.clone(), 0), Bounds { head: 0, floor: 1 });
                            let created = rec.created_ms;
                            ov.sessions.insert(id.clone(), rec);
                            Ok(Effect::Created(id.clone(), created, meta.clone()))
                        }
                    }
                    Op::SetMeta { id, meta, .. } => match self.session(&ov, id) {
                        Ok(mut rec) => {
                            rec.meta = meta.clone();
                            sessions.insert(id.as_str(), rec.encode().as_slice())?;
                            ov.sessions.insert(id.clone(), rec);
                            Ok(Effect::Meta(id.clone(), meta.clone()))
                        }
                        Err(e) => Err(e),
                    },
                    Op::End { id, .. } => match self.session(&ov, id) {
                        Ok(mut rec) => {
                            rec.ended = true;
                            rec.meta = Bytes::new();
                            sessions.insert(id.as_str(), rec.encode().as_slice())?;
                            streams
                                .retain_in((id.as_str(), 0)..=(id.as_str(), u64::MAX), |_, _| {
                                    false
                                })?;
                            events.retain_in(
                                (id.as_str(), 0, 0)..=(id.as_str(), u64::MAX, u64::MAX),
                                |_, _| false,
                            )?;
                            ov.sessions.insert(id.clone(), rec);
                            Ok(Effect::Ended(id.clone()))
                        }
                        Err(e) => Err(e),
                    },
                    Op::OpenRequest { id, .. } => match self.session(&ov, id) {
                        Ok(mut rec) => {
                            let r = rec.next_request;
                            rec.next_request += 1;
                            sessions.insert(id.as_str(), rec.encode().as_slice())?;
                            streams.insert((id.as_str(), r), (0, 1))?;
                            ov.streams
                                .insert((id.clone(), r), Bounds { head: 0, floor: 1 });
                            ov.sessions.insert(id.clone(), rec);
                            Ok(Effect::Opened(id.clone(), r))
                        }
                        Err(e) => Err(e),
                    },
                    Op::Append {
                        id,
                        stream,
                        messages,
                        ..
                    } => match self.stream(&ov, id, *stream) {
                        Ok(b) => {
                            let n = stream.number();
                            let at_ms = now_ms();
                            let mut evs = Vec::with_capacity(messages.len());
                            for (message, seq) in messages.iter().zip(b.head + 1..) {
                                events.insert((id.as_str(), n, seq), (at_ms, message.as_ref()))?;
                                evs.push(Event {
                                    seq,
                                    at_ms,
                                    message: message.clone(),
                                });
                            }
                            let head = b.head + evs.len() as u64;
                            let floor = self.floor_after(
                                id,
                                *stream,
                                Bounds {
                                    head,
                                    floor: b.floor,
                                },
                                None,
                            );
                            if floor > b.floor {
                                events.retain_in(
                                    (id.as_str(), n, b.floor)..(id.as_str(), n, floor),
                                    |_, _| false,
                                )?;
                            }
                            streams.insert((id.as_str(), n), (head, floor))?;
                            ov.streams.insert((id.clone(), n), Bounds { head, floor });
                            Ok(Effect::Published(id.clone(), *stream, evs, floor))
                        }
                        Err(e) => Err(e),
                    },
                    Op::Trim {
                        id,
                        stream,
                        floor: wanted,
                        ..
                    } => match self.stream(&ov, id, *stream) {
                        Ok(b) => {
                            let n = stream.number();
                            let floor =
                                self.floor_after(id, *stream, b, Some((*wanted).min(b.head + 1)));
                            if floor > b.floor {
                                events.retain_in(
                                    (id.as_str(), n, b.floor)..(id.as_str(), n, floor),
                                    |_, _| false,
                                )?;
                                streams.insert((id.as_str(), n), (b.head, floor))?;
                                ov.streams.insert(
                                    (id.clone(), n),
                                    Bounds {
                                        head: b.head,
                                        floor,
                                    },
                                );
                            }
                            Ok(Effect::Published(id.clone(), *stream, Vec::new(), floor))
                        }
                        Err(e) => Err(e),
                    },
                };
                done.push((op, effect));
            }
            Ok(())
        })();
        let result = result
            .map_err(storage)
            .and_then(|()| txn.commit().map_err(storage));
        if let Err(e) = result {
            tracing::error!(error = %e, "log commit failed; nothing of this batch is visible");
            return fail_all(done.into_iter().map(|(op, _)| op).collect(), e);
        }
        // Durable now: make it visible, in commit order, then answer.
        for (op, effect) in done {
            if let Ok(effect) = &effect {
                self.apply(effect);
            }
            respond(op, effect);
        }
    }

    fn apply(&self, effect: &Effect) {
        let cache = self.hub.cache_limit();
        let _ = match effect {
            Effect::Created(id, created, meta) => self
                .hub
                .insert(id, SessionState::new(*created, meta.clone(), 1)),
            Effect::Meta(id, meta) => self.hub.with_live(id, |st| {
                st.meta = meta.clone();
                Ok(())
            }),
            Effect::Ended(id) => self.hub.with_live(id, |st| {
                st.end();
                Ok(())
            }),
            Effect::Opened(id, r) => self.hub.with_live(id, |st| {
                st.next_request = st.next_request.max(r + 1);
                st.streams.insert(*r, StreamState::new(0, 1));
                Ok(())
            }),
            Effect::Published(id, key, evs, floor) => self.hub.with_live(id, |st| {
                st.publish(*key, evs.clone(), *floor, cache);
                Ok(())
            }),
        };
    }
}

fn respond(op: Op, effect: Result<Effect, LogError>) {
    match op {
        Op::Create { reply, .. }
        | Op::SetMeta { reply, .. }
        | Op::End { reply, .. }
        | Op::Trim { reply, .. } => {
            let _ = reply.send(effect.map(|_| ()));
        }
        Op::OpenRequest { reply, .. } => {
            let _ = reply.send(effect.map(|e| match e {
                Effect::Opened(_, r) => r,
                _ => 0,
            }));
        }
        Op::Append { reply, .. } => {
            let _ = reply.send(effect.map(|e| match e {
                Effect::Published(_, _, evs, _) => evs.last().map(|e| e.seq).unwrap_or(0),
                _ => 0,
            }));
        }
    }
}

fn fail_all(batch: Vec<Op>, e: LogError) {
    for op in batch {
        respond(op, Err(e.clone()));
    }
}

#[async_trait]
impl Log for DiskLog {
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
            reply,
        })
        .await
    }

    async fn touch(&self, id: &str) -> Result<(), LogError> {
        self.hub.touch(id)
    }

    async fn end_session(&self, id: &str) -> Result<(), LogError> {
        self.submit(|reply| Op::End {
            id: id.to_owned(),
            reply,
        })
        .await
    }

    async fn open_request_stream(&self, id: &str) -> Result<u64, LogError> {
        self.submit(|reply| Op::OpenRequest {
            id: id.to_owned(),
            reply,
        })
        .await
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
        match self.hub.read_cached(id, stream, after, max)? {
            Cached::Hit(events) => Ok(events),
            Cached::Miss(b) => {
                let (id, db, hub) = (id.to_owned(), self.db.clone(), self.hub.clone());
                tokio::task::spawn_blocking(move || {
                    read_events(&db, &hub, &id, stream, after, max, b)
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
        self.hub.pin(id, stream, seq, ttl)
    }

    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        self.hub.unpin(id, pin)
    }

    async fn maintain(&self, idle: Duration) -> Result<Vec<String>, LogError> {
        let cutoff = now_ms().saturating_sub(self.hub.retention.max_age.as_millis() as u64);
        for (id, cell) in self.hub.live_cells() {
            let keys: Vec<StreamKey> = lock(&cell)
                .streams
                .keys()
                .map(|n| StreamKey::from_number(*n))
                .collect();
            for key in keys {
                let Ok(b) = self.hub.bounds(&id, key) else {
                    continue;
                };
                // Oldest retained first: scan from the floor until an event is young enough.
                let mut after = b.floor.saturating_sub(1);
                let floor = loop {
                    let evs = match self.read(&id, key, after, 1024).await {
                        Ok(evs) if !evs.is_empty() => evs,
                        _ => break b.head + 1,
                    };
                    let f = age_floor(evs.iter(), b.head, cutoff);
                    if f <= evs.last().map(|e| e.seq).unwrap_or(0) {
                        break f;
                    }
                    after = evs.last().map(|e| e.seq).unwrap_or(after);
                };
                if floor > b.floor {
                    self.submit(|reply| Op::Trim {
                        id: id.clone(),
                        stream: key,
                        floor,
                        reply,
                    })
                    .await?;
                }
            }
        }
        let idle_ids = self.hub.idle_sessions(idle);
        for id in &idle_ids {
            let _ = self.end_session(id).await;
        }
        Ok(idle_ids)
    }

    async fn close(&self) -> Result<(), LogError> {
        self.hub.close_all();
        Ok(())
    }
}
