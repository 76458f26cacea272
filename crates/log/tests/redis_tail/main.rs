//! An instance follows its readers' Redis streams over a few shared
//! connections, not one per reader, and every reader still gets every event
//! after its own commit point, in order. On one server a commit wakes the
//! instances that follow its stream in its own step, so idle followed
//! streams cost no reads, and a lost wake stream is noticed and made good.

#[path = "../common/mod.rs"]
mod common;
mod join;
mod local;

use std::time::Duration;

use bytes::Bytes;
use common::{msg, ran, RedisServer};
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};
use mcp_resume_log::{RedisLog, Retention, StreamKey, Subscription};
use mcp_resume_testkit::count_sent;

const S: StreamKey = StreamKey::Session;

async fn clients(url: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    list.lines().count() - 1 // not this one
}

/// An instance's log on `redis`.
async fn instance(redis: &RedisServer) -> RedisLog {
    RedisLog::connect(&redis.url, Retention::default(), 0)
        .await
        .unwrap()
}

/// An append to `session` on `log` reaches its reader `sub` within a
/// second: the stream is followed, and its wake-ups arrive.
async fn woken_at_once(log: &RedisLog, session: &str, sub: &mut Subscription) {
    log.append(session, S, vec![msg(1)]).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(1), sub.next())
        .await
        .expect("woken within a second")
        .unwrap();
    assert_eq!(ev.seq, 1);
}

/// Two instances on `redis`: one that writes session `w`, one whose reader
/// follows its session stream and has its first event (so the reader's
/// wake stream exists and it is registered).
async fn two_instances_following(redis: &RedisServer) -> (RedisLog, RedisLog, Subscription) {
    let (writer, reader) = (instance(redis).await, instance(redis).await);
    writer.create_session("w", Bytes::new()).await.unwrap();
    let (_, mut sub) = reader.subscribe("w", S).await.unwrap();
    writer.append("w", S, vec![msg(1)]).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(2), sub.next()).await;
    assert_eq!(first.unwrap().unwrap().seq, 1);
    (writer, reader, sub)
}

/// Deletes the one wake stream on `redis` (the reader's), as Redis losing
/// it would.
fn lose_the_wake_stream(redis: &RedisServer) {
    let wakes = redis.cli(&["--scan", "--pattern", "mcpr:wake:*"]);
    let wake = wakes.lines().next().expect("the reader's wake stream");
    assert_eq!(redis.cli(&["DEL", wake]).trim(), "1");
}

/// After a lost wake-up for event 2 of `w`: it reaches `sub` within
/// `within`, then [`woken_again`].
async fn made_good_then_woken(writer: &RedisLog, sub: &mut Subscription, within: Duration) {
    let ev = tokio::time::timeout(within, sub.next())
        .await
        .expect("the lost wake-up was made good")
        .unwrap();
    assert_eq!(ev.seq, 2);
    woken_again(writer, sub).await;
}

/// Event 3 of `w` reaches `sub` within a second of its commit: its
/// instance is registered again, woken as before.
async fn woken_again(writer: &RedisLog, sub: &mut Subscription) {
    let started = std::time::Instant::now();
    writer.append("w", S, vec![msg(3)]).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(1), sub.next())
        .await
        .expect("registered again: woken")
        .unwrap();
    assert_eq!(ev.seq, 3);
    assert!(started.elapsed() < Duration::from_millis(900));
}

