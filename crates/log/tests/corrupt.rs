//! A damaged log directory is refused at open with a clear error, never a
//! panic and never a silent loss: a log that opens must read back every
//! committed event identical (same seqs, same bytes) on every stream, with
//! every request stream's record, or keep every stream's committed head and
//! refuse what it lost loudly (docs/protocol.md 6.1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use mcp_resume_log::{DiskLog, LogError, Retention, StreamKey};
use mcp_resume_log::{EventLog, SessionRecords};

/// Everything committed: per (session, stream), the events in order; per
/// (session, request stream), its record.
#[derive(Default)]
struct Committed {
    events: BTreeMap<(String, StreamKey), Vec<(u64, Bytes)>>,
    records: BTreeMap<(String, u64), Bytes>,
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes two live sessions (a session stream of 200 events, request streams
/// with records and events) and one ended session; `salt` changes every
/// message's bytes but no seq.
fn fill(path: &Path, salt: &str) -> Committed {
    let log = DiskLog::open(path, Retention::default()).unwrap();
    let mut c = Committed::default();
    rt().block_on(async {
        for id in ["a", "b", "gone"] {
            log.create_session(id, Bytes::new()).await.unwrap();
            for r in 1..=3u64 {
                let rec = Bytes::from(format!(r#"{{"id":{r},"owner":"{id}{salt}"}}"#));
                assert_eq!(
                    log.open_request_stream(id, rec.clone(), u64::MAX)
                        .await
                        .unwrap(),
                    r
                );
                c.records.insert((id.into(), r), rec);
            }
            for (stream, n) in [
                (StreamKey::Session, 200),
                (StreamKey::Request(1), 5),
                (StreamKey::Request(3), 40),
            ] {
                let mut seq = 0;
                while seq < n {
                    let batch: Vec<Bytes> = (seq + 1..=(seq + 7).min(n))
                        .map(|i| {
                            Bytes::from(format!(
                                r#"{{"i":{i},"s":"{id}{salt}","pad":"{}"}}"#,
                                "x".repeat(150 + (i as usize % 60))
                            ))
                        })
                        .collect();
                    let first = seq + 1;
                    seq = log.append(id, stream, batch.clone()).await.unwrap();
                    c.events
                        .entry((id.into(), stream))
                        .or_default()
                        .extend((first..).zip(batch));
                }
            }
        }
        log.end_session("gone").await.unwrap();
        c.events.retain(|(id, _), _| id != "gone");
        c.records.retain(|(id, _), _| id != "gone");
    });
    c
}

/// How a reopened log stands against what was committed.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// The open failed with `Corrupt` naming the directory.
    Refused,
    /// Every committed event and record reads back identical.
    Whole,
    /// Served under docs/protocol.md 6.1: every stream keeps its committed
    /// head; every event still served is identical; every other one is
    /// refused loudly (`DataLost`), or its session answers `NoSession`.
    Damaged,
}

/// Checks the rules of docs/protocol.md 6.1 on an opened log: `Ok(true)`
/// when something was lost (loudly), `Ok(false)` when all is identical.
/// Then appends one event to every live stream: it must get the committed
/// head + 1, never a seq a reader already had.
async fn loud_or_identical(log: &DiskLog, c: &Committed) -> Result<bool, String> {
    let mut lost_any = false;
    let mut ids = log.session_ids().await.map_err(|e| e.to_string())?;
    ids.sort();
    if ids.iter().any(|id| id != "a" && id != "b") {
        return Err(format!("live sessions {ids:?}"));
    }
    for ((id, stream), want) in &c.events {
        let b = match log.bounds(id, *stream).await {
            Ok(b) => b,
            Err(LogError::NoSession(_)) if !ids.contains(id) => {
                lost_any = true;
                continue;
            }
            Err(e) => return Err(format!("{id} {stream:?}: {e}")),
        };
        let committed = want.len() as u64;
        if (b.floor, b.head) != (1, committed) {
            return Err(format!(
                "{id} {stream:?}: bounds {b:?}, committed head {committed}"
            ));
        }
        let mut after = 0;
        while after < b.head {
            match log.read(id, *stream, after, 10_000).await {
                Ok(evs) if evs.is_empty() => {
                    return Err(format!("{id} {stream:?}: an empty read after {after}"))
                }
                Ok(evs) => {
                    for e in evs {
                        if e.seq != after + 1 || want[(e.seq - 1) as usize].1 != e.message {
                            return Err(format!("{id} {stream:?}: event {} differs", e.seq));
                        }
                        after = e.seq;
                    }
                }
                Err(LogError::DataLost { from, to, .. }) if from == after + 1 && to <= b.head => {
                    lost_any = true;
                    after = to;
                }
                Err(e) => return Err(format!("{id} {stream:?} after {after}: {e}")),
            }
        }
    }
    for ((id, r), want) in &c.records {
        if !ids.contains(id) {
            continue;
        }
        match log.request_meta(id, *r).await {
            Ok(got) if got == *want => {}
            // The record of a stream that came back from the heads alone.
            Ok(got) if got.is_empty() => lost_any = true,
            other => return Err(format!("{id} request {r}: record {other:?}")),
        }
    }
    for id in &ids {
        if log.request_streams(id).await != Ok(3) {
            return Err(format!("{id}: request streams changed"));
        }
    }
    for ((id, stream), want) in &c.events {
        if !ids.contains(id) {
            continue;
        }
        let next = log
            .append(id, *stream, vec![Bytes::from_static(b"{}")])
            .await
            .map_err(|e| format!("{id} {stream:?}: append {e}"))?;
        if next != want.len() as u64 + 1 {
            return Err(format!(
                "{id} {stream:?}: the next append got seq {next}, committed head {}",
                want.len()
            ));
        }
    }
    Ok(lost_any)
}

/// Opening either fails with `Corrupt` naming the directory, or the log
/// serves what was committed identical or loudly short of it (and never
/// reuses a seq); anything else (a panic, another error, a silent
/// difference) fails the test.
fn outcome(path: &Path, c: &Committed) -> Outcome {
    match DiskLog::open(path, Retention::default()) {
        Err(e) => {
            assert!(matches!(e, LogError::Corrupt(_)), "{e}");
            assert!(
                e.to_string().contains(&path.display().to_string()),
                "the error names the log: {e}"
            );
            Outcome::Refused
        }
        Ok(log) => match rt().block_on(loud_or_identical(&log, c)) {
            Ok(false) => Outcome::Whole,
            Ok(true) => {
                assert!(
                    !log.damage_found().is_empty(),
                    "a log that lost something says so at open"
                );
                Outcome::Damaged
            }
            Err(diff) => panic!("opened, but a committed event is silently wrong: {diff}"),
        },
    }
}

/// The former oracle's name for the outcomes the tests accept.
fn refused_or_identical(path: &Path, c: &Committed) -> Outcome {
    outcome(path, c)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if std::fs::metadata(&p).unwrap().len() > 0 && !p.ends_with("lock") {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_intact_log_reads_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    assert_eq!(refused_or_identical(&path, &c), Outcome::Whole);
}

#[test]
fn the_check_rejects_a_log_with_the_same_seqs_but_other_bytes() {
    // The oracle itself: counting events would pass this log; comparing them must not.
    let dir = tempfile::tempdir().unwrap();
    let c = fill(&dir.path().join("one"), "");
    fill(&dir.path().join("other"), "!");
    let other = DiskLog::open(dir.path().join("other"), Retention::default()).unwrap();
    let diff = rt().block_on(loud_or_identical(&other, &c)).unwrap_err();
    assert!(diff.contains("differs"), "{diff}");
}

/// Every file damaged: the version marker fails first, so this proves the
/// refusal names the log, not the journal's checks (the journal tests do).
#[test]
fn garbage_in_every_file_is_refused_with_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    for f in files(&path) {
        let len = std::fs::metadata(&f).unwrap().len() as usize;
        std::fs::write(&f, vec![0xA5u8; len]).unwrap();
    }
    assert!(
        matches!(refused_or_identical(&path, &c), Outcome::Refused),
        "garbage everywhere cannot open as a log"
    );
}

#[test]
fn files_cut_to_a_third_are_refused_or_read_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    for f in files(&path) {
        let len = std::fs::metadata(&f).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(len / 3)
            .unwrap();
    }
    refused_or_identical(&path, &c);
}

#[test]
fn flipped_bytes_are_refused_or_read_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    for f in files(&path) {
        let mut bytes = std::fs::read(&f).unwrap();
        let mut i = bytes.len() / 2;
        while i < bytes.len() {
            bytes[i] ^= 0xFF;
            i += 512;
        }
        std::fs::write(&f, &bytes).unwrap();
    }
    refused_or_identical(&path, &c);
}

/// The journal (`*.jnl`, preallocated) and the length of what was written to it.
fn journal(path: &Path) -> (PathBuf, usize) {
    let f = files(path)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "jnl"))
        .expect("a journal");
    let bytes = std::fs::read(&f).unwrap();
    let used = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    (f, used)
}

