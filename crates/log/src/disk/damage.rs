//! What an open does with the committed-heads record: compare it with what
//! fjall recovered and, where the journal went less far than the record says
//! commits went, keep the heads and mark the lost ranges, durably, before
//! anything is served (docs/protocol.md 6.1). A seq is never reused.

use std::path::Path;

use bytes::Bytes;
use fjall::PersistMode;

use super::heads::Recorded;
use super::store::{
    bounds_value, decode_bounds, event_key, session_prefix, storage, stream_key, SessionRec, Store,
    HEADS_KEPT,
};
use crate::hub::Hub;
use crate::types::now_ms;
use crate::{Bounds, LogError, Seq, StreamKey};

/// Damage to a disk log: committed state its files no longer hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The session it belongs to.
    pub session: String,
    /// What is gone, and what the log does about it.
    pub kind: DamageKind,
}

/// What is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// Committed events `from ..= to` of `stream` are gone; the stream keeps
    /// its head, and readers that need them get `409` `data-lost`.
    EventsLost {
        /// The stream.
        stream: StreamKey,
        /// First lost seq.
        from: Seq,
        /// Last lost seq.
        to: Seq,
    },
    /// A committed request stream's record (the call it answers) is gone.
    RecordLost {
        /// The stream.
        stream: StreamKey,
    },
    /// A live session is gone entirely; it is ended, so its id answers `404`.
    SessionLost,
    /// The session's committed end is gone; it is ended again.
    EndLost,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.session;
        match &self.kind {
            DamageKind::EventsLost { stream, from, to } => write!(
                f,
                "session {s} stream {}: committed events {from} to {to} are lost",
                stream.number()
            ),
            DamageKind::RecordLost { stream } => write!(
                f,
                "session {s} stream {}: the record of its call is lost",
                stream.number()
            ),
            DamageKind::SessionLost => write!(f, "session {s}: lost entirely; ended"),
            DamageKind::EndLost => write!(f, "session {s}: its end was lost; ended again"),
        }
    }
}

/// The union of two lost ranges, conservatively one range (intact events
/// between two losses count as lost too: loud, never silent).
pub(super) fn merge(a: Option<(Seq, Seq)>, b: (Seq, Seq)) -> (Seq, Seq) {
    match a {
        Some((f, t)) => (f.min(b.0), t.max(b.1)),
        None => b,
    }
}

/// Compares `rec` with what `store` holds and returns the damage. With
/// `apply`, writes the rules of docs/protocol.md 6.1 in one fsync'd batch:
/// heads kept, lost ranges recorded, lost sessions ended.
pub(super) fn reconcile(
    store: &Store,
    rec: &Recorded,
    apply: bool,
) -> Result<Vec<Damage>, LogError> {
    let mut wb = store.db.batch().durability(Some(PersistMode::SyncAll));
    let mut found = Vec::new();
    let mut ids: Vec<&String> = rec.sessions.keys().collect();
    ids.sort();
    for id in ids {
        let want = &rec.sessions[id];
        let damage = |kind| Damage {
            session: id.clone(),
            kind,
        };
        let highest_request = want.streams.keys().copied().max().unwrap_or(0);
        let stored = store.sessions.get(id.as_bytes()).map_err(storage)?;
        let Some(stored) = stored else {
            if !want.ended {
                found.push(damage(DamageKind::SessionLost));
            }
            // An ended id stays dead, whichever was lost.
            let tomb = SessionRec {
                created_ms: 0,
                next_request: highest_request + 1,
                ended: true,
                ended_ms: now_ms(),
                meta: Bytes::new(),
            };
            wb.insert(&store.sessions, id.as_bytes(), tomb.encode());
            continue;
        };
        let mut session = SessionRec::decode(id, &stored)?;
        if session.ended {
            continue;
        }
        if want.ended {
            found.push(damage(DamageKind::EndLost));
            session.ended = true;
            session.ended_ms = now_ms();
            session.meta = Bytes::new();
            wb.insert(&store.sessions, id.as_bytes(), session.encode());
            let prefix = session_prefix(id);
            for ks in [&store.streams, &store.events, &store.requests, &store.pins] {
                for kv in ks.prefix(&prefix) {
                    wb.remove(ks, kv.key().map_err(storage)?.to_vec());
                }
            }
            continue;
        }
        let mut streams: Vec<(&u64, &Seq)> = want.streams.iter().collect();
        streams.sort();
        for (&n, &head) in streams {
            let stream = StreamKey::from_number(n);
            let key = stream_key(id, n);
            let now = match store.streams.get(&key).map_err(storage)? {
                Some(v) => decode_bounds(&v).ok_or_else(|| {
                    LogError::Corrupt(format!("session {id:?} stream {n}: malformed record"))
                })?,
                None => {
                    if n > 0 {
                        found.push(damage(DamageKind::RecordLost { stream }));
                    }
                    Bounds::new(0, 1)
                }
            };
            if now.head >= head && store.streams.get(&key).map_err(storage)?.is_some() {
                continue;
            }
            let mut kept = Bounds { head, ..now };
            if now.head < head {
                let lost = merge(now.lost, (now.head + 1, head));
                if now.lost.is_some() {
                    // One range per stream: events between two losses are
                    // refused with them, so storage must not hold them either.
                    let span = event_key(id, n, lost.0)..=event_key(id, n, lost.1);
                    for kv in store.events.range(span) {
                        wb.remove(&store.events, kv.key().map_err(storage)?.to_vec());
                    }
                }
                kept.lost = Some(lost);
                found.push(damage(DamageKind::EventsLost {
                    stream,
                    from: now.head + 1,
                    to: head,
                }));
            }
            wb.insert(&store.streams, key, bounds_value(kept));
        }
        if highest_request >= session.next_request {
            session.next_request = highest_request + 1;
            wb.insert(&store.sessions, id.as_bytes(), session.encode());
        }
    }
    if apply && !found.is_empty() {
        wb.commit().map_err(storage)?;
    }
    Ok(found)
}

