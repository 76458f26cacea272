//! One batch of the committer: what each op writes, one function per kind
//! of op, staged in one fjall write batch (one fsync) over an overlay of
//! what the ops before it in the batch wrote.

use std::collections::HashMap;

use bytes::Bytes;
use fjall::{OwnedWriteBatch as WriteBatch, PersistMode};

use super::commit::{Effect, Op};
use super::pins::{pin_key, pins_of};
use super::store::*;
use crate::hub::{lock, Hub};
use crate::types::now_ms;
use crate::{Bounds, Event, LogError, PinId, Seq, StreamKey};

/// The state a batch sees: the hub's committed state plus this batch's writes.
#[derive(Default)]
struct Overlay {
    sessions: HashMap<String, SessionRec>,
    streams: HashMap<(String, u64), Bounds>,
}

/// The writes of one batch, not yet committed.
pub(super) struct Batch<'a> {
    st: &'a Store,
    hub: &'a Hub,
    wb: WriteBatch,
    ov: Overlay,
    /// Event ranges this batch writes, per session, so an `End` later in it
    /// removes them too.
    written: HashMap<String, Vec<(u64, Seq, Seq)>>,
    /// Request records this batch writes, likewise.
    opened: HashMap<String, Vec<u64>>,
    /// Keyed appends this batch writes: (session, stream, key) to the head.
    keyed: HashMap<(String, u64, u64), Seq>,
}

impl<'a> Batch<'a> {
    /// An empty batch, committed with one fsync.
    pub(super) fn new(st: &'a Store, hub: &'a Hub) -> Self {
        Self {
            st,
            hub,
            wb: st.db.batch().durability(Some(PersistMode::SyncAll)),
            ov: Overlay::default(),
            written: HashMap::new(),
            opened: HashMap::new(),
            keyed: HashMap::new(),
        }
    }

    /// What to commit.
    pub(super) fn into_write_batch(self) -> WriteBatch {
        self.wb
    }

    /// Stages `op`'s writes; its effect once committed, or why it is
    /// refused. `Err`: the storage could not be read, and the whole batch
    /// must fail.
    pub(super) fn stage(&mut self, op: &Op) -> Result<Result<Effect, LogError>, LogError> {
        Ok(match op {
            Op::Create { id, meta, .. } => self.create(id, meta),
            Op::SetMeta {
                id, meta, expect, ..
            } => self.set_meta(id, meta, expect.as_ref()),
            Op::End { id, .. } => return self.end(id),
            Op::OpenRequest { id, meta, max, .. } => self.open_request(id, meta, *max),
            Op::Append {
                id,
                stream,
                messages,
                key,
                ..
            } => self.append(id, *stream, messages, *key),
            Op::Forget { ids, .. } => Ok(self.forget(ids)),
            Op::Trim {
                id, stream, floor, ..
            } => self.trim(id, *stream, *floor),
            Op::Pin { id, pin, value, .. } => self.pin(id, *pin, value.as_ref()),
        })
    }

    fn create(&mut self, id: &str, meta: &Bytes) -> Result<Effect, LogError> {
        if self.ov.sessions.contains_key(id) || self.hub.cell(id).is_ok() {
            return Err(LogError::SessionExists(id.to_owned()));
        }
        let rec = SessionRec {
            created_ms: now_ms(),
            next_request: 1,
            ended: false,
            ended_ms: 0,
            meta: meta.clone(),
        };
        let b = Bounds::new(0, 1);
        self.wb
            .insert(&self.st.sessions, id.as_bytes(), rec.encode());
        self.wb
            .insert(&self.st.streams, stream_key(id, 0), bounds_value(b));
        self.ov.streams.insert((id.to_owned(), 0), b);
        let created = rec.created_ms;
        self.ov.sessions.insert(id.to_owned(), rec);
        Ok(Effect::Created(id.to_owned(), created, meta.clone()))
    }

    /// Replaces the record's meta (only if it is `expect`, when given).
    fn set_meta(
        &mut self,
        id: &str,
        meta: &Bytes,
        expect: Option<&Bytes>,
    ) -> Result<Effect, LogError> {
        let mut rec = self.session(id)?;
        if expect.is_some_and(|e| *e != rec.meta) {
            return Ok(Effect::Stored); // answers 0: not replaced
        }
        rec.meta = meta.clone();
        self.wb
            .insert(&self.st.sessions, id.as_bytes(), rec.encode());
        self.ov.sessions.insert(id.to_owned(), rec);
        Ok(Effect::Meta(id.to_owned(), meta.clone()))
    }

