//! `first_young` against reads that fail or race a count trim.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{first_young, ReadEvents};
use crate::types::now_ms;
use crate::{Event, LogError, MemoryLog, Retention, Seq, StreamKey};
use crate::{EventLog, SessionRecords};

const S: StreamKey = StreamKey::Session;

fn msg(i: u64) -> Bytes {
    Bytes::from(format!("{{\"i\":{i}}}"))
}

/// A memory log whose first read first appends `extra` events, so count
/// retention moves the floor between the scan's bounds and its read.
struct Racing {
    log: MemoryLog,
    extra: u64,
    raced: AtomicBool,
}

#[async_trait]
impl ReadEvents for Racing {
    async fn read_events(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        if !self.raced.swap(true, Ordering::Relaxed) {
            let head = self.log.bounds(id, stream).await?.head;
            let more = (head + 1..=head + self.extra).map(msg).collect();
            self.log.append(id, stream, more).await?;
        }
        self.log.read(id, stream, after, max).await
    }
}

/// Every read fails.
struct Broken;

#[async_trait]
impl ReadEvents for Broken {
    async fn read_events(
        &self,
        _: &str,
        _: StreamKey,
        _: Seq,
        _: usize,
    ) -> Result<Vec<Event>, LogError> {
        Err(LogError::Unavailable("timed out".into()))
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_failed_read_is_an_error_not_every_event_is_old() {
    rt().block_on(async {
        let b = crate::Bounds::new(10, 1);
        let r = first_young(&Broken, "a", S, b, now_ms()).await;
        assert_eq!(r, Err(LogError::Unavailable("timed out".into())));
    });
}

#[test]
fn a_read_racing_a_count_trim_retries_from_the_new_floor() {
    rt().block_on(async {
        let log = MemoryLog::new(Retention {
            max_events: 10,
            max_age: Duration::from_secs(3600),
        });
        log.create_session("a", Bytes::new()).await.unwrap();
        log.append("a", S, (1..=5).map(msg).collect())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let cutoff = now_ms();
        log.append("a", S, (6..=10).map(msg).collect())
            .await
            .unwrap();
        let b = log.bounds("a", S).await.unwrap();
        assert_eq!((b.head, b.floor), (10, 1));
        let racing = Racing {
            log,
            extra: 5,
            raced: AtomicBool::new(false),
        };
        // The race moves the floor to 6: the read from 0 is Truncated. Events
        // 6..=10 are young and must stay; "head + 1" would have trimmed them.
        let young = first_young(&racing, "a", S, b, cutoff).await.unwrap();
        assert_eq!(young, 6);
    });
}

#[test]
fn only_events_seen_old_are_trimmed() {
    rt().block_on(async {
        let log = MemoryLog::default();
        log.create_session("a", Bytes::new()).await.unwrap();
        log.append("a", S, (1..=3).map(msg).collect())
            .await
            .unwrap();
        let b = log.bounds("a", S).await.unwrap();
        // Everything is older than a cutoff in the future: up to the head goes.
        let all = first_young(&log, "a", S, b, now_ms() + 60_000)
            .await
            .unwrap();
        assert_eq!(all, 4);
        // Nothing is older than a cutoff in the past.
        assert_eq!(first_young(&log, "a", S, b, 0).await.unwrap(), 1);
    });
}

/// Events `1..=head` committed at `at_ms[seq - 1]`, of which `lost` are gone
/// (read as a disk log with a lost range reads).
struct Damaged {
    at_ms: Vec<u64>,
    lost: (Seq, Seq),
}

#[async_trait]
impl ReadEvents for Damaged {
    async fn read_events(
        &self,
        _: &str,
        _: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        let (from, to) = self.lost;
        let head = self.at_ms.len() as Seq;
        if after + 1 >= from && after < to {
            return Err(LogError::DataLost {
                cursor: after,
                from,
                to,
                head,
                floor: 1,
            });
        }
        let upper = if after < from { from - 1 } else { head };
        Ok((after + 1..=upper)
            .take(max)
            .map(|seq| Event {
                seq,
                at_ms: self.at_ms[seq as usize - 1],
                message: msg(seq),
            })
            .collect())
    }
}

/// Lost events have no commit time: they stay (and readers that need them
/// keep getting `data-lost`, never `truncated`) until an event after them is
/// seen to be old.
#[test]
fn lost_events_go_only_once_a_later_event_is_seen_old() {
    rt().block_on(async {
        // 1..=3 at t=10, 4..=6 lost, 7 at t=20, 8 at t=30.
        let d = Damaged {
            at_ms: vec![10, 10, 10, 0, 0, 0, 20, 30],
            lost: (4, 6),
        };
        let b = crate::Bounds::new(8, 1);
        assert_eq!(
            first_young(&d, "a", S, b, 15).await.unwrap(),
            4,
            "7 young: the lost range stays"
        );
        assert_eq!(
            first_young(&d, "a", S, b, 25).await.unwrap(),
            8,
            "7 old: the lost range before it goes"
        );
        assert_eq!(first_young(&d, "a", S, b, 99).await.unwrap(), 9);
        assert_eq!(first_young(&d, "a", S, b, 5).await.unwrap(), 1);
        // Lost up to the head: nothing after it can be seen old, so it stays.
        let d = Damaged {
            at_ms: vec![10, 10, 0, 0],
            lost: (3, 4),
        };
        let b = crate::Bounds::new(4, 1);
        assert_eq!(first_young(&d, "a", S, b, 99).await.unwrap(), 3);
        // All of it lost.
        let d = Damaged {
            at_ms: vec![0; 4],
            lost: (1, 4),
        };
        assert_eq!(first_young(&d, "a", S, b, 99).await.unwrap(), 1);
    });
}