/// The journal's checksums: one flipped byte early, midway or late in the
/// written data, with every other file intact.
#[test]
fn a_flipped_byte_inside_the_journals_data_is_refused_or_read_back_identical() {
    for at in [0.1, 0.5, 0.9] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let c = fill(&path, "");
        let (f, used) = journal(&path);
        let mut bytes = std::fs::read(&f).unwrap();
        bytes[(used as f64 * at) as usize] ^= 0x5A;
        std::fs::write(&f, &bytes).unwrap();
        refused_or_identical(&path, &c);
    }
}

/// A journal cut inside its data (fjall reads it as the torn tail of a
/// crash and recovers the batches before the cut): the committed-heads
/// record catches it, the streams keep their heads, the lost events are
/// refused loudly and no seq is handed out twice.
#[test]
fn a_journal_cut_inside_its_data_is_refused_or_served_loudly() {
    for at in [0.5, 0.99] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let c = fill(&path, "");
        let (f, used) = journal(&path);
        cut(&f, (used as f64 * at) as u64);
        let first = refused_or_identical(&path, &c);
        eprintln!("cut at {at}: {first:?}");
        if at == 0.5 {
            assert_eq!(first, Outcome::Damaged, "a cut midway is caught");
        }
        if first == Outcome::Damaged {
            // Known damage stays known across a restart, and nothing new is found.
            let log = DiskLog::open(&path, Retention::default()).unwrap();
            assert!(log.damage_found().is_empty());
            assert!(!log.lost_ranges().is_empty());
        }
    }
}