    /// Ends the session: its tombstone stays, its streams, events, request
    /// records and pins go (those written earlier in this batch too).
    fn end(&mut self, id: &str) -> Result<Result<Effect, LogError>, LogError> {
        let mut rec = match self.session(id) {
            Ok(rec) => rec,
            Err(e) => return Ok(Err(e)),
        };
        let st = self.st;
        rec.ended = true;
        rec.ended_ms = now_ms();
        rec.meta = Bytes::new();
        self.wb.insert(&st.sessions, id.as_bytes(), rec.encode());
        let prefix = session_prefix(id);
        // Each key is removed from the keyspace that holds it: a removal
        // is a tombstone in that keyspace's memtable until it is written
        // out, so one written where the key never was only holds memory
        // (the events' memtable, 8 MiB, is written out rarely: session
        // churn grew a server by it, benches/results/churn.md).
        let mut events: Vec<fjall::Slice> = self
            .written
            .remove(id)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|(n, first, last)| (first..=last).map(move |seq| event_key(id, n, seq)))
            .collect();
        // Stream records written earlier in this batch are not read back
        // here: forgetting the session sweeps them.
        let mut streams: Vec<Vec<u8>> = Vec::new();
        let mut records: Vec<Vec<u8>> = self
            .opened
            .remove(id)
            .unwrap_or_default()
            .into_iter()
            .map(|r| stream_key(id, r))
            .collect();
        for kv in st.events.prefix(&prefix) {
            // A copy: a key read back may be a view into its whole data
            // block (values included), held until the commit.
            events.push(fjall::Slice::new(&kv.key().map_err(storage)?));
        }
        for (ks, keys) in [(&st.streams, &mut streams), (&st.requests, &mut records)] {
            for kv in ks.prefix(&prefix) {
                keys.push(kv.key().map_err(storage)?.to_vec());
            }
        }
        for k in events {
            self.wb.remove(&st.events, k);
        }
        for k in streams {
            self.wb.remove(&st.streams, k);
        }
        for k in records {
            self.wb.remove(&st.requests, k);
        }
        for k in pins_of(st, id) {
            self.wb.remove(&st.pins, k);
        }
        self.ov.sessions.insert(id.to_owned(), rec);
        Ok(Ok(Effect::Ended(id.to_owned())))
    }

    /// Opens the session's next request stream, with its call's record.
    fn open_request(&mut self, id: &str, meta: &Bytes, max: u64) -> Result<Effect, LogError> {
        let mut rec = self.session(id)?;
        let st = self.st;
        let r = rec.next_request;
        if r > max {
            return Err(LogError::TooManyStreams {
                session: id.to_owned(),
                max,
            });
        }
        rec.next_request += 1;
        let b = Bounds::new(0, 1);
        self.wb.insert(&st.sessions, id.as_bytes(), rec.encode());
        self.wb
            .insert(&st.streams, stream_key(id, r), bounds_value(b));
        // The call's record, in the same fsync'd batch as its stream.
        self.wb
            .insert(&st.requests, stream_key(id, r), meta.as_ref());
        self.opened.entry(id.to_owned()).or_default().push(r);
        self.ov.streams.insert((id.to_owned(), r), b);
        self.ov.sessions.insert(id.to_owned(), rec);
        Ok(Effect::Opened(id.to_owned(), r, meta.clone()))
    }

    /// Appends `messages` after the stream's head, trimming by count; under
    /// a `key` used already (in this batch, or among the session's last
    /// keyed appends the hub remembers), nothing: the head that one left.
    fn append(
        &mut self,
        id: &str,
        stream: StreamKey,
        messages: &[Bytes],
        key: Option<u64>,
    ) -> Result<Effect, LogError> {
        if let Some(k) = key {
            let staged = self.keyed.get(&(id.to_owned(), stream.number(), k));
            let committed = || {
                let cell = self.hub.cell(id).ok()?;
                let st = lock(&cell);
                st.keyed_head(stream, k)
            };
            if let Some(head) = staged.copied().or_else(committed) {
                return Ok(Effect::Repeated(head));
            }
        }
        let b = self.stream(id, stream)?;
        let st = self.st;
        let n = stream.number();
        let at_ms = now_ms();
        let mut evs = Vec::with_capacity(messages.len());
        for (message, seq) in messages.iter().zip(b.head + 1..) {
            self.wb.insert(
                &st.events,
                event_key(id, n, seq),
                event_value(at_ms, message),
            );
            evs.push(Event {
                seq,
                at_ms,
                message: message.clone(),
            });
        }
        if let Some(last) = evs.last() {
            self.written
                .entry(id.to_owned())
                .or_default()
                .push((n, b.head + 1, last.seq));
        }
        let head = b.head + evs.len() as u64;
        let floor = self.floor_after(id, stream, Bounds { head, ..b }, None);
        let after = Bounds { head, ..b }.with_floor(floor);
        for seq in b.floor..floor {
            self.wb.remove(&st.events, event_key(id, n, seq));
        }
        if n > 0 && head > 0 && floor > head {
            self.wb.remove(&st.requests, stream_key(id, n));
        }
        self.wb
            .insert(&st.streams, stream_key(id, n), bounds_value(after));
        self.ov.streams.insert((id.to_owned(), n), after);
        if let Some(k) = key {
            self.keyed.insert((id.to_owned(), n, k), head);
        }
        Ok(Effect::Published(id.to_owned(), stream, evs, floor, key))
    }

    /// Drops ended sessions (tombstones the hub holds) from storage.
    fn forget(&mut self, ids: &[String]) -> Effect {
        let st = self.st;
        let mut gone = Vec::with_capacity(ids.len());
        for id in ids {
            // Only a tombstone the hub holds, not one re-created in this batch.
            let ended = self.hub.cell(id).is_ok_and(|c| lock(&c).ended);
            if !ended || self.ov.sessions.contains_key(id) {
                continue;
            }
            self.wb.remove(&st.sessions, id.as_bytes());
            // Ending removed its streams; sweep anything left behind.
            let prefix = session_prefix(id);
            for ks in [&st.streams, &st.requests, &st.pins] {
                for k in ks.prefix(&prefix).filter_map(|kv| kv.key().ok()) {
                    self.wb.remove(ks, k.to_vec());
                }
            }
            gone.push(id.clone());
        }
        Effect::Forgotten(gone)
    }

    /// Moves the stream's floor up to `wanted` (age retention), never past a pin.
    fn trim(&mut self, id: &str, stream: StreamKey, wanted: Seq) -> Result<Effect, LogError> {
        let b = self.stream(id, stream)?;
        let st = self.st;
        let n = stream.number();
        let floor = self.floor_after(id, stream, b, Some(wanted.min(b.head + 1)));
        if floor > b.floor {
            for seq in b.floor..floor {
                self.wb.remove(&st.events, event_key(id, n, seq));
            }
            if n > 0 && b.head > 0 && floor > b.head {
                // The call's record goes with its last event.
                self.wb.remove(&st.requests, stream_key(id, n));
            }
            let after = b.with_floor(floor);
            self.wb
                .insert(&st.streams, stream_key(id, n), bounds_value(after));
            self.ov.streams.insert((id.to_owned(), n), after);
        }
        Ok(Effect::Published(
            id.to_owned(),
            stream,
            Vec::new(),
            floor,
            None,
        ))
    }

    /// Stores a pin (`None`: removes it).
    fn pin(&mut self, id: &str, pin: PinId, value: Option<&[u8; 24]>) -> Result<Effect, LogError> {
        match value {
            Some(v) => {
                self.session(id)?;
                self.wb
                    .insert(&self.st.pins, pin_key(id, pin), v.as_slice());
            }
            None => self.wb.remove(&self.st.pins, pin_key(id, pin)),
        }
        Ok(Effect::Stored)
    }

    /// The session's record as this batch sees it; a refusal if it is not live.
    fn session(&self, id: &str) -> Result<SessionRec, LogError> {
        if let Some(rec) = self.ov.sessions.get(id) {
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
                ended_ms: 0,
                meta: st.meta.clone(),
            })
        })
    }

    /// The stream's bounds as this batch sees them.
    fn stream(&self, id: &str, key: StreamKey) -> Result<Bounds, LogError> {
        self.session(id)?;
        match self.ov.streams.get(&(id.to_owned(), key.number())) {
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
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::{DiskLog, EventLog, Retention, SessionRecords, StreamKey};

    /// An end removes each key from the keyspace that held it: a removal
    /// where the key never was is a tombstone held in memory until its
    /// memtable is written out (the events' is written out rarely), and
    /// ending sessions by the thousand grew a server by them
    /// (benches/results/churn.md).
    #[tokio::test]
    async fn an_end_removes_keys_only_where_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
        log.create_session("quiet", Bytes::new()).await.unwrap();
        log.create_session("busy", Bytes::new()).await.unwrap();
        for _ in 0..5 {
            let one = vec![Bytes::from_static(b"{}")];
            log.append("busy", StreamKey::Session, one).await.unwrap();
        }
        // Items in each keyspace, its removals included.
        let items = || {
            let s = &log.store;
            (s.events.approximate_len(), s.streams.approximate_len())
        };
        let (events, streams) = items();
        log.end_session("quiet").await.unwrap();
        assert_eq!(
            items(),
            (events, streams + 1),
            "a session without events: its stream's record removed, nothing in the events'"
        );
        log.end_session("busy").await.unwrap();
        assert_eq!(
            items(),
            (events + 5, streams + 2),
            "five events removed from the events', one stream's record from the streams'"
        );
        assert!(log.read("busy", StreamKey::Session, 0, 10).await.is_err());
    }
}
