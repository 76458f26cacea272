//! What the disk log keeps in fjall, and reading it back: the key and value
//! layouts, the session record, reads of committed events and the check of
//! everything at open.

use std::collections::HashMap;
use std::io::Read;

use bytes::Bytes;
use fjall::{Database, Keyspace};

use crate::hub::{Hub, SessionState, StreamState};
use crate::{Bounds, Event, LogError, Seq, StreamKey};

/// The keyspaces of one database.
#[derive(Clone)]
pub(super) struct Store {
    pub db: Database,
    pub sessions: Keyspace,
    pub streams: Keyspace,
    pub events: Keyspace,
    pub requests: Keyspace,
    /// Facts about the log itself, e.g. [`HEADS_KEPT`].
    pub meta: Keyspace,
    /// Retention pins, `id 0 stream pin -> seq | until_ms`, so an upgrade's
    /// pin outlives a restart within its time.
    pub pins: Keyspace,
}

/// Key in `meta`: present once the log keeps a committed-heads record, so a
/// record that goes missing afterwards is damage, not an older log.
pub(super) const HEADS_KEPT: &[u8] = b"committed-heads";

/// The prefix of every key of one session: its id and a 0 byte.
pub(super) fn session_prefix(id: &str) -> Vec<u8> {
    prefix_with_room(id, 0)
}

/// [`session_prefix`] in a buffer with `room` bytes to spare, so the key
/// built on it is allocated once (an event's key grew twice before: a
/// tenth of the committer's own work per event).
fn prefix_with_room(id: &str, room: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(id.len() + 1 + room);
    k.extend_from_slice(id.as_bytes());
    k.push(0);
    k
}

/// The key of one stream's record (and of a request stream's record).
pub(super) fn stream_key(id: &str, stream: u64) -> Vec<u8> {
    let mut k = prefix_with_room(id, 8);
    k.extend_from_slice(&stream.to_be_bytes());
    k
}

/// The session id and number of a key made by [`stream_key`] (a stream,
/// request record or pin key); `None` for one that cannot be such a key.
pub(super) fn split_key(k: &[u8]) -> Option<(&str, u64)> {
    let split = k.len().checked_sub(9)?;
    let id = std::str::from_utf8(&k[..split]).ok()?;
    Some((id, u64_at(k, split + 1)?))
}

/// The key of one event: big-endian seq, so byte order is stream order.
/// Made as fjall's own byte string in one allocation: a `Vec` handed to
/// fjall is copied again into one of its own. `Slice::from_reader` is the
/// only public way to fill one in place; it is `#[doc(hidden)]` in
/// lsm-tree 3.1 (Cargo.lock pins it), so an upgrade that drops it fails to
/// build rather than changing what is stored.
pub(super) fn event_key(id: &str, stream: u64, seq: Seq) -> fjall::Slice {
    let (stream, seq) = (stream.to_be_bytes(), seq.to_be_bytes());
    let parts: [&[u8]; 4] = [id.as_bytes(), &[0], &stream, &seq];
    let mut reader = parts[0].chain(parts[1]).chain(parts[2]).chain(parts[3]);
    fjall::Slice::from_reader(&mut reader, id.len() + 17).unwrap_or_else(|_| parts.concat().into())
}

/// A big-endian u64 at `at`, if the bytes are there.
pub(super) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
}

/// A stream record's value: head, then floor, then (only on a damaged
/// stream) the lost range's first and last seq.
pub(super) fn bounds_value(b: Bounds) -> Vec<u8> {
    let mut v = Vec::with_capacity(32);
    v.extend_from_slice(&b.head.to_be_bytes());
    v.extend_from_slice(&b.floor.to_be_bytes());
    if let Some((from, to)) = b.lost {
        v.extend_from_slice(&from.to_be_bytes());
        v.extend_from_slice(&to.to_be_bytes());
    }
    v
}

