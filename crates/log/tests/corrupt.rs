//! A damaged data file is refused at open with a clear error, never a panic
//! and never a silent loss.

use mcp_resume_log::{DiskLog, Log, LogError, Retention, StreamKey};

fn fill(path: &std::path::Path) {
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

#[test]
fn garbage_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    std::fs::write(&path, vec![0xA5u8; 64 * 1024]).unwrap();
    let err = DiskLog::open(&path, Retention::default())
        .err()
        .expect("must refuse");
    assert!(matches!(err, LogError::Corrupt(_)), "{err}");
    assert!(
        err.to_string().contains("log.redb"),
        "the error names the file: {err}"
    );
}

#[test]
fn truncated_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    fill(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len / 3).unwrap();
    drop(f);
    match DiskLog::open(&path, Retention::default()) {
        Err(e) => assert!(matches!(e, LogError::Corrupt(_)), "{e}"),
        Ok(_) => panic!("a truncated file opened as if whole"),
    }
}

#[test]
fn flipped_bytes_are_detected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log.redb");
    fill(&path);
    let mut bytes = std::fs::read(&path).unwrap();
    // Damage every page past the header, where the tables live.
    let mut i = 8192;
    while i < bytes.len() {
        bytes[i] ^= 0xFF;
        i += 4096;
    }
    std::fs::write(&path, &bytes).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match DiskLog::open(&path, Retention::default()) {
        Err(e) => assert!(matches!(e, LogError::Corrupt(_)), "{e}"),
        Ok(log) => rt.block_on(async {
            // If redb could repair to an earlier good state, whatever it shows must be whole.
            if let Ok(b) = log.bounds("a", StreamKey::Session).await {
                let evs = log
                    .read("a", StreamKey::Session, b.floor - 1, 1000)
                    .await
                    .unwrap();
                assert_eq!(evs.len() as u64, b.head + 1 - b.floor);
            }
        }),
    }
}