fn cut(f: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(f)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// The sweep: the journal cut at every 4 KiB of what was written and in its
/// last bytes. Every case opens identical, is refused, or is served loudly.
#[test]
fn a_journal_cut_anywhere_is_never_a_silent_renumbering() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    let c = fill(&pristine, "");
    let (f, used) = journal(&pristine);
    let name = f.strip_prefix(&pristine).unwrap().to_path_buf();
    let mut cuts: Vec<u64> = (1..)
        .map(|k| k * 4096)
        .take_while(|&n| n < used as u64)
        .collect();
    cuts.extend([used as u64 - 1, used as u64 - 7, used as u64 - 100]);
    let mut seen = std::collections::BTreeMap::new();
    for at in cuts {
        let path = dir.path().join(format!("cut{at}"));
        copy_dir(&pristine, &path);
        cut(&path.join(&name), at);
        let o = outcome(&path, &c);
        *seen.entry(format!("{o:?}")).or_insert(0) += 1;
        std::fs::remove_dir_all(&path).unwrap();
    }
    eprintln!("journal of {used} bytes, outcomes: {seen:?}");
    assert!(
        seen.contains_key("Damaged"),
        "the sweep never lost anything? {seen:?}"
    );
}

/// Table files (fjall's sorted tables, after a flush): bit flips in each,
/// and each deleted in turn.
#[test]
fn a_damaged_or_deleted_table_is_refused_or_served_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let pristine = dir.path().join("pristine");
    let c = fill(&pristine, "");
    {
        // Move everything out of the journal into tables.
        let log = DiskLog::open(&pristine, Retention::default()).unwrap();
        log.compact().unwrap();
    }
    let tables: Vec<PathBuf> = files(&pristine)
        .into_iter()
        .filter(|f| f.components().any(|c| c.as_os_str() == "tables"))
        .map(|f| f.strip_prefix(&pristine).unwrap().to_path_buf())
        .collect();
    assert!(
        !tables.is_empty(),
        "no table files under {}",
        pristine.display()
    );
    for (k, t) in tables.iter().enumerate() {
        let path = dir.path().join(format!("flip{k}"));
        copy_dir(&pristine, &path);
        let mut bytes = std::fs::read(path.join(t)).unwrap();
        for i in (bytes.len() / 3..bytes.len()).step_by(97) {
            bytes[i] ^= 0x10;
        }
        std::fs::write(path.join(t), &bytes).unwrap();
        eprintln!("{} flipped: {:?}", t.display(), outcome(&path, &c));
        std::fs::remove_dir_all(&path).unwrap();
        let path = dir.path().join(format!("gone{k}"));
        copy_dir(&pristine, &path);
        std::fs::remove_file(path.join(t)).unwrap();
        eprintln!("{} deleted: {:?}", t.display(), outcome(&path, &c));
        std::fs::remove_dir_all(&path).unwrap();
    }
}

/// The committed-heads record itself deleted: refused, never opened blind.
#[test]
fn a_missing_committed_heads_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    std::fs::remove_file(path.join("committed-heads")).unwrap();
    assert_eq!(outcome(&path, &c), Outcome::Refused);
    // The offline check names it; the repair accepts the log as it is.
    let report = DiskLog::check(&path, false).unwrap();
    assert!(
        !report.is_clean() && !report.problems.is_empty(),
        "{report:?}"
    );
    let report = DiskLog::check(&path, true).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    assert_eq!(outcome(&path, &c), Outcome::Whole);
    assert!(DiskLog::check(&path, false).unwrap().is_clean());
}

/// After a damaged open the offline check still names the damage (the lost
/// ranges are kept with their streams), and a repair leaves it servable.
#[test]
fn the_check_names_known_damage_and_a_repair_keeps_it_servable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let c = fill(&path, "");
    let (f, used) = journal(&path);
    cut(&f, used as u64 / 2);
    assert_eq!(outcome(&path, &c), Outcome::Damaged);
    let report = DiskLog::check(&path, false).unwrap();
    assert!(
        !report.damage.is_empty() && report.problems.is_empty(),
        "{report:?}"
    );
    assert!(report.events > 0);
    let report = DiskLog::check(&path, true).unwrap();
    assert!(report.problems.is_empty(), "{report:?}");
    let log = DiskLog::open(&path, Retention::default()).unwrap();
    assert!(log.damage_found().is_empty() && !log.lost_ranges().is_empty());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}