/// Parses a stream record's value.
pub(super) fn decode_bounds(v: &[u8]) -> Option<Bounds> {
    let mut b = Bounds::new(u64_at(v, 0)?, u64_at(v, 8)?);
    match v.len() {
        16 => {}
        32 => b.lost = Some((u64_at(v, 16)?, u64_at(v, 24)?)),
        _ => return None,
    }
    Some(b)
}

/// The first and last seq a stream must hold in storage: `floor ..= head`
/// less its lost range; `None` when it holds nothing.
pub(super) fn expected_span(b: Bounds) -> Option<(Seq, Seq)> {
    let (mut first, mut last) = (b.floor, b.head);
    if let Some((from, to)) = b.lost {
        if (from..=to).contains(&first) {
            first = to + 1;
        }
        if (from..=to).contains(&last) {
            last = from - 1;
        }
    }
    (first <= last).then_some((first, last))
}

/// An event's value: commit time, then the message.
pub(super) fn event_value(at_ms: u64, message: &[u8]) -> fjall::Slice {
    // In fjall's own byte string at once, as `event_key`.
    let at = at_ms.to_be_bytes();
    let mut reader = at.chain(message);
    fjall::Slice::from_reader(&mut reader, 8 + message.len())
        .unwrap_or_else(|_| [&at[..], message].concat().into())
}

/// A storage engine failure as the log's error.
pub(super) fn storage(e: impl std::fmt::Display) -> LogError {
    LogError::Storage(e.to_string())
}

#[derive(Clone)]
/// A session's record in the `sessions` keyspace.
pub(super) struct SessionRec {
    pub created_ms: u64,
    pub next_request: u64,
    pub ended: bool,
    /// When it ended, ms since the epoch; 0 when live or not recorded (older logs).
    pub ended_ms: u64,
    pub meta: Bytes,
}

impl SessionRec {
    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(17 + self.meta.len());
        v.extend_from_slice(&self.created_ms.to_le_bytes());
        v.extend_from_slice(&self.next_request.to_le_bytes());
        v.push(self.ended as u8);
        if self.ended {
            // A tombstone has no meta; it keeps when it ended instead.
            v.extend_from_slice(&self.ended_ms.to_le_bytes());
        } else {
            v.extend_from_slice(&self.meta);
        }
        v
    }

    /// Parses stored bytes; `Corrupt` if they cannot be a record.
    pub fn decode(id: &str, b: &[u8]) -> Result<Self, LogError> {
        if b.len() < 17 || b[16] > 1 {
            return Err(LogError::Corrupt(format!(
                "session record {id:?} is malformed"
            )));
        }
        let ended = b[16] == 1;
        let le = |r: std::ops::Range<usize>| {
            b.get(r)
                .and_then(|s| s.try_into().ok())
                .map(u64::from_le_bytes)
        };
        Ok(Self {
            created_ms: le(0..8).unwrap_or_default(),
            next_request: le(8..16).unwrap_or_default(),
            ended,
            ended_ms: if ended { le(17..25).unwrap_or(0) } else { 0 },
            meta: if ended {
                Bytes::new()
            } else {
                Bytes::copy_from_slice(&b[17..])
            },
        })
    }
}

