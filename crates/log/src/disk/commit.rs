//! The committer thread: every write of the disk log, in fsync'd batches,
//! made visible in the hub only once durable.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::batch::Batch;
use super::heads::{Entry, HeadsWriter};
use super::store::*;
use crate::hub::{Hub, SessionState, StreamState};
use crate::{Event, LogError, PinId, Seq, StreamKey};

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
        /// `EventLog::open_request_stream`'s limit: past it, nothing is written.
        max: u64,
        reply: Reply<u64>,
    },
    Append {
        id: String,
        stream: StreamKey,
        messages: Vec<Bytes>,
        /// `EventLog::append_once`'s key: a repeat appends nothing.
        key: Option<u64>,
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

/// What reaches the committer: one op, or ops that must be staged in the
/// same batch, in order (one commit for all of them, whatever else is queued).
pub(super) enum Sent {
    One(Op),
    Together([Op; 2]),
}

/// What a committed op changes in the hub, applied after the fsync.
pub(super) enum Effect {
    Created(String, u64, Bytes),
    Meta(String, Bytes),
    Ended(String),
    Opened(String, u64, Bytes),
    /// Events appended (and the key they were appended under), the new floor.
    Published(String, StreamKey, Vec<Event>, Seq, Option<u64>),
    /// A keyed append whose key was used already: the head that one left.
    Repeated(Seq),
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

impl Committer {
    /// Commits batches of whatever is queued until every sender is gone.
    pub fn run(mut self, rx: std_mpsc::Receiver<Sent>) {
        let add = |batch: &mut Vec<Op>, sent: Sent| match sent {
            Sent::One(op) => batch.push(op),
            Sent::Together(ops) => batch.extend(ops),
        };
        while let Ok(first) = rx.recv() {
            let mut batch = Vec::new();
            add(&mut batch, first);
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(sent) => add(&mut batch, sent),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    fn commit(&mut self, batch: Vec<Op>) {
        let mut staged = Batch::new(&self.store, &self.hub);
        let mut done: Vec<(Op, Result<Effect, LogError>)> = Vec::with_capacity(batch.len());
        for op in batch {
            match staged.stage(&op) {
                Ok(effect) => done.push((op, effect)),
                Err(e) => {
                    // The storage could not be read: nothing of the batch is written.
                    let ops = done.into_iter().map(|(op, _)| op).chain([op]).collect();
                    return fail_all(ops, e);
                }
            }
        }
        let wb = staged.into_write_batch();
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
                    st.streams.insert(r, Box::new(StreamState::opened(meta)));
                    Ok(())
                })
            }
            Effect::Published(id, key, evs, floor, once) => {
                answer = evs.last().map(|e| e.seq).unwrap_or(0);
                self.hub.with_live(&id, |st| {
                    st.publish(key, evs, floor, cache);
                    if let Some(k) = once {
                        st.remember_keyed(key, k, answer);
                    }
                    Ok(())
                })
            }
            Effect::Repeated(head) => {
                answer = head;
                Ok(())
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
        Effect::Published(id, key, evs, _, _) => {
            out.extend(evs.last().map(|e| head(id, key.number(), e.seq)))
        }
        Effect::Ended(id) => out.push(Entry::Ended { id: id.clone() }),
        Effect::Forgotten(ids) => {
            out.extend(ids.iter().map(|id| Entry::Forgotten { id: id.clone() }))
        }
        Effect::Meta(..) | Effect::Stored | Effect::Repeated(_) => {}
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
