//! What ended sessions and emptied request streams leave behind, and when
//! it goes: tombstones are forgotten after their TTL (never before), and a
//! request stream retention emptied keeps no state but still reads loudly.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{Bounds, DiskLog, Log, LogError, MemoryLog, RedisLog, Retention, StreamKey};
use mcp_resume_testkit::{rt, RedisServer};

use crate::common::{backends, msg};
use mcp_resume_log::{Maintenance, SessionRecords};

const N: usize = 40;
const LONG: Duration = Duration::from_secs(3600);
const SHORT: Duration = Duration::from_millis(30);

fn id(i: usize) -> String {
    format!("t{i}")
}

/// Creates and ends `N` sessions, each with events on its session stream
/// and on a request stream.
async fn create_and_end(log: &dyn Log) {
    for i in 0..N {
        log.create_session(&id(i), Bytes::from_static(b"{}"))
            .await
            .unwrap();
        let r = log
            .open_request_stream(&id(i), Bytes::from_static(b"call"), u64::MAX)
            .await
            .unwrap();
        log.append(&id(i), StreamKey::Session, vec![msg(1), msg(2)])
            .await
            .unwrap();
        log.append(&id(i), StreamKey::Request(r), vec![msg(1)])
            .await
            .unwrap();
        log.end_session(&id(i)).await.unwrap();
    }
}

/// Every ended id is still refused: a tombstone that has not expired.
async fn all_refused(log: &dyn Log, name: &str) {
    for i in 0..N {
        assert_eq!(
            log.create_session(&id(i), Bytes::new()).await,
            Err(LogError::SessionExists(id(i))),
            "{name}: an ended id was re-created before its tombstone expired"
        );
        assert_eq!(log.session(&id(i)).await, Err(LogError::NoSession(id(i))));
    }
}

/// Every ended id is unknown now, and can be used again.
async fn all_forgotten(log: &dyn Log, name: &str) {
    for i in 0..N {
        assert_eq!(
            log.session(&id(i)).await,
            Err(LogError::NoSession(id(i))),
            "{name}"
        );
        log.create_session(&id(i), Bytes::new())
            .await
            .unwrap_or_else(|e| panic!("{name}: {} is still remembered: {e}", id(i)));
    }
}

#[test]
fn memory_forgets_tombstones_after_their_ttl_and_not_before() {
    rt().block_on(async {
        let log = MemoryLog::default();
        create_and_end(&log).await;
        assert_eq!(log.tombstones(), N);
        log.maintain(LONG, LONG).await.unwrap();
        assert_eq!(log.tombstones(), N);
        all_refused(&log, "memory").await;
        tokio::time::sleep(SHORT * 2).await;
        log.maintain(LONG, SHORT).await.unwrap();
        assert_eq!(log.tombstones(), 0);
        all_forgotten(&log, "memory").await;
    });
}

#[test]
fn disk_forgets_tombstones_after_their_ttl_and_not_before_even_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    rt().block_on(async {
        let log = DiskLog::open(&path, Retention::default()).unwrap();
        create_and_end(&log).await;
        log.maintain(LONG, LONG).await.unwrap();
        assert_eq!(log.tombstones(), N);
        drop(log);
        // The end time is stored: a reopen neither forgets nor restarts the clock.
        let log = DiskLog::open(&path, Retention::default()).unwrap();
        assert_eq!(log.tombstones(), N);
        all_refused(&log, "disk").await;
        tokio::time::sleep(SHORT * 2).await;
        log.maintain(LONG, SHORT).await.unwrap();
        assert_eq!(log.tombstones(), 0);
        drop(log);
        // Gone from storage too, not only from memory.
        let log = DiskLog::open(&path, Retention::default()).unwrap();
        assert_eq!(log.tombstones(), 0);
        assert_eq!(log.live_sessions().await, 0);
        all_forgotten(&log, "disk").await;
    });
}

#[test]
fn redis_forgets_tombstones_after_their_ttl_and_not_before() {
    rt().block_on(async {
        let server = RedisServer::start();
        let log = RedisLog::connect(&server.url, Retention::default(), 0)
            .await
            .unwrap();
        let mut raw = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        create_and_end(&log).await;
        log.maintain(LONG, LONG).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), N);
        all_refused(&log, "redis").await;
        tokio::time::sleep(SHORT * 2).await;
        log.maintain(LONG, SHORT).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), 0);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("mcpr:{t*")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(keys.is_empty(), "left in Redis: {keys:?}");
        all_forgotten(&log, "redis").await;
    });
}

/// Ends every session as the versions before tombstone expiry did: the
/// tombstone keeps `r` and `a`, and its id is not in the ended index, so
/// it has no end time.
async fn end_as_an_older_version(log: &dyn Log, raw: &mut redis::aio::MultiplexedConnection) {
    create_and_end(log).await;
    for i in 0..N {
        let _: () = redis::pipe()
            .cmd("ZREM")
            .arg("mcpr:ended")
            .arg(id(i))
            .ignore()
            .cmd("HSET")
            .arg(format!("mcpr:{{{}}}:s", id(i)))
            .arg("r")
            .arg(2)
            .arg("a")
            .arg(1)
            .ignore()
            .query_async(raw)
            .await
            .unwrap();
    }
}