#[test]
fn three_hundred_readers_share_a_handful_of_connections() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let writer = instance(&redis).await;
        let reader = instance(&redis).await;
        let mut subs = Vec::new();
        for s in 0..100 {
            let id = format!("s{s}");
            writer.create_session(&id, Bytes::new()).await.unwrap();
            writer.append(&id, S, vec![msg(1)]).await.unwrap();
            // Three readers per stream, joining at different heads.
            for k in 0..3u64 {
                let (b, sub) = reader.subscribe(&id, S).await.unwrap();
                subs.push((id.clone(), b.head, sub));
                writer.append(&id, S, vec![msg(2 + k)]).await.unwrap();
            }
        }
        for s in 0..100 {
            let id = format!("s{s}");
            writer
                .append(&id, S, (5..=20).map(msg).collect())
                .await
                .unwrap();
        }
        // All 300 readers are open and following.
        let n = clients(&redis.url).await;
        assert!(
            n <= 2 + 3,
            "two managers, the reader's wake-ups and each handle's end notices (a handle that creates \
             sessions reads them), not one per reader: {n} connections"
        );
        for (id, head, mut sub) in subs {
            for want in head + 1..=20 {
                let ev = tokio::time::timeout(Duration::from_secs(10), sub.next())
                    .await
                    .unwrap_or_else(|_| panic!("{id}: nothing after {}", want - 1))
                    .unwrap();
                assert_eq!(ev.seq, want, "{id}");
            }
        }
    });
}

/// On one server the commit's own script wakes the followers: a followed
/// stream nobody appends to costs no read at all (before, each was read
/// again 1 s, 2 s, 4 s ... up to 30 s apart, and checked for an end every
/// 30 s: commands in proportion to the streams followed).
#[test]
fn idle_followed_streams_cost_no_reads_on_one_server() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis).await;
        let mut subs = Vec::new();
        for s in 0..200 {
            let id = format!("s{s}");
            log.create_session(&id, Bytes::new()).await.unwrap();
            subs.push(log.subscribe(&id, S).await.unwrap().1);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = redis.commands_by_name();
        tokio::time::sleep(Duration::from_millis(4000)).await;
        let ran = ran(&before, &redis.commands_by_name());
        let reads: u64 = ["xrange", "hget", "hmget"]
            .iter()
            .map(|c| ran.get(*c).copied().unwrap_or(0))
            .sum();
        assert_eq!(reads, 0, "idle followed streams were read: {ran:?}");
        let all: u64 = ran.values().sum();
        assert!(
            all <= 40,
            "4 s of 200 idle followed streams ran {all} commands: {ran:?}"
        );
        // And they are followed: an append reaches its reader at once.
        woken_at_once(&log, "s7", &mut subs[7]).await;
    });
}

/// A new reader of a stream costs its instance one round trip: the script
/// that reads its bounds registers the instance as the stream's follower in
/// the same step, so nothing committed after the head it read can pass
/// unrung, and the stream is not read on joining. Counted as Redis receives
/// them (`MONITOR`: a script's own commands are not round trips).
#[test]
fn a_new_reader_joins_in_one_script_and_reads_nothing() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis).await;
        // The first reader starts what later ones share (the wake stream
        // and its reader, the reader of end notices).
        log.create_session("first", Bytes::new()).await.unwrap();
        let _first = log.subscribe("first", S).await.unwrap();
        for s in 0..50 {
            log.create_session(&format!("s{s}"), Bytes::new())
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let monitor = redis.monitor();
        let mut subs = Vec::new();
        for s in 0..50 {
            subs.push(log.subscribe(&format!("s{s}"), S).await.unwrap().1);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = monitor.stop();
        let scripts = count_sent(&sent, "evalsha", "");
        assert_eq!(scripts, 50, "one script a reader: {sent:?}");
        // Nothing else names a session's key: no registration of its own,
        // no read of the stream on joining.
        let others: Vec<_> = sent
            .iter()
            .filter(|c| c[0] != "evalsha" && c[1..].iter().any(|w| w.starts_with("mcpr:{")))
            .collect();
        assert!(others.is_empty(), "beyond the scripts: {others:?}");
        // Registered by the script, and followed: an append reaches its
        // reader at once.
        assert_eq!(redis.cli(&["SCARD", "mcpr:{s7}:f"]).trim(), "1");
        woken_at_once(&log, "s7", &mut subs[7]).await;
    });
}

