//! What a session holds in Redis stays bounded however long it lives, and
//! the steps that race a session's end or a client's return are atomic:
//! - the keys of keyed appends (`append_once`) are a ring of the last 64,
//!   not a field per append for ten minutes after the last one;
//! - a pin on a session that ends meanwhile leaves no pin hash behind;
//! - idle expiry never ends a session a client used after it decided.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{msg, ran, RedisServer};
use mcp_resume_log::{EventLog, Leases, Maintenance, SessionRecords};
use mcp_resume_log::{RedisLog, Retention, StreamKey};

async fn open(redis: &RedisServer) -> Arc<RedisLog> {
    Arc::new(
        RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap(),
    )
}

/// Fields of a hash (`HLEN`), through redis-cli.
fn hlen(redis: &RedisServer, key: &str) -> u64 {
    redis.cli(&["HLEN", key]).trim().parse().unwrap()
}

#[test]
fn the_keys_of_keyed_appends_are_a_ring_not_a_field_per_append() {
    const COMMITS: u64 = 100_000;
    const AT_ONCE: u64 = 32;
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = open(&redis).await;
        log.create_session("busy", bytes::Bytes::new())
            .await
            .unwrap();
        // Many writers at once, as a busy session's route, its tasks and the
        // transport's own answers are.
        let writers: Vec<_> = (0..AT_ONCE)
            .map(|w| {
                let log = log.clone();
                tokio::spawn(async move {
                    for i in 0..COMMITS / AT_ONCE {
                        let key = w * COMMITS + i + 1;
                        log.append_once("busy", StreamKey::Session, vec![msg(i)], key)
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap();
        }
        let head = log.bounds("busy", StreamKey::Session).await.unwrap().head;
        assert_eq!(head, COMMITS, "every keyed append went through once");
        let fields = hlen(&redis, "mcpr:{busy}:once");
        assert!(
            fields <= 129,
            "{fields} fields in the once hash after {COMMITS} keyed appends"
        );
        // A recent key is still remembered: a retry of it appends nothing.
        let last = u64::MAX;
        let first = log
            .append_once("busy", StreamKey::Session, vec![msg(0)], last)
            .await
            .unwrap();
        assert_eq!(first, head + 1);
        let again = log
            .append_once("busy", StreamKey::Session, vec![msg(0)], last)
            .await
            .unwrap();
        assert_eq!(again, first, "a retry under a kept key appended again");
        assert_eq!(
            log.bounds("busy", StreamKey::Session).await.unwrap().head,
            first
        );
    });
}

#[test]
fn a_pin_racing_the_end_of_its_session_leaves_no_pin_hash() {
    const SESSIONS: usize = 400;
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = open(&redis).await;
        for s in 0..SESSIONS {
            let id = format!("p{s}");
            log.create_session(&id, bytes::Bytes::new()).await.unwrap();
            log.append(&id, StreamKey::Session, vec![msg(1)])
                .await
                .unwrap();
        }
        let racers: Vec<_> = (0..SESSIONS)
            .map(|s| {
                let log = log.clone();
                tokio::spawn(async move {
                    let id = format!("p{s}");
                    let pin = log.pin(&id, StreamKey::Session, 1, Duration::from_secs(600));
                    let end = log.end_session(&id);
                    let (pinned, ended) = tokio::join!(pin, end);
                    ended.unwrap();
                    // Pinned first (then the end took the hash), or refused.
                    if let Err(e) = pinned {
                        assert!(matches!(e, mcp_resume_log::LogError::NoSession(_)), "{e}");
                    }
                })
            })
            .collect();
        for r in racers {
            r.await.unwrap();
        }
        let left: Vec<String> = (0..SESSIONS)
            .map(|s| format!("mcpr:{{p{s}}}:pin"))
            .filter(|k| redis.cli(&["EXISTS", k]).trim() == "1")
            .collect();
        assert!(
            left.is_empty(),
            "pin hashes outlived their sessions: {}",
            left.len()
        );
    });
}

