//! The log contract: what every backend must do.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{backends, msg};
use bytes::Bytes;
use mcp_resume_log::{Log, LogError, Retention, StreamKey};
use mcp_resume_testkit::rt;

const S: StreamKey = StreamKey::Session;

#[test]
fn append_read_bounds() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let log = b.log();
            log.create_session("a", Bytes::from_static(b"{}"))
                .await
                .unwrap();
            // The seq-id backend runs what it is named for.
            assert_eq!(
                b.layout_of("a"),
                b.seq_ids.then_some("2".to_owned()),
                "{}",
                b.name
            );
            assert_eq!(log.bounds("a", S).await.unwrap().head, 0, "{}", b.name);
            assert_eq!(log.bounds("a", S).await.unwrap().floor, 1);
            assert_eq!(log.append("a", S, vec![msg(1)]).await.unwrap(), 1);
            assert_eq!(
                log.append("a", S, vec![msg(2), msg(3), msg(4)])
                    .await
                    .unwrap(),
                4
            );
            let evs = log.read("a", S, 1, 100).await.unwrap();
            assert_eq!(evs.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3, 4]);
            assert_eq!(evs[0].message, msg(2));
            assert_eq!(log.read("a", S, 0, 2).await.unwrap().len(), 2);
            assert!(log.read("a", S, 4, 10).await.unwrap().is_empty());
        }
    });
}

#[test]
fn three_distinct_errors() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 3;
        for b in backends(retention, 1024).await {
            let log = b.log();
            assert_eq!(
                log.read("nope", S, 0, 10).await,
                Err(LogError::NoSession("nope".into()))
            );
            log.create_session("a", Bytes::new()).await.unwrap();
            log.append("a", S, (1..=5).map(msg).collect())
                .await
                .unwrap();
            // head 5, floor 3
            assert_eq!(
                log.read("a", S, 6, 10).await,
                Err(LogError::Ahead {
                    cursor: 6,
                    head: 5,
                    floor: 3
                }),
                "{}",
                b.name
            );
            assert_eq!(
                log.read("a", S, 1, 10).await,
                Err(LogError::Truncated {
                    cursor: 1,
                    head: 5,
                    floor: 3
                })
            );
            assert_eq!(log.read("a", S, 2, 10).await.unwrap().len(), 3);
            assert!(matches!(
                log.append("a", StreamKey::Request(9), vec![msg(1)]).await,
                Err(LogError::NoStream { .. })
            ));
        }
    });
}

#[test]
fn commit_point_has_no_gap_and_no_duplicate_under_racing_appends() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 1_000_000;
        for b in backends(retention, 1 << 16).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            const TOTAL: u64 = 2000;
            let writer = {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut n = 0;
                    while n < TOTAL {
                        let k = (n % 7 + 1).min(TOTAL - n);
                        log.append("a", S, (n + 1..=n + k).map(msg).collect())
                            .await
                            .unwrap();
                        n += k;
                        tokio::task::yield_now().await;
                    }
                })
            };
            let mut readers = Vec::new();
            for r in 0..16u64 {
                let log = log.clone();
                readers.push(tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_micros(r * 300)).await;
                    // A reader from cursor `prior`: replay to C, then the tail.
                    let prior = log.bounds("a", S).await.unwrap().head / 2;
                    let (bounds, mut sub) = log.subscribe("a", S).await.unwrap();
                    let mut seen = Vec::new();
                    let mut after = prior;
                    while after < bounds.head {
                        // The replay stops at C: what comes after C is the tail's.
                        let evs = log.read("a", S, after, 64).await.unwrap();
                        let evs: Vec<_> =
                            evs.into_iter().filter(|e| e.seq <= bounds.head).collect();
                        after = evs.last().unwrap().seq;
                        seen.extend(evs.into_iter().map(|e| e.seq));
                    }
                    while seen.last().copied().unwrap_or(prior) < TOTAL {
                        seen.push(sub.next().await.unwrap().seq);
                    }
                    (prior, seen)
                }));
            }
            writer.await.unwrap();
            for r in readers {
                let (prior, seen) = r.await.unwrap();
                assert_eq!(seen, (prior + 1..=TOTAL).collect::<Vec<_>>(), "{}", b.name);
            }
        }
    });
}

