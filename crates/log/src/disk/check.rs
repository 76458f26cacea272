//! `mcp-resume log check DIR [--repair]`: verifies a disk log offline, and
//! makes a damaged one servable under docs/protocol.md 6.1 without losing
//! what is intact.
//!
//! The check reads everything an open reads and more: every session record,
//! every stream's events one by one (so fjall verifies every table block it
//! touches), every request record, and the committed-heads record against
//! what is there. It writes nothing unless asked to repair.

use std::collections::HashSet;
use std::path::Path;

use fjall::PersistMode;

use super::damage::{self, merge, Damage, DamageKind};
use super::heads;
use super::store::*;
use crate::{Bounds, LogError, Retention, StreamKey};

/// What [`super::DiskLog::check`] found, and what a repair changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    /// Session records read (live and ended).
    pub sessions: usize,
    /// Stream records read.
    pub streams: usize,
    /// Events read.
    pub events: u64,
    /// Committed state the files no longer hold: found now (the
    /// committed-heads record went further than the files), or known from
    /// an earlier open (a stream's lost range).
    pub damage: Vec<Damage>,
    /// Inconsistencies an open would refuse, in words.
    pub problems: Vec<String>,
    /// What `--repair` changed, in words.
    pub repaired: Vec<String>,
}

impl CheckReport {
    /// Whether the log is whole: nothing lost, nothing inconsistent.
    pub fn is_clean(&self) -> bool {
        self.damage.is_empty() && self.problems.is_empty()
    }
}

/// Checks (and with `repair`, mends) the log at `path`; `Err` when it cannot
/// be opened at all.
pub(super) fn check(path: &Path, repair: bool) -> Result<CheckReport, LogError> {
    if !path.is_dir() {
        return Err(storage(format!("{} is not a directory", path.display())));
    }
    let store = super::open_store(path)?;
    let mut report = CheckReport::default();
    let mut wb = store.db.batch().durability(Some(PersistMode::SyncAll));
    let mut dirty = false;
    // The committed-heads record against what fjall recovered.
    let kept = store.meta.get(HEADS_KEPT).map_err(storage)?.is_some();
    match heads::read(path) {
        Ok(Some(rec)) => {
            // A torn tail (`rec.stopped`) is what a crash leaves: not damage.
            report.damage = damage::reconcile(&store, &rec, repair)?;
            if repair && !report.damage.is_empty() {
                report.repaired.push(format!(
                    "{} damaged streams or sessions marked as docs/protocol.md 6.1 says",
                    report.damage.len()
                ));
            }
        }
        Ok(None) if kept => {
            report
                .problems
                .push("the committed-heads record is missing".into());
            if repair {
                // The next open starts a new record from what is there.
                wb.remove(&store.meta, HEADS_KEPT);
                dirty = true;
                report
                    .repaired
                    .push("a new committed-heads record will be started from what is there".into());
            }
        }
        Ok(None) => {}
        Err(m) => {
            report
                .problems
                .push(format!("the committed-heads record: {m}"));
            // What its intact records say still counts: a stream they show
            // went further than the files is damage, found before the record
            // is replaced (or it would go unnoticed, and its seqs be reused).
            if let Some(rec) = heads::salvage(path) {
                report.damage = damage::reconcile(&store, &rec, repair)?;
            }
            if repair {
                std::fs::remove_file(path.join(heads::FILE)).map_err(storage)?;
                wb.remove(&store.meta, HEADS_KEPT);
                dirty = true;
                report.repaired.push(format!(
                    "the damaged committed-heads record was replaced, after its intact records were applied ({} damaged streams or sessions marked as docs/protocol.md 6.1 says)",
                    report.damage.len()
                ));
            }
        }
    }
    // Sessions.
    let mut live = HashSet::new();
    let mut known = HashSet::new();
    for kv in store.sessions.iter() {
        let (k, v) = kv.into_inner().map_err(|e| unreadable("sessions", e))?;
        report.sessions += 1;
        let id = String::from_utf8_lossy(&k).into_owned();
        known.insert(id.clone());
        match SessionRec::decode(&id, &v) {
            Ok(rec) if !rec.ended => {
                live.insert(id);
            }
            Ok(_) => {}
            Err(e) => {
                report.problems.push(e.to_string());
                if repair {
                    let tomb = SessionRec {
                        created_ms: 0,
                        next_request: u64::MAX / 2,
                        ended: true,
                        ended_ms: crate::types::now_ms(),
                        meta: bytes::Bytes::new(),
                    };
                    wb.insert(&store.sessions, &*k, tomb.encode());
                    dirty = true;
                    report
                        .repaired
                        .push(format!("session {id:?}: its unreadable record ended it"));
                }
            }
        }
    }
    // Streams and their events.
    let mut streams = HashSet::new();
    for kv in store.streams.iter() {
        let (k, v) = kv.into_inner().map_err(|e| unreadable("streams", e))?;
        report.streams += 1;
        let Some((id, n)) = split_key(&k).map(|(id, n)| (id.to_owned(), n)) else {
            report.problems.push("a stream key is malformed".into());
            continue;
        };
        if !live.contains(&id) {
            if !known.contains(&id) {
                report
                    .problems
                    .push(format!("stream {n} of unknown session {id:?}"));
                if repair {
                    wb.remove(&store.streams, &*k);
                    dirty = true;
                    report
                        .repaired
                        .push(format!("stream {n} of unknown session {id:?} removed"));
                }
            }
            continue;
        }
        streams.insert((id.clone(), n));
        let Some(b) = decode_bounds(&v) else {
            report
                .problems
                .push(format!("session {id:?} stream {n}: malformed record"));
            continue;
        };
        if let Some((from, to)) = b.lost {
            report.damage.push(Damage {
                session: id.clone(),
                kind: DamageKind::EventsLost {
                    stream: StreamKey::from_number(n),
                    from,
                    to,
                },
            });
        }
        let fixed = check_events(&store, &id, n, b, &mut report)?;
        if let Some((fixed, extra)) = fixed.filter(|_| repair) {
            for seq in extra {
                wb.remove(&store.events, event_key(&id, n, seq));
            }
            wb.insert(&store.streams, &*k, bounds_value(fixed));
            dirty = true;
            report.repaired.push(format!(
                "session {id:?} stream {n}: missing events marked lost ({:?})",
                fixed.lost
            ));
        }
    }
    // Request records belong to live streams.
    for kv in store.requests.iter() {
        let (k, _) = kv.into_inner().map_err(|e| unreadable("requests", e))?;
        let Some((id, n)) = split_key(&k).map(|(id, n)| (id.to_owned(), n)) else {
            report.problems.push("a request key is malformed".into());
            continue;
        };
        if live.contains(&id) && !streams.contains(&(id.clone(), n)) {
            report.problems.push(format!(
                "request record {n} of session {id:?} has no live stream"
            ));
            if repair {
                wb.remove(&store.requests, &*k);
                dirty = true;
                report
                    .repaired
                    .push(format!("request record {n} of session {id:?} removed"));
            }
        }
    }
    if dirty {
        wb.commit().map_err(storage)?;
    } else {
        drop(wb);
    }
    // Every handle on the database goes before the proof below opens it.
    drop(store);
    if repair {
        // Proof: it opens now (and the open writes a new committed-heads
        // record). fjall's threads release the directory's lock shortly
        // after the check's own handle is dropped.
        let mut opened = super::DiskLog::open(path, Retention::default());
        for _ in 0..50 {
            match &opened {
                Err(LogError::Storage(m)) if m.contains("already open") => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    opened = super::DiskLog::open(path, Retention::default());
                }
                _ => break,
            }
        }
        match opened {
            Err(e) => report
                .problems
                .push(format!("still refused after the repair: {e}")),
            Ok(_) => report.problems.clear(),
        }
    }
    Ok(report)
}