#[test]
fn redis_forgets_tombstones_an_older_version_left_without_an_end_time() {
    rt().block_on(async {
        let server = RedisServer::start();
        let log = RedisLog::connect(&server.url, Retention::default(), 0)
            .await
            .unwrap();
        let mut raw = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        end_as_an_older_version(&log, &mut raw).await;
        log.create_session("live", Bytes::new()).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), 0);
        // The first pass gives them an end time: now, so none goes yet.
        log.maintain(LONG, SHORT).await.unwrap();
        assert_eq!(
            log.tombstones().await.unwrap(),
            N,
            "maintenance left tombstones without an end time"
        );
        all_refused(&log, "redis, older tombstones").await;
        tokio::time::sleep(SHORT * 2).await;
        log.maintain(LONG, SHORT).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), 0);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("mcpr:{t*")
            .query_async(&mut raw)
            .await
            .unwrap();
        assert!(keys.is_empty(), "left in Redis: {keys:?}");
        all_forgotten(&log, "redis, older tombstones").await;
        // A live session is no tombstone.
        assert_eq!(log.session("live").await.unwrap().id, "live");
    });
}

#[test]
fn redis_adopts_older_tombstones_over_several_passes_in_a_large_keyspace() {
    rt().block_on(async {
        let server = RedisServer::start();
        let log = RedisLog::connect(&server.url, Retention::default(), 0)
            .await
            .unwrap();
        let mut raw = redis::Client::open(server.url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        end_as_an_older_version(&log, &mut raw).await;
        for chunk in 0..40 {
            let mut mset = redis::cmd("MSET");
            for i in 0..1000 {
                mset.arg(format!("other:{chunk}:{i}")).arg(1);
            }
            let _: () = mset.query_async(&mut raw).await.unwrap();
        }
        log.maintain(LONG, LONG).await.unwrap();
        let first = log.tombstones().await.unwrap();
        assert!(
            first < N,
            "one pass swept all of 40k keys: it is not bounded"
        );
        let mut passes = 1;
        while log.tombstones().await.unwrap() < N && passes < 10 {
            log.maintain(LONG, LONG).await.unwrap();
            passes += 1;
        }
        assert_eq!(
            log.tombstones().await.unwrap(),
            N,
            "the sweep does not go on where the last pass stopped"
        );
    });
}

#[test]
fn a_request_stream_retention_emptied_keeps_no_state_but_reads_loudly() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 100;
        retention.max_age = Duration::from_millis(50);
        for mut b in backends(retention, 1024).await {
            let log: Arc<dyn Log> = b.log().clone();
            log.create_session("a", Bytes::new()).await.unwrap();
            let r = log
                .open_request_stream("a", Bytes::from_static(b"call"), u64::MAX)
                .await
                .unwrap();
            let req = StreamKey::Request(r);
            log.append("a", req, (1..=3).map(msg).collect())
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(80)).await;
            log.maintain(LONG, LONG).await.unwrap();
            drop(log);
            let gone = LogError::Truncated {
                cursor: 0,
                head: 3,
                floor: 4,
            };
            for round in ["after maintenance", "after a restart"] {
                let log = b.log().clone();
                let name = format!("{} {round}", b.name);
                assert_eq!(log.read("a", req, 0, 10).await, Err(gone.clone()), "{name}");
                assert_eq!(
                    log.bounds("a", req).await.unwrap(),
                    Bounds::new(3, 4),
                    "{name}"
                );
                assert_eq!(log.request_meta("a", r).await, Err(gone.clone()), "{name}");
                assert_eq!(log.request_streams("a").await.unwrap(), 1);
                // A reader that had everything is not refused: nothing is missing.
                assert_eq!(log.read("a", req, 3, 10).await, Ok(Vec::new()), "{name}");
                if !b.durable() {
                    break;
                }
                drop(log);
                b.restart().await;
            }
            // A late event on the stream is still appended after its head.
            let log = b.log().clone();
            assert_eq!(log.append("a", req, vec![msg(4)]).await.unwrap(), 4);
            assert_eq!(log.read("a", req, 3, 10).await.unwrap()[0].message, msg(4));
        }
    });
}

#[test]
fn retired_request_streams_leave_only_the_session_stream_in_memory() {
    rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_events = 100;
        retention.max_age = Duration::from_millis(30);
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskLog::open(dir.path().join("log"), retention).unwrap();
        let memory = MemoryLog::new(retention);
        let logs: [(&dyn Log, &dyn Fn() -> usize); 2] = [
            (&memory, &|| memory.stream_states()),
            (&disk, &|| disk.stream_states()),
        ];
        for (log, states) in logs {
            log.create_session("a", Bytes::new()).await.unwrap();
            for _ in 0..50 {
                let r = log
                    .open_request_stream("a", Bytes::new(), u64::MAX)
                    .await
                    .unwrap();
                log.append("a", StreamKey::Request(r), vec![msg(1)])
                    .await
                    .unwrap();
            }
            assert_eq!(states(), 51);
            tokio::time::sleep(Duration::from_millis(60)).await;
            log.maintain(LONG, LONG).await.unwrap();
            assert_eq!(states(), 1, "only the session stream keeps its state");
            assert!(matches!(
                log.read("a", StreamKey::Request(7), 0, 1).await,
                Err(LogError::Truncated { .. })
            ));
        }
    });
}