/// An instance's wake stream lost (expired while it was frozen, or Redis
/// lost it): the next commit cannot wake it, and drops its registration.
/// The instance notices within its check, registers every stream it follows
/// again and reads each once: nothing waits for a wake-up that never comes.
#[test]
fn a_lost_wake_stream_is_noticed_and_nothing_waits() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, _reader, mut sub) = two_instances_following(&redis).await;
        lose_the_wake_stream(&redis);
        // This commit finds the wake stream gone and forgets the reader.
        writer.append("w", S, vec![msg(2)]).await.unwrap();
        made_good_then_woken(&writer, &mut sub, Duration::from_secs(5)).await;
    });
}

/// The wake stream lost just before its periodic refresh, which comes
/// before the check: the refresh only pushes back the expiry, finds it gone
/// and raises the doubt. Were the stream made again there, the registration
/// the commit dropped would stay dropped and the check find nothing amiss.
#[test]
fn a_wake_stream_lost_before_its_refresh_is_made_good() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader, mut sub) = two_instances_following(&redis).await;
        // The check comes long after the refresh (every 100 ms).
        reader.pace_wake_stream(Duration::from_millis(100), Duration::from_secs(3600));
        lose_the_wake_stream(&redis);
        writer.append("w", S, vec![msg(2)]).await.unwrap();
        made_good_then_woken(&writer, &mut sub, Duration::from_secs(5)).await;
    });
}

/// On one server a small commit carries its events in the wake-up, so its
/// readers' instance hands them on without reading the stream; a large one
/// (over 1 KiB) only wakes, and its stream is read. Mixed, the readers get
/// every event once, in order: a carried event that does not follow what
/// was read makes the stream be read from its last seq instead.
#[test]
fn small_commits_reach_other_instances_without_a_read_and_in_order() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, _reader, mut sub) = two_instances_following(&redis).await;
        let before = redis.commands_by_name();
        for k in 2..=51 {
            writer.append("w", S, vec![msg(k)]).await.unwrap();
            let ev = tokio::time::timeout(Duration::from_secs(2), sub.next())
                .await
                .expect("delivered")
                .unwrap();
            assert_eq!(ev.seq, k);
            assert_eq!(ev.message, msg(k));
        }
        let counts = ran(&before, &redis.commands_by_name());
        let xranges = counts.get("xrange").copied().unwrap_or(0);
        assert_eq!(xranges, 0, "50 small commits read their stream: {counts:?}");

        // Large, small, large, small, appended back to back: each reader
        // event once, in order.
        let big = |k: u64| {
            Bytes::from(format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"k":{k},"pad":"{}"}}}}"#,
                "x".repeat(6000)
            ))
        };
        let before = redis.commands_by_name();
        let mut want = Vec::new();
        for k in 52..=91u64 {
            let m = if k % 2 == 0 { big(k) } else { msg(k) };
            want.push(m.clone());
            writer.append("w", S, vec![m]).await.unwrap();
        }
        for (k, m) in (52..=91u64).zip(want) {
            let ev = tokio::time::timeout(Duration::from_secs(2), sub.next())
                .await
                .expect("delivered")
                .unwrap();
            assert_eq!(ev.seq, k);
            assert_eq!(ev.message, m);
        }
        let counts = ran(&before, &redis.commands_by_name());
        assert!(
            counts.get("xrange").copied().unwrap_or(0) >= 1,
            "large commits are read from their stream: {counts:?}"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), sub.next())
                .await
                .is_err(),
            "nothing after the last event"
        );
    });
}

/// A clean stop deletes the instance's wake stream: otherwise every commit
/// to a stream it followed would keep adding wake-ups (with small commits'
/// events) to it until it expired, ten minutes later.
#[test]
fn a_closed_instance_leaves_no_wake_stream() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader, sub) = two_instances_following(&redis).await;
        let wakes = || redis.cli(&["--scan", "--pattern", "mcpr:wake:*"]);
        assert_eq!(wakes().lines().count(), 1, "the reader's wake stream");
        reader.close().await.unwrap();
        drop(sub);
        writer.append("w", S, vec![msg(2)]).await.unwrap();
        assert_eq!(
            wakes().trim(),
            "",
            "a wake stream outlived its closed instance"
        );
    });
}
