//! The committer thread: every write of the disk log, in fsync'd batches,
//! made visible in the hub only once durable.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use bytes::Bytes;
use fjall::PersistMode;
use tokio::sync::oneshot;

use super::heads::{Entry, HeadsWriter};
use super::pins::{pin_key, pins_of};
use super::store::*;
use crate::hub::{lock, Hub, SessionState, StreamState};
use crate::types::now_ms;
use crate::{Bounds, Event, LogError, PinId, Seq, StreamKey};

/// Most ops folded into one transaction.
const MAX_BATCH: usize = 8192;

/// Where the committer answers one op, once its batch is durable (or failed).
pub(super) type Reply<T> = oneshot::Sender<Result<T, LogError>>;

/// One write asked of the committer; every write of the disk log is one.
pub(super) enum Op {
    Create {
        id: String,
        meta: Bytes,
        reply: Reply<()>,
    },
    /// Answers 1 if it replaced the record, 0 if `expect` did not match.
    SetMeta {
        id: String,
        meta: Bytes,
        expect: Option<Bytes>,
        reply: Reply<u64>,
    },
    End {
        id: String,
        reply: Reply<()>,
    },
    OpenRequest {
        id: String,
        meta: Bytes,
        reply: Reply<u64>,
    },
    Append {
        id: String,
        stream: StreamKey,
        messages: Vec<Bytes>,
        reply: Reply<Seq>,
    },
    /// Drops ended sessions (tombstones) from storage, then from the hub.
    Forget {
        ids: Vec<String>,
        reply: Reply<()>,
    },
    Trim {
        id: String,
        stream: StreamKey,
        floor: Seq,
        reply: Reply<()>,
    },
    /// Stores a pin the hub holds (`None`: removes it), so it outlives a restart.
    Pin {
        id: String,
        pin: PinId,
        value: Option<[u8; 24]>,
        reply: Reply<()>,
    },
}

/// What a committed op changes in the hub, applied after the fsync.
enum Effect {
    Created(String, u64, Bytes),
    Meta(String, Bytes),
    Ended(String),
    Opened(String, u64, Bytes),
    Published(String, StreamKey, Vec<Event>, Seq),
    Forgotten(Vec<String>),
    /// Nothing to show: a stored pin, or a record whose compare-and-set did not match.
    Stored,
}

/// The one writer: owns every write so batches can share one fsync.
pub(super) struct Committer {
    pub store: Store,
    pub hub: Arc<Hub>,
    /// The committed-heads record, appended after every batch's fsync.
    pub heads: HeadsWriter,
}

/// The state a batch sees: the hub's committed state plus this batch's writes.
#[derive(Default)]
struct Overlay {
    sessions: HashMap<String, SessionRec>,
    streams: HashMap<(String, u64), Bounds>,
}