/// A loopback proxy to `to` that holds every chunk a client sends for
/// `delay` before passing it on (answers pass at once): a slow link to
/// Redis. `seen` is told the first time a chunk holding `needle` passes.
async fn slow_link(
    to: String,
    delay: Duration,
    needle: &'static [u8],
    seen: tokio::sync::mpsc::UnboundedSender<tokio::time::Instant>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let server = tokio::net::TcpStream::connect(&to).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut sr, &mut cw).await;
            });
            let (tx, mut rx) =
                tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            tokio::spawn(async move {
                while let Some((due, chunk)) = rx.recv().await {
                    tokio::time::sleep_until(due).await;
                    if sw.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
            });
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    let chunk = buf[..n].to_vec();
                    let due = tokio::time::Instant::now() + delay;
                    if chunk.windows(needle.len()).any(|w| w == needle) {
                        let _ = seen.send(due);
                    }
                    if tx.send((due, chunk)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}/0")
}

/// Idle expiry reads the state of many sessions in one round trip, then
/// ends the idle ones: a client that comes back in between keeps its
/// session. The pass runs over a link that holds each command 150 ms, and
/// the client comes back 2.5 link delays after the pass's read reaches
/// Redis: after the look, before a second round trip could end it. The
/// end must check the session's last use in the same step.
#[test]
fn idle_expiry_never_ends_a_session_a_client_used_after_it_decided() {
    const D: Duration = Duration::from_millis(150);
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        // Created by a handle that is gone before the pass, so that the slow
        // one is the only instance and maintains every bucket.
        let first = open(&redis).await;
        first
            .create_session("idle", bytes::Bytes::new())
            .await
            .unwrap();
        first.close().await.unwrap();
        drop(first);
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let hop = redis.url.trim_start_matches("redis://");
        let hop = hop.split('/').next().unwrap().to_owned();
        let url = slow_link(hop, D, b"mcpr:{idle}:s", seen_tx).await;
        let slow = RedisLog::connect(&url, Retention::default(), 0)
            .await
            .unwrap();
        let idle = Duration::from_secs(2);
        tokio::time::sleep(idle + Duration::from_millis(300)).await;
        // Nothing else names the session on the slow link before the pass.
        while seen.try_recv().is_ok() {}
        let pass = tokio::spawn(async move {
            let pass = slow.maintain(idle, Duration::from_secs(3600)).await;
            (slow, pass)
        });
        let read_at = tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .expect("the pass reads the session's state")
            .unwrap();
        // The returning client's handle, opened once the pass has divided
        // the buckets.
        let direct = open(&redis).await;
        tokio::time::sleep_until(read_at + D * 3 / 2).await;
        let came_back = direct.touch("idle").await.is_ok();
        let (_slow, pass) = pass.await.unwrap();
        let pass = pass.unwrap();
        if came_back {
            assert!(
                direct.session("idle").await.is_ok(),
                "the client used its session while it was live, then the pass ended it as idle ({:?})",
                pass.ended
            );
        } else {
            // Ended before the client came back: fine, and the pass did end it.
            assert_eq!(pass.ended, vec!["idle".to_owned()]);
        }
        assert!(direct.instance_alive(direct.instance()).await.unwrap());
    });
}

/// The scripts (`EVALSHA`) Redis ran since the reading `before`.
fn scripts_since(redis: &RedisServer, before: &std::collections::BTreeMap<String, u64>) -> u64 {
    let ran = ran(before, &redis.commands_by_name());
    ran.get("evalsha").copied().unwrap_or(0)
}

