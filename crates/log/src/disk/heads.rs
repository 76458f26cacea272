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
//! a head `| stream: u64 LE | head: u64 LE`, for a sync mark (no id)
//! `| bytes: u64 LE`. The committer appends one record per group commit,
//! after the journal's fsync and before any of the batch is visible: a
//! killed process keeps it (the page cache does), and a syncer thread
//! fsyncs it at most [`SYNC_EVERY`] later, so a power failure costs at most
//! that much of it. Every open rewrites it as one snapshot, and so does the
//! committer when it grows past [`ROTATE_BYTES`].
//!
//! A torn write is only possible after the last fsync. So after each fsync
//! the syncer appends a sync mark, [`Entry::Synced`], naming how many bytes
//! that fsync made durable (a snapshot ends with one, and so does a clean
//! close). A record that fails its checksum is read past, to the next
//! intact record: if a later sync mark covers it, it was durable, and this
//! is damage (a flipped bit, a cut length field), which refuses the open;
//! otherwise it is the torn tail of a crash, and what is intact around it
//! holds. Either way nothing intact is dropped unread ([`salvage`]).

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
/// The first bytes of the file: the format and its version (2: with sync
/// marks, [`Entry::Synced`]).
const MAGIC: &[u8; 8] = b"MCPRHDS2";
/// The first bytes of a file of version 1, without sync marks: still read.
const MAGIC_V1: &[u8; 8] = b"MCPRHDS1";
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
    /// The file's first `upto` bytes were fsync'd: a record that starts
    /// before them and fails its checksum is damage, not a torn write.
    Synced { upto: u64 },
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
    /// Where the file held a torn write, if it did: records that fail
    /// their checksum past the last fsync. What is intact around it holds.
    pub stopped: Option<String>,
}

/// What a reading of the file found: what it says, and the damage (records
/// that fail their checksum although an fsync covered them) if any.
struct Scan {
    rec: Recorded,
    damage: Option<String>,
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
            Entry::Synced { .. } => {}
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
        Entry::Synced { upto } => {
            put_id(out, 4, "");
            out.extend_from_slice(&upto.to_le_bytes());
        }
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
            4 => Entry::Synced {
                upto: u64_of(take(&mut p, 8)?),
            },
            _ => return None,
        });
    }
    Some(out)
}

/// The record at the start of `rest`: its length and entries, if whole and
/// intact. Its first entry's kind is looked at before its checksum is
/// computed, so reading past damage costs little per byte.
fn record_at(rest: &[u8]) -> Option<(usize, Vec<Entry>)> {
    let h = rest.get(..RECORD_HEADER)?;
    let len = u32::from_le_bytes(h[..4].try_into().ok()?) as usize;
    let sum = u64::from_le_bytes(h[4..].try_into().ok()?);
    let payload = rest.get(RECORD_HEADER..RECORD_HEADER + len)?;
    if payload.first().is_some_and(|k| !(1..=4).contains(k)) {
        return None;
    }
    (xxhash_rust::xxh3::xxh3_64(payload) == sum)
        .then(|| decode_payload(payload))
        .flatten()
        .map(|entries| (len, entries))
}

/// Reads a whole file's bytes, every intact record of it: a record that
/// fails its checksum is read past to the next intact one. `Err` only for
/// a file that is not a committed-heads record (wrong header).
fn scan(bytes: &[u8]) -> Result<Scan, String> {
    let v1 = match bytes.get(..MAGIC.len()) {
        Some(m) if m == MAGIC.as_slice() => false,
        Some(m) if m == MAGIC_V1.as_slice() => true,
        _ => return Err("its header is not a committed-heads record's".into()),
    };
    let mut rec = Recorded::default();
    // Bad stretches: where each starts, and whether an intact record follows.
    let mut bad: Vec<(usize, bool)> = Vec::new();
    let mut synced = 0u64;
    let mut at = MAGIC.len();
    while at < bytes.len() {
        if let Some((len, entries)) = record_at(&bytes[at..]) {
            for e in entries {
                match e {
                    Entry::Synced { upto } => synced = synced.max(upto),
                    e => rec.apply(e),
                }
            }
            at += RECORD_HEADER + len;
            continue;
        }
        let next =
            (at + 1..bytes.len()).find(|&q| record_at(&bytes[q..]).is_some_and(|(len, _)| len > 0));
        bad.push((at, next.is_some()));
        match next {
            Some(q) => at = q,
            None => break,
        }
    }
    // Durable bytes that fail their checksum are damage; so is, in a file
    // without sync marks, a bad stretch with intact records after it.
    let damaged = bad
        .iter()
        .find(|(start, followed)| (*start as u64) < synced || (v1 && *followed));
    let damage = damaged.map(|(start, _)| {
        format!(
            "a record at byte {start} of {} fails its checksum although the record was fsync'd (intact records follow it)",
            bytes.len()
        )
    });
    rec.stopped = bad.first().map(|(start, _)| {
        format!(
            "{} stretch(es) from byte {start} of {} fail their checksum: a torn write",
            bad.len(),
            bytes.len()
        )
    });
    Ok(Scan { rec, damage })
}

