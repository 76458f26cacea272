//! Request-stream records, the sweep's view of sessions, and instance
//! liveness: what a server needs to end, after a crash, the calls whose
//! handler died.

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, RedisLog, Retention, StreamKey};
use mcp_resume_testkit::rt;

use crate::common::{backends, msg};
use mcp_resume_log::{EventLog, Leases, Maintenance};

const S: StreamKey = StreamKey::Session;

fn no_stream(r: u64) -> LogError {
    LogError::NoStream {
        session: "a".into(),
        stream: r,
    }
}

/// A session at its limit of request streams is refused, and the refusal
/// writes nothing: the count stays, no record is kept, the next number is
/// the one a raised limit opens (issue 58: 3,000 refused POSTs grew the disk
/// log by 278 KiB).
#[test]
fn an_open_past_the_limit_is_refused_and_writes_nothing() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            for r in 1..=2 {
                assert_eq!(
                    log.open_request_stream("a", Bytes::new(), 2).await.unwrap(),
                    r
                );
            }
            let refused = LogError::TooManyStreams {
                session: "a".into(),
                max: 2,
            };
            for _ in 0..100 {
                let m = Bytes::from_static(b"refused");
                assert_eq!(
                    log.open_request_stream("a", m, 2).await,
                    Err(refused.clone()),
                    "{}",
                    b.name
                );
            }
            // A carrier to the lease holder counts as a stream too.
            let owner = log.claim("a").await.unwrap();
            let owner = owner.unwrap_or_else(|| log.instance().to_owned());
            assert_eq!(
                log.open_carrier("a", &owner, Bytes::new(), 2).await,
                Err(refused.clone()),
                "{}",
                b.name
            );
            assert_eq!(log.request_streams("a").await.unwrap(), 2, "{}", b.name);
            assert_eq!(
                log.request_meta("a", 3).await,
                Err(no_stream(3)),
                "{}",
                b.name
            );
            drop(log);
            b.restart().await;
            let log = b.log();
            if b.durable() {
                assert_eq!(log.request_streams("a").await.unwrap(), 2, "{}", b.name);
                assert_eq!(log.request_meta("a", 3).await, Err(no_stream(3)));
                assert_eq!(
                    log.open_request_stream("a", Bytes::new(), 3).await.unwrap(),
                    3
                );
            }
        }
    });
}

#[test]
fn a_request_streams_record_is_kept_and_survives_a_restart() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            assert_eq!(log.request_streams("a").await.unwrap(), 0, "{}", b.name);
            let m1 = Bytes::from_static(br#"{"id":1,"owner":"x"}"#);
            let m2 = Bytes::from(vec![0u8, 255, 7]); // opaque: any bytes
            assert_eq!(
                log.open_request_stream("a", m1.clone(), u64::MAX)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                log.open_request_stream("a", m2.clone(), u64::MAX)
                    .await
                    .unwrap(),
                2
            );
            log.append("a", StreamKey::Request(1), vec![msg(1)])
                .await
                .unwrap();
            assert_eq!(log.request_meta("a", 1).await.unwrap(), m1, "{}", b.name);
            assert_eq!(log.request_meta("a", 2).await.unwrap(), m2);
            assert_eq!(log.request_meta("a", 3).await, Err(no_stream(3)));
            assert_eq!(log.request_meta("a", 0).await, Err(no_stream(0)));
            assert_eq!(log.request_streams("a").await.unwrap(), 2);
            assert_eq!(
                log.request_meta("nope", 1).await,
                Err(LogError::NoSession("nope".into()))
            );
            assert_eq!(
                log.request_streams("nope").await,
                Err(LogError::NoSession("nope".into()))
            );
            drop(log);
            b.restart().await;
            if b.durable() {
                let log = b.log();
                assert_eq!(log.request_meta("a", 1).await.unwrap(), m1, "{}", b.name);
                assert_eq!(log.request_meta("a", 2).await.unwrap(), m2);
                assert_eq!(log.request_streams("a").await.unwrap(), 2);
                assert_eq!(
                    log.open_request_stream("a", m1.clone(), u64::MAX)
                        .await
                        .unwrap(),
                    3
                );
                assert_eq!(log.request_meta("a", 3).await.unwrap(), m1);
            }
            let log = b.log();
            log.end_session("a").await.unwrap();
            assert_eq!(
                log.request_meta("a", 1).await,
                Err(LogError::NoSession("a".into()))
            );
            // Ending took the records too: the store opens clean.
            b.restart().await;
            assert!(b.log().session_ids().await.unwrap().is_empty());
        }
    });
}

