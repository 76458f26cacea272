//! A rolling upgrade between releases that write the follower set in
//! different forms (src/redis/tail/members.rs). Every instance's heartbeat
//! says its generation; an instance registers the compact members (an
//! intset: under 1 KB a session) only while every live instance reads
//! them, and an older instance joining, whose commits wake only named
//! members, is served again within the fleet check: what it committed
//! meanwhile is read, not lost. The older instance is played by its own
//! append script (tests/fixtures/append-generation-1.lua) and heartbeat.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{msg, RedisServer};
use mcp_resume_log::{EventLog, RedisLog, Retention, SessionRecords, StreamKey, Subscription};

const S: StreamKey = StreamKey::Session;

/// Commits `seq`'s message on session `w`'s stream as an instance of
/// generation 1 does on one server: its own append script, which rings
/// in the commit's step.
async fn old_commit(url: &str, seq: u64) {
    old_commit_to(url, "w", seq).await
}

/// [`old_commit`] to session `id`.
async fn old_commit_to(url: &str, id: &str, seq: u64) {
    let r = common::old_append(url, id, msg(seq).as_ref()).await;
    assert_eq!(r[0], seq as i64, "the old script appended at {seq}");
}

/// The members of session `w`'s follower set.
fn followers(redis: &RedisServer) -> Vec<String> {
    redis
        .cli(&["SMEMBERS", "mcpr:{w}:f"])
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Waits (at most 10 s) until every member of `w`'s follower set is named
/// (`named`) or compact.
async fn members_become(redis: &RedisServer, named: bool) {
    let started = Instant::now();
    loop {
        let m = followers(redis);
        if !m.is_empty() && m.iter().all(|m| m.contains('|') == named) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "members not {} after 10 s: {m:?}",
            if named { "named" } else { "compact" }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn next_seq(sub: &mut Subscription, within: Duration) -> u64 {
    tokio::time::timeout(within, sub.next())
        .await
        .expect("the event arrived")
        .unwrap()
        .seq
}

/// One instance on `redis` that created session `w` and follows its stream.
async fn following_w(redis: &RedisServer) -> (RedisLog, Subscription) {
    let log = RedisLog::connect(&redis.url, Retention::default(), 0)
        .await
        .unwrap();
    log.create_session("w", Bytes::new()).await.unwrap();
    let (_, sub) = log.subscribe("w", S).await.unwrap();
    (log, sub)
}

/// Registers a live instance of generation 1, as its heartbeat does.
fn older_instance_joins(redis: &RedisServer) {
    redis.cli(&["SET", "mcpr:instance:old", "1", "PX", "60000"]);
    redis.cli(&["SADD", "mcpr:instances", "old"]);
}

#[test]
fn a_fleet_of_one_generation_registers_compact_members() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let connect = || RedisLog::connect(&redis.url, Retention::default(), 0);
        let (writer, reader) = (connect().await.unwrap(), connect().await.unwrap());
        writer.create_session("w", Bytes::new()).await.unwrap();
        let (_, mut sub) = reader.subscribe("w", S).await.unwrap();
        members_become(&redis, false).await;
        assert_eq!(
            redis.cli(&["OBJECT", "ENCODING", "mcpr:{w}:f"]).trim(),
            "intset"
        );
        let bytes: u64 = redis
            .cli(&["MEMORY", "USAGE", "mcpr:{w}:f"])
            .trim()
            .parse()
            .unwrap();
        assert!(bytes <= 160, "one compact member: {bytes} B");
        // A compact member wakes its instance as a named one did.
        writer.append("w", S, vec![msg(1)]).await.unwrap();
        assert_eq!(next_seq(&mut sub, Duration::from_secs(1)).await, 1);
    });
}

