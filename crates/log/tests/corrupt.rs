//! A damaged log directory is refused at open with a clear error, never a
//! panic and never a silent loss: a log that opens must read back every
//! committed event identical (same seqs, same bytes) on every stream, with
//! every request stream's record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use mcp_resume_log::{DiskLog, Log, LogError, Retention, StreamKey};

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
                assert_eq!(log.open_request_stream(id, rec.clone()).await.unwrap(), r);
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

/// `Ok` when every committed event and record reads back identical, and
/// nothing else is there; otherwise what differs.
async fn identical(log: &DiskLog, c: &Committed) -> Result<(), String> {
    let mut ids = log.session_ids().await.map_err(|e| e.to_string())?;
    ids.sort();
    if ids != ["a", "b"] {
        return Err(format!("live sessions {ids:?}"));
    }
    for ((id, stream), want) in &c.events {
        let b = log
            .bounds(id, *stream)
            .await
            .map_err(|e| format!("{id} {stream:?}: {e}"))?;
        if (b.floor, b.head) != (1, want.len() as u64) {
            return Err(format!("{id} {stream:?}: bounds {b:?}"));
        }
        let got = log
            .read(id, *stream, 0, 10_000)
            .await
            .map_err(|e| format!("{id} {stream:?}: {e}"))?;
        let got: Vec<(u64, Bytes)> = got.into_iter().map(|e| (e.seq, e.message)).collect();
        if &got != want {
            let at = got.iter().zip(want).position(|(g, w)| g != w);
            return Err(format!(
                "{id} {stream:?}: events differ (first at index {at:?})"
            ));
        }
    }
    for ((id, r), want) in &c.records {
        let got = log.request_meta(id, *r).await.map_err(|e| e.to_string())?;
        if got != want {
            return Err(format!("{id} request {r}: record differs"));
        }
    }
    for id in ["a", "b"] {
        if log.request_streams(id).await != Ok(3) {
            return Err(format!("{id}: request streams changed"));
        }
    }
    Ok(())
}

enum Outcome {
    Refused,
    Whole,
}

/// Opening either fails with `Corrupt` naming the directory, or the log
/// reads back identical; anything else (a panic, another error, a
/// difference) fails the test.
fn refused_or_identical(path: &Path, c: &Committed) -> Outcome {
    match DiskLog::open(path, Retention::default()) {
        Err(e) => {
            eprintln!("refused: {e}");
            assert!(matches!(e, LogError::Corrupt(_)), "{e}");
            assert!(
                e.to_string().contains(&path.display().to_string()),
                "the error names the log: {e}"
            );
            Outcome::Refused
        }
        Ok(log) => {
            if let Err(diff) = rt().block_on(identical(&log, c)) {
                panic!("opened, but not every committed event is intact: {diff}");
            }
            eprintln!("opened, every committed event identical");
            Outcome::Whole
        }
    }
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
    assert!(matches!(refused_or_identical(&path, &c), Outcome::Whole));
}

#[test]
fn the_check_rejects_a_log_with_the_same_seqs_but_other_bytes() {
    // The oracle itself: counting events would pass this log; comparing them must not.
    let dir = tempfile::tempdir().unwrap();
    let c = fill(&dir.path().join("one"), "");
    fill(&dir.path().join("other"), "!");
    let other = DiskLog::open(dir.path().join("other"), Retention::default()).unwrap();
    let diff = rt().block_on(identical(&other, &c)).unwrap_err();
    assert!(diff.contains("differ"), "{diff}");
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

/// Known silent loss, kept visible: fjall reads a journal cut short inside
/// its data as the torn tail of a crash and recovers the batches before the
/// cut, so the log opens with fsync'd, acknowledged events missing (seen:
/// session `b` back at head 161 of 200). Telling a cut from a crash needs a
/// record of the committed head outside the journal; not done yet. Run with
/// `--ignored` to see it.
#[test]
#[ignore = "known: a journal cut inside its data loses committed events silently"]
fn a_journal_cut_inside_its_data_is_refused_or_read_back_identical() {
    for at in [0.5, 0.99] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let c = fill(&path, "");
        let (f, used) = journal(&path);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len((used as f64 * at) as u64)
            .unwrap();
        refused_or_identical(&path, &c);
    }
}