/// A keyspace that cannot be read through (a table failing its checksum).
fn unreadable(what: &str, e: impl std::fmt::Display) -> LogError {
    LogError::Corrupt(format!("reading {what}: {e}"))
}

/// Reads every event of one stream and compares it with `floor ..= head`
/// less its lost range. On a mismatch: the bounds that would serve what is
/// there (missing events as one lost range) and the stray seqs to drop.
fn check_events(
    store: &Store,
    id: &str,
    n: u64,
    b: Bounds,
    report: &mut CheckReport,
) -> Result<Option<(Bounds, Vec<u64>)>, LogError> {
    let expected = |seq: u64| {
        seq >= b.floor && seq <= b.head && !b.lost.is_some_and(|(f, t)| (f..=t).contains(&seq))
    };
    let (mut next, mut missing, mut extra) = (b.floor, None, Vec::new());
    let mut present = Vec::new();
    let note_missing = |from: u64, to: u64, missing: &mut Option<(u64, u64)>| {
        for seq in from..to {
            if expected(seq) {
                *missing = Some(merge(*missing, (seq, seq)));
            }
        }
    };
    for kv in store.events.prefix(stream_key(id, n)) {
        let (k, v) = kv.into_inner().map_err(|e| unreadable("events", e))?;
        report.events += 1;
        let Some(seq) = u64_at(&k, k.len().saturating_sub(8)) else {
            continue;
        };
        if !expected(seq) {
            extra.push(seq);
            continue;
        }
        note_missing(next, seq, &mut missing);
        next = seq + 1;
        present.push(seq);
        if v.len() < 8 {
            // Too short to be an event: unreadable, so lost.
            extra.push(seq);
            missing = Some(merge(missing, (seq, seq)));
        }
    }
    note_missing(next, b.head + 1, &mut missing);
    if missing.is_none() && extra.is_empty() {
        return Ok(None);
    }
    if let Some((from, to)) = missing {
        report.problems.push(format!(
            "session {id:?} stream {n}: committed events {from} to {to} are missing"
        ));
    }
    if !extra.is_empty() {
        report.problems.push(format!(
            "session {id:?} stream {n}: {} events outside floor..=head or unreadable",
            extra.len()
        ));
    }
    let lost = missing.map(|m| merge(b.lost, m)).or(b.lost);
    if let Some((from, to)) = lost {
        // One range per stream: intact events inside it are refused with it,
        // so they go from storage too (reported, never silent).
        let inside: Vec<u64> = present
            .into_iter()
            .filter(|s| (from..=to).contains(s))
            .collect();
        if !inside.is_empty() {
            report.problems.push(format!(
                "session {id:?} stream {n}: {} intact events between two losses are refused with them",
                inside.len()
            ));
            extra.extend(inside);
        }
    }
    Ok(Some((Bounds { lost, ..b }, extra)))
}