/// Starts `a`'s reader of end notices as a server's first request does (a
/// touch that asks Redis, here of a session `b` created: one `a` created
/// counts as touched) and lets it read.
async fn notices_read(a: &RedisLog, b: &RedisLog) {
    b.create_session("elsewhere", bytes::Bytes::new())
        .await
        .unwrap();
    a.touch("elsewhere").await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// `log`'s touches of `id` fail (`NoSession`) within 300 ms of its end on
/// another instance.
async fn touches_stop_soon(log: &RedisLog, id: &str) {
    let ended = std::time::Instant::now();
    loop {
        match log.touch(id).await {
            Err(mcp_resume_log::LogError::NoSession(_)) => break,
            Ok(()) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            ended.elapsed() < Duration::from_millis(300),
            "an end on another instance was not noticed: touches still pass"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A session used again and again by one instance costs one touch in
/// Redis per second, not one per request; an end on another instance still
/// reaches it at once (the end notices every instance follows): the next
/// touch there finds the session ended, long before the coalescing time.
#[test]
fn touches_are_coalesced_and_an_end_elsewhere_still_reaches_them_at_once() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let a = open(&redis).await;
        let b = open(&redis).await;
        a.create_session("busy", bytes::Bytes::new()).await.unwrap();
        a.touch("busy").await.unwrap();
        let before = redis.commands_by_name();
        for _ in 0..100 {
            a.touch("busy").await.unwrap();
        }
        let evals = scripts_since(&redis, &before);
        assert!(
            evals <= 1,
            "{evals} touch scripts for 100 touches within a second"
        );
        b.end_session("busy").await.unwrap();
        touches_stop_soon(&a, "busy").await;
    });
}

/// On one server the end script writes the end notice in the end's own
/// step, so while an instance reads the notices a busy session's touch is
/// answered from memory for the whole touch interval (set from the session
/// TTL), not for one second: one touch script over 2.5 s of requests. An
/// end on another instance still stops them at once.
#[test]
fn on_one_server_a_touch_is_answered_from_memory_for_the_interval() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let a = open(&redis).await;
        let b = open(&redis).await;
        a.set_touch_interval(Duration::from_secs(60));
        a.create_session("busy", bytes::Bytes::new()).await.unwrap();
        notices_read(&a, &b).await;
        a.touch("busy").await.unwrap();
        let before = redis.commands_by_name();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(2500) {
            a.touch("busy").await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let evals = scripts_since(&redis, &before);
        assert_eq!(
            evals, 0,
            "{evals} touch scripts in 2.5 s with a 60 s touch interval"
        );
        b.end_session("busy").await.unwrap();
        touches_stop_soon(&a, "busy").await;
    });
}

/// A session this handle just created counts as touched: its next request
/// (`initialize`'s `notifications/initialized`) runs no touch script, one
/// round trip fewer per session opened; an end elsewhere still stops it.
#[test]
fn a_session_just_created_is_touched_from_memory() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let a = open(&redis).await;
        let b = open(&redis).await;
        a.set_touch_interval(Duration::from_secs(60));
        notices_read(&a, &b).await;
        let before = redis.commands_by_name();
        a.create_session("new", bytes::Bytes::new()).await.unwrap();
        a.touch("new").await.unwrap();
        let evals = scripts_since(&redis, &before);
        assert_eq!(evals, 1, "{evals} scripts: the create's, and no touch");
        b.end_session("new").await.unwrap();
        touches_stop_soon(&a, "new").await;
    });
}

/// Checking the limit on live sessions at each `initialize` counts them in
/// Redis at most every 250 ms (a `SCARD` per bucket set: 64 on a cluster),
/// and the count stays exact for the sessions this handle creates and ends.
#[test]
fn the_live_count_is_taken_at_most_every_quarter_second_and_kept_current() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = open(&redis).await;
        assert_eq!(log.live_sessions().await, 0);
        let before = redis.commands_by_name();
        for i in 0..100 {
            log.create_session(&format!("c{i}"), bytes::Bytes::new())
                .await
                .unwrap();
            assert_eq!(log.live_sessions().await, i + 1);
        }
        log.end_session("c0").await.unwrap();
        assert_eq!(log.live_sessions().await, 99);
        let after = redis.commands_by_name();
        let scards =
            after.get("scard").copied().unwrap_or(0) - before.get("scard").copied().unwrap_or(0);
        assert!(scards <= 10, "{scards} counts for 100 creations");
    });
}