impl Committer {
    /// Commits batches of whatever is queued until every sender is gone.
    pub fn run(mut self, rx: std_mpsc::Receiver<Op>) {
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
                ended_ms: 0,
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

    fn commit(&mut self, batch: Vec<Op>) {
        let st = &self.store;
        let mut ov = Overlay::default();
        let mut done: Vec<(Op, Result<Effect, LogError>)> = Vec::with_capacity(batch.len());
        let mut wb = st.db.batch().durability(Some(PersistMode::SyncAll));
        // Event ranges this batch writes, per session, so an `End` later in it removes them too.
        let mut written: HashMap<String, Vec<(u64, Seq, Seq)>> = HashMap::new();
        // Request records this batch writes, likewise.
        let mut opened: HashMap<String, Vec<u64>> = HashMap::new();
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
                            ended_ms: 0,
                            meta: meta.clone(),
                        };
                        let b = Bounds::new(0, 1);
                        wb.insert(&st.sessions, id.as_bytes(), rec.encode());
                        wb.insert(&st.streams, stream_key(id, 0), bounds_value(b));
                        ov.streams.insert((id.clone(), 0), b);
                        let created = rec.created_ms;
                        ov.sessions.insert(id.clone(), rec);
                        Ok(Effect::Created(id.clone(), created, meta.clone()))
                    }
                }
                Op::SetMeta {
                    id, meta, expect, ..
                } => self.session(&ov, id).map(|mut rec| {
                    if expect.as_ref().is_some_and(|e| *e != rec.meta) {
                        return Effect::Stored; // answers 0: not replaced
                    }
                    rec.meta = meta.clone();
                    wb.insert(&st.sessions, id.as_bytes(), rec.encode());
                    ov.sessions.insert(id.clone(), rec);
                    Effect::Meta(id.clone(), meta.clone())
                }),
                Op::End { id, .. } => match self.session(&ov, id) {
                    Ok(mut rec) => {
                        rec.ended = true;
                        rec.ended_ms = now_ms();
                        rec.meta = Bytes::new();
                        wb.insert(&st.sessions, id.as_bytes(), rec.encode());
                        let prefix = session_prefix(id);
                        let mut doomed: Vec<Vec<u8>> = written
                            .remove(id)
                            .unwrap_or_default()
                            .into_iter()
                            .flat_map(|(n, first, last)| {
                                (first..=last).map(move |seq| event_key(id, n, seq))
                            })
                            .collect();
                        let mut records: Vec<Vec<u8>> = opened
                            .remove(id)
                            .unwrap_or_default()
                            .into_iter()
                            .map(|r| stream_key(id, r))
                            .collect();
                        for (ks, record) in [
                            (&st.streams, false),
                            (&st.events, false),
                            (&st.requests, true),
                        ] {
                            for kv in ks.prefix(&prefix) {
                                match kv.key() {
                                    Ok(k) if record => records.push(k.to_vec()),
                                    Ok(k) => doomed.push(k.to_vec()),
                                    Err(e) => {
                                        return fail_all(
                                            done.into_iter()
                                                .map(|(op, _)| op)
                                                .chain([op])
                                                .collect(),
                                            storage(e),
                                        )
                                    }
                                }
                            }
                        }
                        for k in doomed {
                            wb.remove(&st.events, k.clone());
                            wb.remove(&st.streams, k);
                        }
                        for k in records {
                            wb.remove(&st.requests, k);
                        }
                        for k in pins_of(st, id) {
                            wb.remove(&st.pins, k);
                        }
                        ov.sessions.insert(id.clone(), rec);
                        Ok(Effect::Ended(id.clone()))
                    }
                    Err(e) => Err(e),
                },
                Op::OpenRequest { id, meta, .. } => self.session(&ov, id).map(|mut rec| {
                    let r = rec.next_request;
                    rec.next_request += 1;
                    let b = Bounds::new(0, 1);
                    wb.insert(&st.sessions, id.as_bytes(), rec.encode());
                    wb.insert(&st.streams, stream_key(id, r), bounds_value(b));
                    // The call's record, in the same fsync'd batch as its stream.
                    wb.insert(&st.requests, stream_key(id, r), meta.as_ref());
                    opened.entry(id.clone()).or_default().push(r);
                    ov.streams.insert((id.clone(), r), b);
                    ov.sessions.insert(id.clone(), rec);
                    Effect::Opened(id.clone(), r, meta.clone())
                }),
                Op::Append {
                    id,
                    stream,
                    messages,
                    ..
                } => self.stream(&ov, id, *stream).map(|b| {
                    let n = stream.number();
                    let at_ms = now_ms();
                    let mut evs = Vec::with_capacity(messages.len());
                    for (message, seq) in messages.iter().zip(b.head + 1..) {
                        wb.insert(
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
                        written
                            .entry(id.clone())
                            .or_default()
                            .push((n, b.head + 1, last.seq));
                    }
                    let head = b.head + evs.len() as u64;
                    let floor = self.floor_after(id, *stream, Bounds { head, ..b }, None);
                    let after = Bounds { head, ..b }.with_floor(floor);
                    for seq in b.floor..floor {
                        wb.remove(&st.events, event_key(id, n, seq));
                    }
                    if n > 0 && head > 0 && floor > head {
                        wb.remove(&st.requests, stream_key(id, n));
                    }
                    wb.insert(&st.streams, stream_key(id, n), bounds_value(after));
                    ov.streams.insert((id.clone(), n), after);
                    Effect::Published(id.clone(), *stream, evs, floor)
                }),
                Op::Forget { ids, .. } => {
                    let mut gone = Vec::with_capacity(ids.len());
                    for id in ids {
                        // Only a tombstone the hub holds, not one re-created in this batch.
                        let ended = self.hub.cell(id).is_ok_and(|c| lock(&c).ended);
                        if !ended || ov.sessions.contains_key(id) {
                            continue;
                        }
                        wb.remove(&st.sessions, id.as_bytes());
                        // Ending removed its streams; sweep anything left behind.
                        let prefix = session_prefix(id);
                        for ks in [&st.streams, &st.requests, &st.pins] {
                            for k in ks.prefix(&prefix).filter_map(|kv| kv.key().ok()) {
                                wb.remove(ks, k.to_vec());
                            }
                        }
                        gone.push(id.clone());
                    }
                    Ok(Effect::Forgotten(gone))
                }
                Op::Trim {
                    id,
                    stream,
                    floor: wanted,
                    ..
                } => self.stream(&ov, id, *stream).map(|b| {
                    let n = stream.number();
                    let floor = self.floor_after(id, *stream, b, Some((*wanted).min(b.head + 1)));
                    if floor > b.floor {
                        for seq in b.floor..floor {
                            wb.remove(&st.events, event_key(id, n, seq));
                        }
                        if n > 0 && b.head > 0 && floor > b.head {
                            // The call's record goes with its last event.
                            wb.remove(&st.requests, stream_key(id, n));
                        }
                        let after = b.with_floor(floor);
                        wb.insert(&st.streams, stream_key(id, n), bounds_value(after));
                        ov.streams.insert((id.clone(), n), after);
                    }
                    Effect::Published(id.clone(), *stream, Vec::new(), floor)
                }),
                Op::Pin { id, pin, value, .. } => match value {
                    Some(v) => self.session(&ov, id).map(|_| {
                        wb.insert(&st.pins, pin_key(id, *pin), v.as_slice());
                    }),
                    None => {
                        wb.remove(&st.pins, pin_key(id, *pin));
                        Ok(())
                    }
                }
                .map(|_| Effect::Stored),
            };
            done.push((op, effect));
        }
        // One atomic batch, one fsync of the journal, for everything above.
        if let Err(e) = wb.commit() {
            let e = storage(e);
            tracing::error!(error = %e, "log commit failed; nothing of this batch is visible");
            return fail_all(done.into_iter().map(|(op, _)| op).collect(), e);
        }
        // Durable now. First the committed-heads record, so nothing is
        // visible that it does not cover; then visible, in commit order, and answered.
        let mut entries = Vec::new();
        for (_, effect) in &done {
            if let Ok(effect) = effect {
                heads_entries(effect, &mut entries);
            }
        }
        let rotate = self.heads.append(&entries).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not append to the committed-heads record; rewriting it");
            true
        });
        for (op, effect) in done {
            let answer = effect.map(|e| self.apply(e));
            respond(op, answer);
        }
        if rotate {
            if let Err(e) = self.heads.rotate(&snapshot(&self.hub)) {
                tracing::error!(error = %e, "could not rewrite the committed-heads record");
            }
        }
    }

    /// Makes one committed effect visible; returns what its op answers
    /// (the last seq of an append, the number of a request stream).
    fn apply(&self, effect: Effect) -> u64 {
        let cache = self.hub.cache_limit();
        let mut answer = 0;
        let _ = match effect {
            Effect::Created(id, created, meta) => {
                self.hub.insert(&id, SessionState::new(created, meta, 1))
            }
            Effect::Meta(id, meta) => {
                answer = 1;
                self.hub.with_live(&id, |st| {
                    st.meta = meta;
                    Ok(())
                })
            }
            Effect::Ended(id) => self.hub.end(&id),
            Effect::Forgotten(ids) => {
                self.hub.forget(&ids);
                Ok(())
            }
            Effect::Stored => Ok(()),
            Effect::Opened(id, r, meta) => {
                answer = r;
                self.hub.with_live(&id, |st| {
                    st.next_request = st.next_request.max(r + 1);
                    st.streams.insert(r, StreamState::opened(meta));
                    Ok(())
                })
            }
            Effect::Published(id, key, evs, floor) => {
                answer = evs.last().map(|e| e.seq).unwrap_or(0);
                self.hub.with_live(&id, |st| {
                    st.publish(key, evs, floor, cache);
                    Ok(())
                })
            }
        };
        answer
    }
}