/// Reads the committed-heads record and applies it (docs/protocol.md 6.1);
/// refuses a log whose record went missing.
pub(super) fn check_heads(store: &Store, path: &Path) -> Result<Vec<Damage>, LogError> {
    let recorded = super::heads::read(path)
        .map_err(|m| LogError::Corrupt(format!("the committed-heads record: {m}")))?;
    let kept = store.meta.get(HEADS_KEPT).map_err(storage)?.is_some();
    match recorded {
        Some(rec) => {
            if let Some(why) = &rec.stopped {
                tracing::warn!(log = %path.display(), "the committed-heads record is cut short ({why}); what it holds before that is checked");
            }
            reconcile(store, &rec, true)
        }
        None if kept => Err(LogError::Corrupt(format!(
            "the committed-heads record ({}) is missing, so a journal cut short cannot be told from a crash; `mcp-resume log check --repair` accepts the log as it is",
            super::heads::FILE
        ))),
        // A new log, or one written before the record existed.
        None => Ok(Vec::new()),
    }
}

/// Notes in the log itself that it keeps a committed-heads record.
pub(super) fn keep_heads(store: &Store) -> Result<(), LogError> {
    if store.meta.get(HEADS_KEPT).map_err(storage)?.is_some() {
        return Ok(());
    }
    let mut wb = store
        .db
        .batch()
        .durability(Some(fjall::PersistMode::SyncAll));
    wb.insert(&store.meta, HEADS_KEPT, b"1");
    wb.commit().map_err(storage)
}

/// Logs every damaged stream at open: what this open found as errors,
/// what was known from before as warnings.
pub(super) fn report(path: &Path, found: &[Damage], hub: &Hub) {
    for d in found {
        tracing::error!(log = %path.display(), "storage damage found: {d}");
    }
    for (session, stream, from, to) in hub.lost_ranges() {
        let new = found.iter().any(|d| d.session == session);
        if !new {
            tracing::warn!(log = %path.display(), session, stream = stream.number(), from, to,
                "known storage damage: committed events lost; readers that need them get 409 data-lost");
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::super::heads::{append_record, Entry};
    use crate::{DiskLog, EventLog, LogError, Retention, SessionRecords, StreamKey};

    const S: StreamKey = StreamKey::Session;

    fn lose(dir: &std::path::Path, head: u64) {
        append_record(
            dir,
            &[Entry::Head {
                id: "a".into(),
                stream: 0,
                head,
            }],
        );
    }

    async fn append(log: &DiskLog, n: u64) -> u64 {
        let mut head = 0;
        for _ in 0..n {
            head = log
                .append("a", S, vec![Bytes::from_static(b"{}")])
                .await
                .unwrap();
        }
        head
    }

    /// A second loss on a stream that has a lost range: one merged range,
    /// the intact events between the two refused with it (and gone from
    /// storage, so the log still opens), the head kept, nothing reused.
    #[tokio::test]
    async fn a_second_loss_merges_into_one_range_and_the_log_still_opens() {
        let dir = tempfile::tempdir().unwrap();
        {
            let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
            log.create_session("a", Bytes::new()).await.unwrap();
            assert_eq!(append(&log, 10).await, 10);
        }
        lose(dir.path(), 20); // commits 11..=20 that storage no longer has
        {
            let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
            assert_eq!(log.bounds("a", S).await.unwrap().lost, Some((11, 20)));
            assert_eq!(append(&log, 5).await, 25);
        }
        lose(dir.path(), 30); // and 26..=30 now
        let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
        let b = log.bounds("a", S).await.unwrap();
        assert_eq!((b.head, b.lost), (30, Some((11, 30))));
        assert!(matches!(
            log.read("a", S, 10, 100).await,
            Err(LogError::DataLost {
                from: 11,
                to: 30,
                ..
            })
        ));
        assert_eq!(log.read("a", S, 0, 100).await.unwrap().len(), 10);
        assert_eq!(append(&log, 1).await, 31);
        drop(log);
        let log = DiskLog::open(dir.path(), Retention::default()).unwrap();
        assert!(log.damage_found().is_empty());
        assert_eq!(log.read("a", S, 30, 100).await.unwrap().len(), 1);
    }
}