#[test]
fn a_slow_subscriber_gets_lagged_with_its_cursor() {
    rt().block_on(async {
        for b in backends(Retention::default(), 4).await {
            let log = b.log();
            log.create_session("a", Bytes::new()).await.unwrap();
            log.append("a", S, vec![msg(1)]).await.unwrap();
            let (bounds, mut sub) = log.subscribe("a", S).await.unwrap();
            assert_eq!(bounds.head, 1);
            log.append("a", S, (2..=20).map(msg).collect())
                .await
                .unwrap();
            // Slow: it reads nothing for a while. (Redis delivers to the
            // subscriber after the append returns, so a reader that starts at
            // once could keep up; that one is not slow.)
            tokio::time::sleep(Duration::from_secs(1)).await;
            let mut got = Vec::new();
            let err = loop {
                match tokio::time::timeout(Duration::from_secs(10), sub.next())
                    .await
                    .unwrap_or_else(|_| panic!("{}: stuck after {got:?}", b.name))
                {
                    Ok(e) => got.push(e.seq),
                    Err(e) => break e,
                }
            };
            assert_eq!(got, vec![2, 3, 4, 5], "{}", b.name);
            assert_eq!(err, LogError::Lagged { cursor: 5 });
        }
    });
}

#[test]
fn an_ended_session_stays_dead() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            log.append("a", S, vec![msg(1)]).await.unwrap();
            let (_, mut sub) = log.subscribe("a", S).await.unwrap();
            log.end_session("a").await.unwrap();
            assert_eq!(sub.next().await, Err(LogError::SessionEnded), "{}", b.name);
            assert!(matches!(
                log.read("a", S, 0, 1).await,
                Err(LogError::NoSession(_))
            ));
            assert!(matches!(
                log.append("a", S, vec![msg(2)]).await,
                Err(LogError::NoSession(_))
            ));
            assert!(matches!(
                log.create_session("a", Bytes::new()).await,
                Err(LogError::SessionExists(_))
            ));
            drop(log);
            b.restart().await;
            if b.durable() {
                assert!(matches!(
                    b.log().session("a").await,
                    Err(LogError::NoSession(_))
                ));
                assert!(matches!(
                    b.log().create_session("a", Bytes::new()).await,
                    Err(LogError::SessionExists(_))
                ));
            }
        }
    });
}

/// `append_or_create`: a session that never existed is created by it (or,
/// on a log that cannot do both in one commit, refused as by `append`, for
/// the caller to create), with the record given; a live one is appended to
/// and keeps its record; an ended one is never created again.
#[test]
fn append_or_create_creates_only_what_never_existed() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            let owner = Bytes::from_static(b"owner");
            match log
                .append_or_create("new", S, vec![msg(1)], owner.clone())
                .await
            {
                Ok(seq) => {
                    assert_eq!(seq, 1, "{}", b.name);
                    assert_eq!(log.read("new", S, 0, 10).await.unwrap().len(), 1);
                    assert_eq!(
                        log.session("new").await.unwrap().meta,
                        owner,
                        "created with it"
                    );
                }
                Err(LogError::NoSession(_)) => {
                    assert!(!b.name.starts_with("disk"), "the disk log creates it");
                    assert!(log.session("new").await.is_err(), "{}", b.name);
                }
                Err(e) => panic!("{}: {e}", b.name),
            }
            log.create_session("live", Bytes::new()).await.unwrap();
            log.append("live", S, vec![msg(1)]).await.unwrap();
            let seq = log
                .append_or_create("live", S, vec![msg(2)], owner.clone())
                .await;
            assert_eq!(seq, Ok(2), "{}", b.name);
            assert!(
                log.session("live").await.unwrap().meta.is_empty(),
                "a live one keeps its record"
            );
            log.end_session("live").await.unwrap();
            assert!(
                matches!(
                    log.append_or_create("live", S, vec![msg(3)], Bytes::new())
                        .await,
                    Err(LogError::NoSession(_))
                ),
                "{}",
                b.name
            );
            assert!(log.session("live").await.is_err(), "{}", b.name);
        }
    });
}

