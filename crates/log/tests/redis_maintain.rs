//! A maintenance pass on Redis reads the state of many sessions per round
//! trip, and the streams of a session only once it is old enough to hold an
//! event past the age limit (the other contract tests show those trimmed): at 100,000 sessions a pass that made a handful
//! of round trips per session took longer than its interval
//! (benches/results/scale.md).

mod common;

use std::time::Duration;

use common::{msg, ran, RedisServer};
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};
use mcp_resume_log::{RedisLog, Retention, StreamKey};

const SESSIONS: usize = 1_000;

#[test]
fn a_pass_over_young_sessions_reads_their_state_and_nothing_else() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        for s in 0..SESSIONS {
            let id = format!("s{s}");
            log.create_session(&id, bytes::Bytes::new()).await.unwrap();
            log.append(&id, StreamKey::Session, (1..=3).map(msg).collect())
                .await
                .unwrap();
            let r = log
                .open_request_stream(&id, bytes::Bytes::new(), u64::MAX)
                .await
                .unwrap();
            log.append(&id, StreamKey::Request(r), vec![msg(1)])
                .await
                .unwrap();
        }
        let (idle, tombstones) = (Duration::from_secs(600), Duration::from_secs(3600));
        // The first pass leases the buckets; the second is the steady state.
        log.maintain(idle, tombstones).await.unwrap();
        let before = redis.commands_by_name();
        let pass = log.maintain(idle, tombstones).await.unwrap();
        let ran = ran(&before, &redis.commands_by_name());
        assert_eq!(pass.buckets, 64, "one instance holds every bucket");
        assert!(pass.ended.is_empty());
        let n = |c: &str| ran.get(c).copied().unwrap_or(0);
        // One `HMGET` per session (pipelined, WALK_BATCH a round trip); no
        // request index, no bounds script, no read of a stream. The bounded
        // sweep for older releases' tombstones (`SCAN`, one script a step,
        // whose `HGET`s Redis counts by name) is the rest.
        assert!(
            n("hmget") <= SESSIONS as u64,
            "more than one HMGET a session: {ran:?}"
        );
        assert!(
            n("smembers") <= 4,
            "a session's request index was read: {ran:?}"
        );
        assert!(n("evalsha") <= 20, "scripts ran per session: {ran:?}");
        for read in ["xrange", "xrevrange", "xread"] {
            assert!(
                !ran.contains_key(read),
                "a young session's streams were read ({read}): {ran:?}"
            );
        }
        // Nothing was trimmed that should stay.
        assert_eq!(log.bounds("s0", StreamKey::Session).await.unwrap().floor, 1);
    });
}

/// On one server the live set is listed in pages (`SSCAN`), not in one
/// `SMEMBERS` (at 100,000 sessions a 6.4 MB reply that holds Redis for its
/// length and every reply behind it on the instance's connection), and a
/// pass still reads every session's state, each once.
#[test]
fn one_servers_live_set_is_listed_in_pages_and_every_session_seen() {
    const MANY: u64 = 9_000;
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        for s in 0..MANY {
            let id = format!("p{s}");
            log.create_session(&id, bytes::Bytes::new()).await.unwrap();
        }
        let (idle, tombstones) = (Duration::from_secs(600), Duration::from_secs(3600));
        // The first pass leases the buckets.
        log.maintain(idle, tombstones).await.unwrap();
        let before = redis.commands_by_name();
        log.maintain(idle, tombstones).await.unwrap();
        let ran = ran(&before, &redis.commands_by_name());
        let n = |c: &str| ran.get(c).copied().unwrap_or(0);
        assert_eq!(n("hmget"), MANY, "each session's state read once: {ran:?}");
        assert!(
            n("sscan") >= 2,
            "the live set was not read in pages: {ran:?}"
        );
        assert!(n("smembers") <= 1, "the live set was read whole: {ran:?}");
    });
}

/// With a walk interval (`serve` sets a sixteenth of the session TTL or
/// age limit), a pass reads no session's state until it has passed, and
/// the next walk ends what went idle meanwhile: at 100,000 sessions a walk
/// every pass was 3,333 `HMGET`s a second whatever the traffic.
#[test]
fn walks_over_the_sessions_are_spaced_by_the_walk_interval() {
    const FEW: u64 = 50;
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        log.set_walk_interval(Duration::from_millis(800));
        for s in 0..FEW {
            log.create_session(&format!("w{s}"), bytes::Bytes::new())
                .await
                .unwrap();
        }
        let (idle, tombstones) = (Duration::from_millis(400), Duration::from_secs(3600));
        let hmgets = |before: &std::collections::BTreeMap<String, u64>| {
            ran(before, &redis.commands_by_name())
                .get("hmget")
                .copied()
                .unwrap_or(0)
        };
        let before = redis.commands_by_name();
        let first = log.maintain(idle, tombstones).await.unwrap();
        assert_eq!(hmgets(&before), FEW, "the first pass walks");
        assert!(first.ended.is_empty(), "nothing idle yet");
        let before = redis.commands_by_name();
        let second = log.maintain(idle, tombstones).await.unwrap();
        assert_eq!(hmgets(&before), 0, "no walk within the interval");
        assert_eq!(second.buckets, 64, "the rest of the pass ran");
        tokio::time::sleep(Duration::from_millis(900)).await;
        let before = redis.commands_by_name();
        let third = log.maintain(idle, tombstones).await.unwrap();
        assert_eq!(hmgets(&before), FEW, "walked again once it passed");
        assert_eq!(third.ended.len() as u64, FEW, "what went idle ended");
    });
}