#[test]
fn session_ids_are_the_live_sessions() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let log = b.log().clone();
            for id in ["a", "b", "c"] {
                log.create_session(id, Bytes::new()).await.unwrap();
            }
            log.end_session("b").await.unwrap();
            let mut ids = log.session_ids().await.unwrap();
            ids.sort();
            assert_eq!(ids, ["a", "c"], "{}", b.name);
            drop(log);
            b.restart().await;
            if b.durable() {
                let mut ids = b.log().session_ids().await.unwrap();
                ids.sort();
                assert_eq!(ids, ["a", "c"], "{} after a restart", b.name);
            }
        }
    });
}

#[test]
fn only_a_running_handle_counts_as_alive() {
    rt().block_on(async {
        for mut b in backends(Retention::default(), 1024).await {
            let first = b.log().instance().to_owned();
            assert!(first.len() >= 16, "{}: a random id, not {first:?}", b.name);
            assert!(b.log().instance_alive(&first).await.unwrap(), "{}", b.name);
            assert!(!b.log().instance_alive("someone-else").await.unwrap());
            if let Some(url) = b.redis_url() {
                // A second process on the same Redis sees the first alive,
                // then dead once it closes.
                let other = RedisLog::connect(url, Retention::default(), 0)
                    .await
                    .unwrap();
                assert_ne!(other.instance(), first);
                assert!(other.instance_alive(&first).await.unwrap());
                assert!(b.log().instance_alive(other.instance()).await.unwrap());
                b.log().close().await.unwrap();
                assert!(!other.instance_alive(&first).await.unwrap());
                other.close().await.unwrap();
            }
            if !b.durable() {
                continue; // a memory log is never reopened
            }
            b.restart().await;
            let second = b.log().instance().to_owned();
            assert_ne!(second, first, "{}: a new id per open", b.name);
            assert!(!b.log().instance_alive(&first).await.unwrap(), "{}", b.name);
            assert!(b.log().instance_alive(&second).await.unwrap());
        }
    });
}

#[test]
fn a_session_has_one_owner_while_its_handle_lives() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            b.log().create_session("s", Bytes::new()).await.unwrap();
            let Some(url) = b.redis_url() else {
                // One process: no lease is kept.
                assert_eq!(b.log().claim("s").await.unwrap(), None, "{}", b.name);
                continue;
            };
            let me = b.log().instance().to_owned();
            let other = RedisLog::connect(url, Retention::default(), 0)
                .await
                .unwrap();
            // Both claim at once: one owner, the same answer for both.
            let (x, y) = tokio::join!(b.log().claim("s"), other.claim("s"));
            let (x, y) = (x.unwrap().unwrap(), y.unwrap().unwrap());
            assert_eq!(x, y);
            assert!(x == me || x == other.instance());
            // It stays while its handle lives ...
            let owner_is_me = x == me;
            assert_eq!(other.claim("s").await.unwrap().unwrap(), x);
            assert_eq!(b.log().claim("s").await.unwrap().unwrap(), x);
            // ... and the other takes it once that handle is gone.
            let (survivor, survivor_id) = if owner_is_me {
                b.log().close().await.unwrap();
                (&other as &dyn Log, other.instance().to_owned())
            } else {
                other.close().await.unwrap();
                (b.log().as_ref(), me.clone())
            };
            assert_eq!(survivor.claim("s").await.unwrap().unwrap(), survivor_id);
            assert!(matches!(
                survivor.claim("never").await,
                Err(LogError::NoSession(_))
            ));
            survivor.end_session("s").await.unwrap();
            assert!(matches!(
                survivor.claim("s").await,
                Err(LogError::NoSession(_))
            ));
            if owner_is_me {
                other.close().await.unwrap();
            }
        }
    });
}