#[test]
fn request_streams_are_numbered_and_separate() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::from_static(b"meta"))
                .await
                .unwrap();
            assert_eq!(
                log.open_request_stream("a", Bytes::new(), u64::MAX)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                log.open_request_stream("a", Bytes::new(), u64::MAX)
                    .await
                    .unwrap(),
                2
            );
            log.append("a", StreamKey::Request(2), vec![msg(1), msg(2)])
                .await
                .unwrap();
            log.append("a", S, vec![msg(9)]).await.unwrap();
            assert_eq!(
                log.bounds("a", StreamKey::Request(2)).await.unwrap().head,
                2
            );
            assert_eq!(
                log.bounds("a", StreamKey::Request(1)).await.unwrap().head,
                0
            );
            log.set_meta("a", Bytes::from_static(b"meta2"))
                .await
                .unwrap();
            drop(log);
            b.restart().await;
            if b.durable() {
                let log = b.log();
                assert_eq!(
                    log.session("a").await.unwrap().meta,
                    Bytes::from_static(b"meta2")
                );
                assert_eq!(
                    log.read("a", StreamKey::Request(2), 0, 10)
                        .await
                        .unwrap()
                        .len(),
                    2
                );
                assert_eq!(
                    log.open_request_stream("a", Bytes::new(), u64::MAX)
                        .await
                        .unwrap(),
                    3
                );
                assert_eq!(log.bounds("a", S).await.unwrap().head, 1);
            }
        }
    });
}

#[test]
fn many_sessions_append_concurrently() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let log: Arc<dyn Log> = b.log().clone();
            let mut tasks = Vec::new();
            for s in 0..32 {
                let log = log.clone();
                tasks.push(tokio::spawn(async move {
                    let id = format!("s{s}");
                    log.create_session(&id, Bytes::new()).await.unwrap();
                    for i in 1..=50 {
                        assert_eq!(log.append(&id, S, vec![msg(i)]).await.unwrap(), i);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            for s in 0..32 {
                let evs = log.read(&format!("s{s}"), S, 0, 1000).await.unwrap();
                assert_eq!(evs.len(), 50, "{}", b.name);
            }
        }
    });
}

#[test]
fn swap_meta_replaces_only_the_record_it_expects() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::from_static(b"v1"))
                .await
                .unwrap();
            // A writer that read v1 wins; one that read something else loses
            // and changes nothing.
            assert!(log
                .swap_meta("a", Bytes::from_static(b"v1"), Bytes::from_static(b"v2"))
                .await
                .unwrap());
            assert!(
                !log.swap_meta("a", Bytes::from_static(b"v1"), Bytes::from_static(b"v3"))
                    .await
                    .unwrap(),
                "{}",
                b.name
            );
            assert_eq!(
                log.session("a").await.unwrap().meta,
                Bytes::from_static(b"v2")
            );
            // Of many writers racing from the same record, exactly one wins.
            let racers = (0..8u8).map(|i| {
                let log = log.clone();
                async move {
                    log.swap_meta("a", Bytes::from_static(b"v2"), Bytes::from(vec![b'w', i]))
                        .await
                        .unwrap()
                }
            });
            let won = futures_util::future::join_all(racers).await;
            assert_eq!(won.iter().filter(|w| **w).count(), 1, "{}: {won:?}", b.name);
            // An ended session is no session.
            log.end_session("a").await.unwrap();
            assert!(matches!(
                log.swap_meta("a", Bytes::new(), Bytes::new()).await,
                Err(LogError::NoSession(_))
            ));
        }
    });
}
