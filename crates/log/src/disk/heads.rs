//! The committed-heads record: how far commits went, kept outside fjall's
//! journal, so that a journal cut inside its data is told apart from the
//! torn tail of a crash (docs/protocol.md 6.1).
//!
//! fjall recovers a journal cut short as if the process had died while
//! writing it: the batches before the cut come back, the rest is gone, no
//! error. Only a record kept elsewhere can say "these streams went further".
//!
//! File [`FILE`] in the log directory: the 8 bytes [`MAGIC`], then records
//! `payload length: u32 LE | xxh3-64 of the payload: u64 LE | payload`. A
//! payload is a list of entries `kind: u8 | id length: u16 LE | id`, and for
//! a head `| stream: u64 LE | head: u64 LE`. The committer appends one record
//! per group commit, after the journal's fsync and before any of the batch
//! is visible: a killed process keeps it (the page cache does), and a syncer
//! thread fsyncs it at most [`SYNC_EVERY`] later, so a power failure costs at
//! most that much of it. Every open rewrites it as one snapshot, and so does
//! the committer when it grows past [`ROTATE_BYTES`].

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::Seq;

/// The record's file name inside the log directory.
pub(super) const FILE: &str = "committed-heads";
/// The first bytes of the file: the format and its version.
const MAGIC: &[u8; 8] = b"MCPRHDS1";
/// A record's header: payload length and checksum.
const RECORD_HEADER: usize = 4 + 8;
/// Past this growth beyond its last snapshot (and twice that snapshot), the
/// committer rewrites the record as a snapshot.
const ROTATE_BYTES: u64 = 16 << 20;
/// A snapshot is written in records of at most this many payload bytes.
const SNAPSHOT_RECORD: usize = 1 << 20;
/// How long a written record may wait for its fsync.
pub(super) const SYNC_EVERY: Duration = Duration::from_millis(50);

/// One fact the record keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Entry {
    /// Stream `stream` of session `id` has committed up to `head`; opening a
    /// stream (or creating the session, stream 0) records head 0.
    Head { id: String, stream: u64, head: Seq },
    /// The session ended; its streams went with it.
    Ended { id: String },
    /// The ended session was forgotten (its tombstone expired).
    Forgotten { id: String },
}

/// What the record says of one session.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct RecordedSession {
    /// Whether its end was committed.
    pub ended: bool,
    /// The highest committed head per stream number, while live.
    pub streams: HashMap<u64, Seq>,
}

/// What the whole record says: every session it knows.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Recorded {
    /// By session id.
    pub sessions: HashMap<String, RecordedSession>,
    /// Why reading stopped before the end of the file, if it did: a record
    /// failed its checksum (a torn write or damage). What came before holds.
    pub stopped: Option<String>,
}

impl Recorded {
    fn apply(&mut self, e: Entry) {
        match e {
            Entry::Head { id, stream, head } => {
                let s = self.sessions.entry(id).or_default();
                if !s.ended {
                    let h = s.streams.entry(stream).or_insert(0);
                    *h = (*h).max(head);
                }
            }
            Entry::Ended { id } => {
                let s = self.sessions.entry(id).or_default();
                s.ended = true;
                s.streams = HashMap::new();
            }
            Entry::Forgotten { id } => {
                self.sessions.remove(&id);
            }
        }
    }
}

fn put_id(out: &mut Vec<u8>, kind: u8, id: &str) {
    // Ids are short (a session id is 64 hex digits); a longer one is cut,
    // which only makes the record miss it, never invent one.
    let bytes = &id.as_bytes()[..id.len().min(u16::MAX as usize)];
    out.push(kind);
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    match e {
        Entry::Head { id, stream, head } => {
            put_id(out, 1, id);
            out.extend_from_slice(&stream.to_le_bytes());
            out.extend_from_slice(&head.to_le_bytes());
        }
        Entry::Ended { id } => put_id(out, 2, id),
        Entry::Forgotten { id } => put_id(out, 3, id),
    }
}