/// Reads committed, visible events from storage; `b` is the visible bounds already checked.
pub(super) fn read_events(
    store: &Store,
    hub: &Hub,
    id: &str,
    stream: StreamKey,
    after: Seq,
    max: usize,
    b: Bounds,
) -> Result<Vec<Event>, LogError> {
    let n = stream.number();
    // Events above the visible head may be committed but not yet published: never read them.
    let upper = b.head.min(after.saturating_add(max as u64));
    let mut out = Vec::with_capacity((upper - after) as usize);
    for kv in store
        .events
        .range(event_key(id, n, after + 1)..=event_key(id, n, upper))
    {
        let (k, v) = kv.into_inner().map_err(storage)?;
        let seq =
            u64_at(&k, k.len() - 8).ok_or_else(|| LogError::Corrupt("short event key".into()))?;
        let at_ms =
            u64_at(&v, 0).ok_or_else(|| LogError::Corrupt(format!("event {seq} is truncated")))?;
        out.push(Event {
            seq,
            at_ms,
            message: Bytes::copy_from_slice(&v[8..]),
        });
    }
    // Retention may have trimmed between the bounds check and this read.
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

/// Fills the hub from storage at open, checking that every stream holds
/// exactly its `floor ..= head` and every request record has its stream.
pub(super) fn load(store: &Store, hub: &Hub) -> Result<(), LogError> {
    let mut states: HashMap<String, SessionState> = HashMap::new();
    for kv in store.sessions.iter() {
        let (k, v) = kv.into_inner().map_err(storage)?;
        let id = std::str::from_utf8(&k)
            .map_err(|_| LogError::Corrupt("a session id is not UTF-8".into()))?
            .to_owned();
        let rec = SessionRec::decode(&id, &v)?;
        let mut st = SessionState::new(rec.created_ms, rec.meta, rec.next_request);
        if rec.ended {
            st.end();
            if rec.ended_ms != 0 {
                st.ended_ms = rec.ended_ms;
            }
        }
        states.insert(id, st);
    }
    for kv in store.streams.iter() {
        let (k, v) = kv.into_inner().map_err(storage)?;
        let corrupt = || LogError::Corrupt("a stream record is malformed".into());
        let (id, n) = split_key(&k).ok_or_else(corrupt)?;
        let b = decode_bounds(&v).ok_or_else(corrupt)?;
        let (head, floor) = (b.head, b.floor);
        let st = states
            .get_mut(id)
            .ok_or_else(|| LogError::Corrupt(format!("stream {n} of unknown session {id:?}")))?;
        if floor > head + 1 {
            return Err(LogError::Corrupt(format!(
                "session {id:?} stream {n}: floor {floor} above head {head}"
            )));
        }
        // The events must be exactly floor ..= head.
        let mut range = store.events.prefix(stream_key(id, n));
        let seq_of = |g: Option<fjall::Guard>| -> Result<Option<u64>, LogError> {
            match g {
                None => Ok(None),
                Some(g) => {
                    let k = g.key().map_err(storage)?;
                    Ok(u64_at(&k, k.len() - 8))
                }
            }
        };
        let first = seq_of(range.next())?;
        let last = seq_of(range.next_back())?.or(first);
        let want = expected_span(b);
        if first.zip(last) != want {
            return Err(LogError::Corrupt(format!(
                "session {id:?} stream {n}: expected events {want:?}, found {:?}",
                first.zip(last)
            )));
        }
        if st.ended {
            continue;
        }
        let mut s = StreamState::new(head, floor);
        s.lost = b.lost;
        if n > 0 && s.emptied() {
            st.retired.insert(n, head);
        } else {
            if n > 0 {
                // Its record, if it has one, comes next; streams opened
                // before records existed have an empty one.
                s.meta = Some(Bytes::new());
            }
            st.streams.insert(n, Box::new(s));
        }
    }
    for kv in store.requests.iter() {
        let (k, v) = kv.into_inner().map_err(storage)?;
        let corrupt = || LogError::Corrupt("a request record is malformed".into());
        let (id, n) = split_key(&k).ok_or_else(corrupt)?;
        // Records of streams retention emptied are dropped with their last
        // events; any other stream without state is an inconsistency.
        match states
            .get_mut(id)
            .map(|st| (st.ended, st.streams.get_mut(&n)))
        {
            Some((false, Some(s))) if n > 0 => s.meta = Some(Bytes::copy_from_slice(&v)),
            _ => {
                return Err(LogError::Corrupt(format!(
                    "request record {n} of session {id:?} has no live stream"
                )))
            }
        }
    }
    for (id, st) in states {
        hub.insert(&id, st)?;
    }
    Ok(())
}