/// The fence of a stalled owner: an append on behalf of a lease that
/// another handle took over commits nothing, checked atomically with the
/// append (Redis, Redis Cluster); a log of one process keeps no leases.
#[test]
fn an_append_fenced_by_a_lease_taken_over_commits_nothing() {
    rt().block_on(async {
        for b in backends(Retention::default(), 1024).await {
            let log = b.log();
            log.create_session("s", Bytes::new()).await.unwrap();
            let Some(url) = b.redis_url() else {
                assert_eq!(
                    log.append_fenced("s", S, vec![msg(1)], 1).await,
                    Ok(1),
                    "{}",
                    b.name
                );
                continue;
            };
            let stalled = RedisLog::connect(url, Retention::default(), 0)
                .await
                .unwrap();
            let other = RedisLog::connect(url, Retention::default(), 0)
                .await
                .unwrap();
            assert_eq!(
                stalled.claim("s").await.unwrap().as_deref(),
                Some(stalled.instance())
            );
            assert_eq!(
                stalled.append_fenced("s", S, vec![msg(1)], 1).await,
                Ok(1),
                "{}",
                b.name
            );
            // Its heartbeat goes (a stalled process's expires); the other takes the lease.
            stalled.close().await.unwrap();
            assert_eq!(
                other.claim("s").await.unwrap().as_deref(),
                Some(other.instance())
            );
            assert_eq!(
                stalled.append_fenced("s", S, vec![msg(2)], 2).await,
                Err(LogError::LeaseLost("s".into())),
                "{}",
                b.name
            );
            assert_eq!(
                log.bounds("s", S).await.unwrap().head,
                1,
                "{}: nothing appended",
                b.name
            );
            assert_eq!(
                other.append_fenced("s", S, vec![msg(2)], 3).await,
                Ok(2),
                "{}",
                b.name
            );
            other.close().await.unwrap();
        }
    });
}

#[test]
fn a_redis_heartbeat_is_refreshed_while_its_handle_runs() {
    rt().block_on(async {
        let server = mcp_resume_testkit::RedisServer::start();
        let log = RedisLog::connect(&server.url, Retention::default(), 0)
            .await
            .unwrap();
        let raw = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let key = format!("mcpr:instance:{}", log.instance());
        let ttl = || {
            let mut raw = raw.clone();
            let key = key.clone();
            async move {
                redis::cmd("PTTL")
                    .arg(&key)
                    .query_async::<i64>(&mut raw)
                    .await
                    .unwrap()
            }
        };
        let first = ttl().await;
        assert!(
            (5_000..=10_000).contains(&first),
            "a TTL of about 10 s: {first}"
        );
        // Past one refresh period: unrefreshed it would be near 6.5 s now.
        tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
        let later = ttl().await;
        assert!(later > 8_000, "refreshed: {later} ms left");
        log.close().await.unwrap();
        assert_eq!(ttl().await, -2, "deleted on close");
    });
}

#[test]
fn a_batch_appended_under_a_key_is_not_appended_again() {
    rt().block_on(async {
        let mut shared = 0;
        for b in backends(Retention::default(), 1024).await {
            shared += b.redis_url().is_some() as usize;
            let log = b.log();
            log.create_session("once", Bytes::new()).await.unwrap();
            let batch = || vec![msg(1), msg(2)];
            let first = log
                .append_once("once", StreamKey::Session, batch(), 7)
                .await
                .unwrap();
            // The retry of an attempt whose outcome was unknown.
            let again = log
                .append_once("once", StreamKey::Session, batch(), 7)
                .await
                .unwrap();
            assert_eq!((first, again), (2, 2), "{}", b.name);
            let next = log
                .append_once("once", StreamKey::Session, vec![msg(3)], 8)
                .await
                .unwrap();
            assert_eq!(next, 3);
            // Two writers under one key at once (two enders of one task):
            // one batch.
            let (x, y) = tokio::join!(
                log.append_once("once", StreamKey::Session, vec![msg(4)], 9),
                log.append_once("once", StreamKey::Session, vec![msg(4)], 9),
            );
            assert_eq!((x.unwrap(), y.unwrap()), (4, 4), "{}", b.name);
            let events = log.read("once", StreamKey::Session, 0, 10).await.unwrap();
            assert_eq!(events.len(), 4, "{}: each batch once", b.name);
            log.end_session("once").await.unwrap();
        }
        assert!(shared > 0, "a shared log was tested");
    });
}