/// Appends one record holding `payload` to `out`.
fn seal(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

fn decode_payload(mut p: &[u8]) -> Option<Vec<Entry>> {
    let mut out = Vec::new();
    let take = |p: &mut &[u8], n: usize| -> Option<Vec<u8>> {
        let (a, b) = (p.get(..n)?, p.get(n..)?);
        let v = a.to_vec();
        *p = b;
        Some(v)
    };
    let u64_of = |b: Vec<u8>| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    while !p.is_empty() {
        let kind = take(&mut p, 1)?[0];
        let len = u16::from_le_bytes(take(&mut p, 2)?.try_into().ok()?) as usize;
        let id = String::from_utf8(take(&mut p, len)?).ok()?;
        out.push(match kind {
            1 => Entry::Head {
                id,
                stream: u64_of(take(&mut p, 8)?),
                head: u64_of(take(&mut p, 8)?),
            },
            2 => Entry::Ended { id },
            3 => Entry::Forgotten { id },
            _ => return None,
        });
    }
    Some(out)
}

/// The record at the start of `rest`: its length and entries, if whole and
/// intact.
fn record_at(rest: &[u8]) -> Option<(usize, Vec<Entry>)> {
    let h = rest.get(..RECORD_HEADER)?;
    let len = u32::from_le_bytes(h[..4].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(h[4..].try_into().ok()?);
    let payload = rest.get(RECORD_HEADER..RECORD_HEADER + len)?;
    (xxhash_rust::xxh3::xxh3_64(payload) == sum)
        .then(|| decode_payload(payload))
        .flatten()
        .map(|entries| (len, entries))
}

/// Parses a whole file's bytes. `Err` for a file that is not a
/// committed-heads record (wrong header) or that is damaged inside: a
/// record that fails its checksum while an intact one follows it. A bad
/// record with nothing intact after it is a torn tail (writes cut by a
/// crash, up to [`SYNC_EVERY`] of them after a power failure): the reading
/// stops there (see [`Recorded::stopped`]), and what came before holds.
pub(super) fn parse(bytes: &[u8]) -> Result<Recorded, String> {
    if bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err("its header is not a committed-heads record's".into());
    }
    let mut rec = Recorded::default();
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let rest = &bytes[at..];
        match record_at(rest) {
            Some((len, entries)) => {
                entries.into_iter().for_each(|e| rec.apply(e));
                at += RECORD_HEADER + len;
            }
            None => {
                // Its length intact and an intact record after it: damage, not a torn tail.
                let declared = rest
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .map(|b| u32::from_le_bytes(b) as usize);
                let next = declared.and_then(|len| rest.get(RECORD_HEADER + len..));
                if next.is_some_and(|n| !n.is_empty() && record_at(n).is_some()) {
                    return Err(format!(
                        "a record at byte {at} of {} fails its checksum, and intact records follow it",
                        bytes.len()
                    ));
                }
                rec.stopped = Some(format!(
                    "the last {} bytes (from byte {at}) are a torn write",
                    bytes.len() - at
                ));
                break;
            }
        }
    }
    Ok(rec)
}