#[test]
fn an_older_instance_joining_is_served_and_nothing_it_commits_is_lost() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, mut sub) = following_w(&redis).await;
        members_become(&redis, false).await;

        // An older instance joins and commits at once, before the fleet
        // check: its script wakes nobody, and the event is read when this
        // instance registers again in the named form.
        older_instance_joins(&redis);
        old_commit(&redis.url, 1).await;
        assert_eq!(next_seq(&mut sub, Duration::from_secs(6)).await, 1);
        members_become(&redis, true).await;

        // Registered in the form it reads: its commits wake at once.
        old_commit(&redis.url, 2).await;
        assert_eq!(next_seq(&mut sub, Duration::from_secs(1)).await, 2);
        // And this release's commits still do.
        writer.append("w", S, vec![msg(3)]).await.unwrap();
        assert_eq!(next_seq(&mut sub, Duration::from_secs(1)).await, 3);

        // The older instance stops: the compact form again.
        redis.cli(&["DEL", "mcpr:instance:old"]);
        members_become(&redis, false).await;
        writer.append("w", S, vec![msg(4)]).await.unwrap();
        assert_eq!(next_seq(&mut sub, Duration::from_secs(1)).await, 4);
    });
}

/// While an older instance lives, a newer one registers named members from
/// its first follow.
#[test]
fn an_instance_starting_beside_an_older_one_registers_named_members() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        older_instance_joins(&redis);
        let (_log, mut sub) = following_w(&redis).await;
        let m = followers(&redis);
        assert!(m.len() == 1 && m[0].contains('|'), "{m:?}");
        old_commit(&redis.url, 1).await;
        assert_eq!(next_seq(&mut sub, Duration::from_secs(1)).await, 1);
    });
}

/// Retiring a request stream forgets its followers in either form (the set
/// would otherwise grow with every call a long-lived session makes), and
/// keeps the other streams' followers.
#[test]
fn a_retired_stream_drops_its_followers_of_either_form() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (log, _session) = following_w(&redis).await;
        let r = log
            .open_request_stream("w", Bytes::new(), 10)
            .await
            .unwrap();
        let (_, _call) = log.subscribe("w", StreamKey::Request(r)).await.unwrap();
        // A named member of another instance for the same stream.
        let named = format!("mcpr:wake:{{999999999999}}|mcpr:{{w}}:ev:{r}");
        redis.cli(&["SADD", "mcpr:{w}:f", &named]);
        assert_eq!(followers(&redis).len(), 3, "{:?}", followers(&redis));
        log.retire_request_stream("w", r).await.unwrap();
        let left = followers(&redis);
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].ends_with('0') && !left[0].contains('|'), "{left:?}");
    });
}

/// Streams followed, one after the other, while an older instance joins and
/// the fleet check changes the form: each ends up with a member the older
/// instance's script wakes. (The narrowest interleaving, a registration in
/// the compact form whose stream joins its shard just after the change's
/// reform listed them, which `Bell::registered_under` answers with another
/// reform, is possible here but not forced: it did not occur in three runs
/// without that answer.)
#[test]
fn streams_followed_while_an_older_instance_joins_are_all_woken_by_it() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = std::sync::Arc::new(
            RedisLog::connect(&redis.url, Retention::default(), 0)
                .await
                .unwrap(),
        );
        let opener = {
            let log = log.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let mut subs = Vec::new();
                while started.elapsed() < Duration::from_secs(5) {
                    let id = format!("s{}", subs.len());
                    log.create_session(&id, Bytes::new()).await.unwrap();
                    subs.push((id.clone(), log.subscribe(&id, S).await.unwrap().1));
                }
                subs
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        older_instance_joins(&redis);
        let mut subs = opener.await.unwrap();
        // Past the check and its reform.
        tokio::time::sleep(Duration::from_secs(4)).await;
        for (id, sub) in &mut subs {
            old_commit_to(&redis.url, id, 1).await;
            let got = tokio::time::timeout(Duration::from_secs(1), sub.next()).await;
            assert_eq!(
                got.unwrap_or_else(|_| panic!("{id}: not woken by the older instance"))
                    .unwrap()
                    .seq,
                1
            );
        }
        assert!(subs.len() > 20, "{} streams followed", subs.len());
    });
}