/// Adds what one committed effect changes to the committed-heads record's `out`.
fn heads_entries(effect: &Effect, out: &mut Vec<Entry>) {
    let head = |id: &String, stream: u64, head: Seq| Entry::Head {
        id: id.clone(),
        stream,
        head,
    };
    match effect {
        Effect::Created(id, ..) => out.push(head(id, 0, 0)),
        Effect::Opened(id, r, _) => out.push(head(id, *r, 0)),
        Effect::Published(id, key, evs, _) => {
            out.extend(evs.last().map(|e| head(id, key.number(), e.seq)))
        }
        Effect::Ended(id) => out.push(Entry::Ended { id: id.clone() }),
        Effect::Forgotten(ids) => {
            out.extend(ids.iter().map(|id| Entry::Forgotten { id: id.clone() }))
        }
        Effect::Meta(..) | Effect::Stored => {}
    }
}

/// Every session the hub knows, as committed-heads entries: the heads of
/// a live session's streams (retired ones too), the end of an ended one.
pub(super) fn snapshot(hub: &Hub) -> Vec<Entry> {
    let mut out = Vec::new();
    for (id, heads) in hub.heads() {
        match heads {
            None => out.push(Entry::Ended { id }),
            Some(streams) => out.extend(streams.into_iter().map(|(stream, head)| Entry::Head {
                id: id.clone(),
                stream,
                head,
            })),
        }
    }
    out
}

fn respond(op: Op, answer: Result<u64, LogError>) {
    match op {
        Op::Create { reply, .. }
        | Op::End { reply, .. }
        | Op::Forget { reply, .. }
        | Op::Trim { reply, .. }
        | Op::Pin { reply, .. } => {
            let _ = reply.send(answer.map(|_| ()));
        }
        Op::OpenRequest { reply, .. } | Op::Append { reply, .. } | Op::SetMeta { reply, .. } => {
            let _ = reply.send(answer);
        }
    }
}

/// Answers every op of a batch that could not be committed with the same error.
pub(super) fn fail_all(batch: Vec<Op>, e: LogError) {
    for op in batch {
        respond(op, Err(e.clone()));
    }
}
