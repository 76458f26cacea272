//! Measures what ended sessions cost on the disk backend, before and after
//! their tombstones expire: resident memory (`/proc/self/statm`) and the
//! bytes of the keyspaces' tables after a full compaction (deleted keys
//! leave markers until then), beside the whole directory (mostly the
//! journal, which fjall preallocates).
//!
//! `cargo run --release -p mcp-resume-log --example tombstone_cost [-- SESSIONS]`
//!
//! Each round creates SESSIONS sessions (a 60-byte record, two events on the
//! session stream, a request stream with a record and one event) and ends
//! them. Rounds 1 and 2 keep the tombstones (what every ended session cost
//! before they expired); then they expire, and round 3 ends as many again and
//! expires them too: memory and disk should stay flat.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{DiskLog, Retention, StreamKey};
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};

fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn dir_bytes(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

async fn round(log: &DiskLog, tag: &str, n: usize) {
    let meta = Bytes::from(format!(
        r#"{{"tools":["emit","echo"],"pad":"{}"}}"#,
        "x".repeat(24)
    ));
    for i in 0..n {
        let id = format!("{tag}-{i:08}-0123456789abcdef");
        log.create_session(&id, meta.clone()).await.unwrap();
        let ev = Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"i":{i}}}}}"#
        ));
        log.append(&id, StreamKey::Session, vec![ev.clone(), ev.clone()])
            .await
            .unwrap();
        let r = log
            .open_request_stream(
                &id,
                Bytes::from_static(br#"{"id":7,"owner":"0123456789abcdef"}"#),
                u64::MAX,
            )
            .await
            .unwrap();
        log.append(&id, StreamKey::Request(r), vec![ev])
            .await
            .unwrap();
        log.end_session(&id).await.unwrap();
    }
}

struct Sample {
    rss: u64,
    /// Bytes of the keyspaces' tables after a full compaction.
    disk: u64,
    /// The whole directory, journal included (preallocated, so mostly flat).
    dir: u64,
    tombstones: usize,
}

fn sample(log: &DiskLog) -> Sample {
    log.compact().unwrap();
    Sample {
        rss: rss(),
        disk: log.storage_bytes().0,
        dir: dir_bytes(log.path()),
        tombstones: log.tombstones(),
    }
}

fn per(a: &Sample, b: &Sample, n: usize) -> String {
    format!(
        "RSS {:+.0} B/session, tables {:+.0} B/session",
        (b.rss as f64 - a.rss as f64) / n as f64,
        (b.disk as f64 - a.disk as f64) / n as f64
    )
}

fn show(label: &str, s: &Sample) {
    println!(
        "{label:<34} tombstones {:>6}  RSS {:>8.1} KiB  tables {:>8.1} KiB  dir {:>8.1} KiB",
        s.tombstones,
        s.rss as f64 / 1024.0,
        s.disk as f64 / 1024.0,
        s.dir as f64 / 1024.0
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(4000);
    let dir = tempfile::tempdir().unwrap();
    let log = DiskLog::open(dir.path().join("log"), Retention::default()).unwrap();
    let keep = Duration::from_secs(3600);
    // Warm up allocator and engine so round 1 measures sessions, not start-up.
    round(&log, "warm", 200).await;
    log.maintain(keep, Duration::ZERO).await.unwrap();
    let s0 = sample(&log);
    show("start", &s0);
    round(&log, "a", n).await;
    log.maintain(keep, keep).await.unwrap();
    let s1 = sample(&log);
    show(&format!("round 1: {n} ended, kept"), &s1);
    round(&log, "b", n).await;
    log.maintain(keep, keep).await.unwrap();
    let s2 = sample(&log);
    show(&format!("round 2: {n} more ended, kept"), &s2);
    log.maintain(keep, Duration::ZERO).await.unwrap();
    let s3 = sample(&log);
    show("all tombstones expired", &s3);
    round(&log, "c", n).await;
    log.maintain(keep, Duration::ZERO).await.unwrap();
    let s4 = sample(&log);
    show(&format!("round 3: {n} ended and expired"), &s4);
    drop(log);
    let log = DiskLog::open(dir.path().join("log"), Retention::default()).unwrap();
    let s5 = sample(&log);
    show("reopened", &s5);
    println!();
    println!("kept tombstones, round 1:   {}", per(&s0, &s1, n));
    println!("kept tombstones, round 2:   {}", per(&s1, &s2, n));
    println!("after expiry vs round 2:    {}", per(&s2, &s3, 2 * n));
    println!("expired tombstones, round 3: {}", per(&s3, &s4, n));
}