/// Reads the record in `dir`: `Ok(None)` when there is none.
pub(super) fn read(dir: &Path) -> Result<Option<Recorded>, String> {
    match std::fs::read(dir.join(FILE)) {
        Ok(bytes) => parse(&bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes `entries` as a new record file, durably, replacing the old one
/// atomically (written aside, fsync'd, renamed, directory fsync'd).
fn write_snapshot(dir: &Path, entries: &[Entry]) -> std::io::Result<File> {
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut out = MAGIC.to_vec();
    let mut payload = Vec::new();
    for e in entries {
        encode_entry(e, &mut payload);
        if payload.len() >= SNAPSHOT_RECORD {
            seal(&payload, &mut out);
            payload.clear();
        }
    }
    if !payload.is_empty() {
        seal(&payload, &mut out);
    }
    let mut f = File::create(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(FILE))?;
    File::open(dir)?.sync_all()?;
    OpenOptions::new().append(true).open(dir.join(FILE))
}

/// What the committer and the syncer thread share.
struct Shared {
    file: Mutex<Arc<File>>,
    dirty: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The committer's handle on the record: appends, rotation, and the syncer
/// thread that fsyncs what was appended.
pub(super) struct HeadsWriter {
    dir: PathBuf,
    file: Arc<File>,
    len: u64,
    /// The size of the last snapshot: rotation waits for growth past it.
    snapshot_len: u64,
    buf: Vec<u8>,
    payload: Vec<u8>,
    shared: Arc<Shared>,
    syncer: Option<std::thread::JoinHandle<()>>,
}

impl HeadsWriter {
    /// Starts a new record in `dir` holding `entries` (a snapshot of every
    /// session), replacing any old one.
    pub fn create(dir: &Path, entries: &[Entry]) -> std::io::Result<Self> {
        let file = Arc::new(write_snapshot(dir, entries)?);
        let len = std::fs::metadata(dir.join(FILE))?.len();
        let shared = Arc::new(Shared {
            file: Mutex::new(file.clone()),
            dirty: AtomicBool::new(false),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("mcp-resume-log-heads".into())
            .spawn(move || sync_loop(&s))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            len,
            snapshot_len: len,
            buf: Vec::new(),
            payload: Vec::new(),
            shared,
            syncer: Some(syncer),
        })
    }

    /// Appends one record of `entries` (one group commit's); returns whether
    /// the file has grown enough to be rewritten as a snapshot.
    pub fn append(&mut self, entries: &[Entry]) -> std::io::Result<bool> {
        if entries.is_empty() {
            return Ok(false);
        }
        self.payload.clear();
        entries
            .iter()
            .for_each(|e| encode_entry(e, &mut self.payload));
        self.buf.clear();
        seal(&self.payload, &mut self.buf);
        if let Err(e) = (&*self.file).write_all(&self.buf) {
            // No torn record in the middle of the file: cut what was written.
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += self.buf.len() as u64;
        self.shared.dirty.store(true, Ordering::Release);
        Ok(self.len > self.snapshot_len + ROTATE_BYTES.max(self.snapshot_len))
    }

    /// Rewrites the record as a snapshot of `entries`.
    pub fn rotate(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let file = Arc::new(write_snapshot(&self.dir, entries)?);
        self.len = std::fs::metadata(self.dir.join(FILE))?.len();
        self.snapshot_len = self.len;
        *self.shared.file.lock().unwrap_or_else(|e| e.into_inner()) = file.clone();
        self.file = file;
        Ok(())
    }
}

impl Drop for HeadsWriter {
    /// Stops the syncer after its last fsync, so a clean close leaves the
    /// record complete on disk.
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
    }
}

fn sync_loop(s: &Shared) {
    loop {
        let stop = {
            let guard = s.stop.lock().unwrap_or_else(|e| e.into_inner());
            let (guard, _) = s
                .wake
                .wait_timeout_while(guard, SYNC_EVERY, |stop| !*stop)
                .unwrap_or_else(|e| e.into_inner());
            *guard
        };
        if s.dirty.swap(false, Ordering::AcqRel) {
            let file = s.file.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "could not fsync the committed-heads record");
            }
        }
        if stop {
            return;
        }
    }
}

/// For tests: appends one record of `entries` to the record in `dir`, as a
/// commit that storage then lost would have.
#[cfg(test)]
pub(super) fn append_record(dir: &Path, entries: &[Entry]) {
    let mut payload = Vec::new();
    entries.iter().for_each(|e| encode_entry(e, &mut payload));
    let mut out = Vec::new();
    seal(&payload, &mut out);
    let mut f = OpenOptions::new()
        .append(true)
        .open(dir.join(FILE))
        .unwrap();
    f.write_all(&out).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(id: &str, stream: u64, head: Seq) -> Entry {
        Entry::Head {
            id: id.into(),
            stream,
            head,
        }
    }

    #[test]
    fn records_read_back_and_a_torn_tail_stops_the_reading() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = HeadsWriter::create(dir.path(), &[head("a", 0, 3)]).unwrap();
        w.append(&[head("a", 0, 9), head("a", 2, 1), head("b", 0, 0)])
            .unwrap();
        w.append(&[Entry::Ended { id: "b".into() }]).unwrap();
        w.append(&[head("c", 0, 4)]).unwrap();
        w.append(&[Entry::Forgotten { id: "c".into() }]).unwrap();
        drop(w);
        let r = read(dir.path()).unwrap().unwrap();
        assert_eq!(r.stopped, None);
        assert_eq!(r.sessions["a"].streams, HashMap::from([(0, 9), (2, 1)]));
        assert!(r.sessions["b"].ended && r.sessions["b"].streams.is_empty());
        assert!(!r.sessions.contains_key("c"));
        // Cut inside the last record: what came before holds, the cut is named.
        let bytes = std::fs::read(dir.path().join(FILE)).unwrap();
        let r = parse(&bytes[..bytes.len() - 3]).unwrap();
        assert!(r.stopped.is_some());
        assert!(
            r.sessions.contains_key("c"),
            "the record before the cut holds"
        );
        // A flipped bit in an early record, intact ones after it: damage.
        let mut bad = bytes.clone();
        bad[MAGIC.len() + RECORD_HEADER + 1] ^= 1;
        assert!(parse(&bad).is_err());
        // The last record's checksum failing: a torn tail.
        let mut torn = bytes.clone();
        let last = torn.len() - 1;
        torn[last] ^= 1;
        assert!(parse(&torn).unwrap().stopped.is_some());
        assert!(parse(b"garbage!").is_err());
    }
}
