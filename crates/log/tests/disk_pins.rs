//! A retention pin on the disk log outlives a restart (docs/protocol.md 6.1):
//! an upgrade that pinned the first event its reader needs, then a crash
//! and a quick restart, still finds that event, instead of a 409 because
//! count retention ran on without the pin.

use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{DiskLog, Retention, StreamKey};
use mcp_resume_log::{EventLog, SessionRecords};

fn batch(n: usize) -> Vec<Bytes> {
    (0..n)
        .map(|i| Bytes::from(format!("{{\"i\":{i}}}")))
        .collect()
}

#[tokio::test]
async fn a_pin_survives_a_restart_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let mut retention = Retention::default();
    retention.max_events = 3;
    let s = StreamKey::Session;
    {
        let log = DiskLog::open(dir.path(), retention).unwrap();
        log.create_session("a", Bytes::new()).await.unwrap();
        log.append("a", s, batch(5)).await.unwrap();
        assert_eq!(log.bounds("a", s).await.unwrap().floor, 3);
        log.pin("a", s, 3, Duration::from_secs(3)).await.unwrap();
        // A pin that is released is not kept.
        let gone = log.pin("a", s, 4, Duration::from_secs(60)).await.unwrap();
        log.unpin("a", gone).await.unwrap();
    }
    let log = DiskLog::open(dir.path(), retention).unwrap();
    log.append("a", s, batch(5)).await.unwrap();
    let b = log.bounds("a", s).await.unwrap();
    assert_eq!(
        (b.head, b.floor),
        (10, 3),
        "the pin held the floor across the restart"
    );
    assert_eq!(log.read("a", s, 2, 100).await.unwrap().len(), 8);
    drop(log);
    // Once it expires, it holds nothing, restarted or not.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    let log = DiskLog::open(dir.path(), retention).unwrap();
    log.append("a", s, batch(1)).await.unwrap();
    assert_eq!(log.bounds("a", s).await.unwrap().floor, 9);
}