/// Parses a whole file's bytes. `Err` for a file that is not a
/// committed-heads record (wrong header) or that is damaged inside: a
/// record that fails its checksum although an fsync covered it (a later
/// sync mark says so; in a file of version 1, any record intact after it).
/// Bad records past the last fsync are a torn write (a crash cut them, up
/// to [`SYNC_EVERY`] of them after a power failure): they are noted in
/// [`Recorded::stopped`], and every intact record holds.
pub(super) fn parse(bytes: &[u8]) -> Result<Recorded, String> {
    let scan = scan(bytes)?;
    match scan.damage {
        Some(why) => Err(why),
        None => Ok(scan.rec),
    }
}

/// Reads the record in `dir`: `Ok(None)` when there is none.
pub(super) fn read(dir: &Path) -> Result<Option<Recorded>, String> {
    match std::fs::read(dir.join(FILE)) {
        Ok(bytes) => parse(&bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// What a damaged record in `dir` still says: every intact record, read
/// past the damage (`log check --repair` applies them before it replaces
/// the file). `None` when there is no file, or it is not a record at all.
pub(super) fn salvage(dir: &Path) -> Option<Recorded> {
    let bytes = std::fs::read(dir.join(FILE)).ok()?;
    scan(&bytes).ok().map(|s| s.rec)
}

/// Writes `entries` as a new record file, durably, replacing the old one
/// atomically (written aside, fsync'd, renamed, directory fsync'd), ending
/// with a sync mark of everything before it; the file and its length.
fn write_snapshot(dir: &Path, entries: &[Entry]) -> std::io::Result<(File, u64)> {
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
    payload.clear();
    let upto = out.len() as u64;
    encode_entry(&Entry::Synced { upto }, &mut payload);
    seal(&payload, &mut out);
    let mut f = File::create(&tmp)?;
    f.write_all(&out)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(FILE))?;
    File::open(dir)?.sync_all()?;
    let f = OpenOptions::new().append(true).open(dir.join(FILE))?;
    Ok((f, out.len() as u64))
}

/// The file being appended to, and its length.
struct Out {
    file: Arc<File>,
    len: u64,
}

impl Out {
    /// Appends one sealed record; on a failed write, cuts what was written
    /// (no torn record in the middle of the file).
    fn write(&mut self, record: &[u8]) -> std::io::Result<()> {
        if let Err(e) = (&*self.file).write_all(record) {
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += record.len() as u64;
        Ok(())
    }
}

/// What the committer and the syncer thread share.
struct Shared {
    out: Mutex<Out>,
    dirty: AtomicBool,
    stop: Mutex<bool>,
    wake: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The committer's handle on the record: appends, rotation, and the syncer
/// thread that fsyncs what was appended and marks it synced.
pub(super) struct HeadsWriter {
    dir: PathBuf,
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
        let (file, len) = write_snapshot(dir, entries)?;
        let shared = Arc::new(Shared {
            out: Mutex::new(Out {
                file: Arc::new(file),
                len,
            }),
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
        let len = {
            let mut out = lock(&self.shared.out);
            out.write(&self.buf)?;
            out.len
        };
        self.shared.dirty.store(true, Ordering::Release);
        Ok(len > self.snapshot_len + ROTATE_BYTES.max(self.snapshot_len))
    }

    /// Rewrites the record as a snapshot of `entries`.
    pub fn rotate(&mut self, entries: &[Entry]) -> std::io::Result<()> {
        let (file, len) = write_snapshot(&self.dir, entries)?;
        *lock(&self.shared.out) = Out {
            file: Arc::new(file),
            len,
        };
        self.snapshot_len = len;
        Ok(())
    }
}

impl Drop for HeadsWriter {
    /// Stops the syncer after its last fsync and sync mark, so a clean close
    /// leaves the record complete and marked on disk.
    fn drop(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
    }
}

/// Fsyncs the file, then appends a sync mark of what that made durable (a
/// record appended meanwhile is not covered). The mark itself waits for
/// the next fsync, which only more appends (or the close) bring.
fn sync_and_mark(s: &Shared) {
    let (file, upto) = {
        let out = lock(&s.out);
        (out.file.clone(), out.len)
    };
    if let Err(e) = file.sync_data() {
        tracing::error!(error = %e, "could not fsync the committed-heads record");
        return;
    }
    let mut payload = Vec::new();
    encode_entry(&Entry::Synced { upto }, &mut payload);
    let mut record = Vec::new();
    seal(&payload, &mut record);
    let mut out = lock(&s.out);
    // Rotated meanwhile: the new file carries a mark of its own.
    if Arc::ptr_eq(&out.file, &file) {
        if let Err(e) = out.write(&record) {
            tracing::error!(error = %e, "could not mark the committed-heads record synced");
        }
    }
}

fn sync_loop(s: &Shared) {
    loop {
        let stop = {
            let guard = lock(&s.stop);
            let (guard, _) = s
                .wake
                .wait_timeout_while(guard, SYNC_EVERY, |stop| !*stop)
                .unwrap_or_else(|e| e.into_inner());
            *guard
        };
        if s.dirty.swap(false, Ordering::AcqRel) {
            sync_and_mark(s);
        }
        if stop {
            // The last mark durable too.
            let file = lock(&s.out).file.clone();
            if let Err(e) = file.sync_data() {
                tracing::error!(error = %e, "could not fsync the committed-heads record");
            }
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
#[path = "heads_tests.rs"]
mod tests;