/// A session older than the age limit has its streams walked once, and
/// again only once the oldest event that walk left can have grown old: not
/// on every pass (at 100,000 long-lived sessions that was a walk of every
/// stream every 30 s). What grows old is still trimmed.
#[test]
fn an_old_session_is_walked_again_only_when_its_oldest_event_can_be_old() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let mut retention = Retention::default();
        retention.max_age = Duration::from_secs(3);
        let log = RedisLog::connect(&redis.url, retention, 0).await.unwrap();
        for s in 0..20 {
            log.create_session(&format!("s{s}"), bytes::Bytes::new())
                .await
                .unwrap();
        }
        let (idle, tombstones) = (Duration::from_secs(600), Duration::from_secs(3600));
        // Leases the buckets; the sessions are young, so nothing is walked.
        log.maintain(idle, tombstones).await.unwrap();
        // Every session is older than the age limit, its events are young.
        tokio::time::sleep(Duration::from_millis(3100)).await;
        for s in 0..20 {
            log.append(&format!("s{s}"), StreamKey::Session, vec![msg(1), msg(2)])
                .await
                .unwrap();
        }
        let before = redis.commands_by_name();
        log.maintain(idle, tombstones).await.unwrap();
        let first = ran(&before, &redis.commands_by_name());
        assert!(
            first.get("xrange").copied().unwrap_or(0) >= 20,
            "the first pass walks every old session: {first:?}"
        );
        assert_eq!(log.bounds("s0", StreamKey::Session).await.unwrap().floor, 1);

        // Well within the age limit of the appends (a loaded machine's
        // margin), the next pass reads no stream.
        let before = redis.commands_by_name();
        log.maintain(idle, tombstones).await.unwrap();
        let second = ran(&before, &redis.commands_by_name());
        for read in ["xrange", "xrevrange", "xread"] {
            assert!(
                !second.contains_key(read),
                "a pass walked sessions whose oldest event cannot be old yet ({read}): {second:?}"
            );
        }

        // Once the events can be old, the next pass trims them.
        tokio::time::sleep(Duration::from_millis(3100)).await;
        log.maintain(idle, tombstones).await.unwrap();
        for s in [0, 7, 19] {
            let b = log
                .bounds(&format!("s{s}"), StreamKey::Session)
                .await
                .unwrap();
            assert_eq!(b.floor, 3, "s{s}: its two events are past the age limit");
        }
    });
}

/// Between passes, `watch` moves buckets to a new instance and hands it
/// their sessions, hands a dead instance's sessions to the survivor, and
/// otherwise costs a few commands whatever the number of sessions: the
/// server runs it every 2 s, so what a dead instance left is swept within
/// its heartbeat's lifetime, not a maintenance interval later.
#[test]
fn watch_hands_over_a_new_or_dead_instances_buckets_and_costs_nothing_per_session() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let a = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        const N: usize = 200;
        for s in 0..N {
            a.create_session(&format!("s{s}"), bytes::Bytes::new())
                .await
                .unwrap();
        }
        let (idle, tombstones) = (Duration::from_secs(600), Duration::from_secs(3600));
        assert_eq!(a.maintain(idle, tombstones).await.unwrap().buckets, 64);
        let b = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        // b's share is still a's: b takes nothing; a gives it up at its
        // next look, b takes it and its sessions at its own.
        assert!(b.watch().await.unwrap().is_empty());
        assert!(a.watch().await.unwrap().is_empty());
        let moved = b.watch().await.unwrap();
        assert!(
            !moved.is_empty() && moved.len() < N,
            "b took its share of the buckets and their sessions: {}",
            moved.len()
        );
        // Steady: nothing handed over, nothing read per session.
        let before = redis.commands_by_name();
        assert!(a.watch().await.unwrap().is_empty());
        assert!(b.watch().await.unwrap().is_empty());
        let ran = ran(&before, &redis.commands_by_name());
        let total: u64 = ran.values().sum();
        assert!(total <= 8, "a steady look ran {total} commands: {ran:?}");
        // a goes away: b takes every bucket and sweeps every session.
        a.close().await.unwrap();
        let swept = b.watch().await.unwrap();
        assert_eq!(
            swept.len(),
            N,
            "every session is swept once an instance is gone"
        );
        assert!(b.watch().await.unwrap().is_empty(), "and only once");
    });
}
