//! A damaged log directory is refused at open with a clear error, never a
//! panic and never a silent loss.

use std::path::{Path, PathBuf};

use mcp_resume_log::{DiskLog, Log, LogError, Retention, StreamKey};

fn fill(path: &Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let log = DiskLog::open(path, Retention::default()).unwrap();
    rt.block_on(async {
        log.create_session("a", bytes::Bytes::new()).await.unwrap();
        for i in 0..200 {
            let m = bytes::Bytes::from(format!(r#"{{"i":{i},"pad":"{}"}}"#, "x".repeat(200)));
            log.append("a", StreamKey::Session, vec![m]).await.unwrap();
        }
    });
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

/// Opening either fails with `Corrupt`, or shows all 200 events intact.
fn refused_or_whole(path: &Path) -> Option<LogError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match DiskLog::open(path, Retention::default()) {
        Err(e) => {
            assert!(matches!(e, LogError::Corrupt(_)), "{e}");
            assert!(
                e.to_string().contains(&path.display().to_string()),
                "the error names the log: {e}"
            );
            Some(e)
        }
        Ok(log) => rt.block_on(async {
            let b = log
                .bounds("a", StreamKey::Session)
                .await
                .expect("the session survived");
            assert_eq!(b.head, 200, "no committed event may silently vanish");
            let evs = log.read("a", StreamKey::Session, 0, 1000).await.unwrap();
            assert_eq!(evs.len(), 200);
            None
        }),
    }
}

#[test]
fn garbage_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    fill(&path);
    for f in files(&path) {
        let len = std::fs::metadata(&f).unwrap().len() as usize;
        std::fs::write(&f, vec![0xA5u8; len]).unwrap();
    }
    assert!(
        refused_or_whole(&path).is_some(),
        "garbage everywhere cannot open as a log"
    );
}

#[test]
fn truncated_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    fill(&path);
    for f in files(&path) {
        let len = std::fs::metadata(&f).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(len / 3)
            .unwrap();
    }
    refused_or_whole(&path);
}

#[test]
fn flipped_bytes_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    fill(&path);
    for f in files(&path) {
        let mut bytes = std::fs::read(&f).unwrap();
        let mut i = bytes.len() / 2;
        while i < bytes.len() {
            bytes[i] ^= 0xFF;
            i += 512;
        }
        std::fs::write(&f, &bytes).unwrap();
    }
    refused_or_whole(&path);
}
