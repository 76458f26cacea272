//! The seq-id layout of a session's streams (src/redis/layout.rs): entry
//! ids `0-SEQ` that Redis numbers itself, the head the stream's own, the
//! followers in the session's hash. What it costs an event, that instances
//! read sessions of both layouts side by side, and that new sessions take
//! it only where allowed and while every live instance reads it. The
//! contract suite runs it whole as backend `redis-seq-ids`
//! (tests/common/mod.rs).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{msg, ran, RedisServer};
use mcp_resume_log::{EventLog, LogError, RedisLog, Retention, SessionRecords, StreamKey};

const S: StreamKey = StreamKey::Session;

async fn instance(redis: &RedisServer, seq_ids: bool) -> RedisLog {
    let log = RedisLog::connect(&redis.url, Retention::default(), 0)
        .await
        .unwrap();
    log.set_seq_ids(seq_ids);
    log
}

/// What `redis-cli` answers, trimmed.
fn cli(redis: &RedisServer, args: &[&str]) -> String {
    redis.cli(args).trim().to_owned()
}

/// An instance that creates seq-id sessions, session `w` on it, and a
/// request stream of `w`'s.
async fn with_request_stream(redis: &RedisServer) -> (RedisLog, u64) {
    let log = instance(redis, true).await;
    log.create_session("w", Bytes::new()).await.unwrap();
    let r = log
        .open_request_stream("w", Bytes::new(), 16)
        .await
        .unwrap();
    (log, r)
}

/// The layout field of session `id`'s hash (empty: seq-zero).
fn layout(redis: &RedisServer, id: &str) -> String {
    cli(redis, &["HGET", &format!("mcpr:{{{id}}}:s"), "v"])
}

/// With its reader on the committing instance, an event of a seq-id
/// session costs Redis the append script, its read of the session's hash
/// and the `XADD`: three commands, against the six of a seq-zero session
/// measured the same way.
#[test]
fn an_event_costs_three_commands_with_its_reader_here() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis, true).await;
        let old = instance(&redis, false).await;
        log.create_session("new", Bytes::new()).await.unwrap();
        old.create_session("old", Bytes::new()).await.unwrap();
        assert_eq!(layout(&redis, "new"), "2");
        assert_eq!(layout(&redis, "old"), "");
        for (writer, id, per_event) in [(&log, "new", 3), (&old, "old", 6)] {
            // The append script loaded before counting.
            let warm = format!("{id}-warm");
            writer.create_session(&warm, Bytes::new()).await.unwrap();
            writer.append(&warm, S, vec![msg(1)]).await.unwrap();
            let (_, sub) = writer.subscribe(id, S).await.unwrap();
            let before = redis.commands_by_name();
            common::append_each_reaching(writer, id, 20, &mut [sub]).await;
            let mut ran = ran(&before, &redis.commands_by_name());
            // The count's own `INFO`.
            ran.remove("info");
            let total: u64 = ran.values().sum();
            assert_eq!(total, 20 * per_event, "{id}: {ran:?}");
            assert_eq!(ran.get("xadd").copied(), Some(20), "{id}: {ran:?}");
        }
    });
}

/// Two instances, one creating seq-id sessions and one not: each reads,
/// tails and appends to the sessions of both, and every reader gets every
/// event once, in order, whoever committed it.
#[test]
fn sessions_of_both_layouts_are_served_side_by_side() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let a = instance(&redis, true).await;
        let b = instance(&redis, false).await;
        a.create_session("x", Bytes::new()).await.unwrap();
        b.create_session("y", Bytes::new()).await.unwrap();
        assert_eq!(
            (layout(&redis, "x"), layout(&redis, "y")),
            ("2".into(), "".into())
        );
        for id in ["x", "y"] {
            let (_, mut on_a) = a.subscribe(id, S).await.unwrap();
            let (_, mut on_b) = b.subscribe(id, S).await.unwrap();
            for seq in 1..=10u64 {
                let writer = if seq % 2 == 0 { &a } else { &b };
                assert_eq!(writer.append(id, S, vec![msg(seq)]).await.unwrap(), seq);
                for sub in [&mut on_a, &mut on_b] {
                    let ev = tokio::time::timeout(Duration::from_secs(2), sub.next())
                        .await
                        .unwrap_or_else(|_| panic!("{id}: event {seq} did not arrive"))
                        .unwrap();
                    assert_eq!((ev.seq, ev.message), (seq, msg(seq)), "{id}");
                }
            }
            for log in [&a, &b] {
                let seqs: Vec<u64> = log
                    .read(id, S, 3, 100)
                    .await
                    .unwrap()
                    .iter()
                    .map(|e| e.seq)
                    .collect();
                assert_eq!(seqs, (4..=10).collect::<Vec<_>>(), "{id}");
                let bounds = log.bounds(id, S).await.unwrap();
                assert_eq!((bounds.head, bounds.floor), (10, 1), "{id}");
            }
        }
        // A request stream of a seq-id session: opened, appended, read by
        // the other instance, retired.
        let r = b
            .open_request_stream("x", Bytes::from_static(b"rec"), 16)
            .await
            .unwrap();
        assert_eq!(
            a.append("x", StreamKey::from_number(r), vec![msg(1)])
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            b.read("x", StreamKey::from_number(r), 0, 10).await.unwrap()[0].message,
            msg(1)
        );
        assert_eq!(
            b.request_meta("x", r).await.unwrap(),
            Bytes::from_static(b"rec")
        );
        a.retire_request_stream("x", r).await.unwrap();
        assert!(matches!(
            b.append("x", StreamKey::from_number(r), vec![msg(2)]).await,
            Err(LogError::NoStream { .. })
        ));
    });
}

/// While an instance of generation 2 (the release before the layout) is
/// alive, an instance allowed the layout still creates seq-zero sessions;
/// once it is gone, and the fleet check has seen it go, seq-id ones.
#[test]
fn an_older_instance_alive_keeps_new_sessions_in_the_old_layout() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        redis.cli(&["SET", "mcpr:instance:older", "2", "PX", "60000"]);
        redis.cli(&["SADD", "mcpr:instances", "older"]);
        let log = instance(&redis, true).await;
        log.create_session("while", Bytes::new()).await.unwrap();
        assert_eq!(layout(&redis, "while"), "", "an older instance is alive");
        redis.cli(&["DEL", "mcpr:instance:older"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut n = 0;
        loop {
            n += 1;
            let id = format!("after{n}");
            log.create_session(&id, Bytes::new()).await.unwrap();
            if layout(&redis, &id) == "2" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still seq-zero 10 s after the older instance went"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The session made while it lived keeps its layout, and works.
        assert_eq!(log.append("while", S, vec![msg(1)]).await.unwrap(), 1);
        assert_eq!(layout(&redis, "while"), "");
    });
}

/// An instance of an older release meeting a seq-id session fails loudly
/// (no stream), and appends nothing: played by the generation-1 append
/// script.
#[test]
fn an_older_release_refuses_a_seq_id_session_loudly() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis, true).await;
        log.create_session("w", Bytes::new()).await.unwrap();
        log.append("w", S, vec![msg(1)]).await.unwrap();
        let r = common::old_append(&redis.url, "w", msg(2).as_ref()).await;
        assert_eq!(r, vec![-2], "the older release's append found no stream");
        assert_eq!(
            log.bounds("w", S).await.unwrap().head,
            1,
            "nothing appended"
        );
    });
}

/// The followers of a seq-id session are in its hash: a reader's
/// registration puts this instance there, and retiring the stream takes
/// it out; the session's end deletes the field with the rest.
#[test]
fn followers_live_in_the_session_hash() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (log, r) = with_request_stream(&redis).await;
        let (_, _s0) = log.subscribe("w", S).await.unwrap();
        let (_, _sr) = log.subscribe("w", StreamKey::from_number(r)).await.unwrap();
        let w = cli(&redis, &["HGET", "mcpr:{w}:s", "w"]);
        assert_eq!(
            w.split_whitespace().count(),
            2,
            "two followed streams: {w:?}"
        );
        assert_eq!(
            cli(&redis, &["EXISTS", "mcpr:{w}:f"]),
            "0",
            "no follower set"
        );
        log.retire_request_stream("w", r).await.unwrap();
        let w = cli(&redis, &["HGET", "mcpr:{w}:s", "w"]);
        assert_eq!(
            w.split_whitespace().count(),
            1,
            "the retired stream's went: {w:?}"
        );
        log.end_session("w").await.unwrap();
        assert_eq!(cli(&redis, &["HGET", "mcpr:{w}:s", "w"]), "");
    });
}

/// An instance that waits for replicas (a strict tail, which delivers up
/// to each stream's committed head `c`) reading a seq-id session, whose
/// streams have no `c`: what is in them is committed, and it is delivered.
#[test]
fn a_strict_tail_delivers_a_seq_id_stream() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let writer = instance(&redis, true).await;
        let strict = RedisLog::connect(&redis.url, Retention::default(), 1)
            .await
            .unwrap();
        writer.create_session("w", Bytes::new()).await.unwrap();
        assert_eq!(layout(&redis, "w"), "2");
        let (_, mut sub) = strict.subscribe("w", S).await.unwrap();
        // More than a wake-up carries (16 messages): the strict tail reads
        // the stream, and delivers only what it takes for committed.
        writer
            .append("w", S, (1..=20).map(msg).collect())
            .await
            .unwrap();
        for seq in 1..=20u64 {
            let ev = tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .unwrap_or_else(|_| panic!("event {seq} held by the strict tail"))
                .unwrap();
            assert_eq!(ev.seq, seq);
        }
        // Its own appends to it are refused, loudly: it commits after the
        // script, which this layout leaves no room for.
        let e = strict.append("w", S, vec![msg(9)]).await.unwrap_err();
        assert!(
            matches!(e, LogError::Storage(ref m) if m.contains("seq-id")),
            "{e:?}"
        );
    });
}

/// A request stream an instance of an older release opened in a seq-id
/// session (its `open_request.lua` writes the old layout's heads, played
/// here by hand) is neither appended to nor read by this release: the two
/// numberings in one stream would let the older instance skip events.
#[test]
fn a_request_stream_an_older_release_opened_is_refused_loudly() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis, true).await;
        log.create_session("w", Bytes::new()).await.unwrap();
        // What generation 2's open_request.lua writes for stream 1.
        redis.cli(&["HINCRBY", "mcpr:{w}:s", "r", "1"]);
        redis.cli(&[
            "HSET",
            "mcpr:{w}:st:1",
            "h",
            "0",
            "f",
            "1",
            "c",
            "0",
            "m",
            "rec",
        ]);
        redis.cli(&["SADD", "mcpr:{w}:rs", "1"]);
        let r = StreamKey::from_number(1);
        for e in [
            log.append("w", r, vec![msg(1)]).await.unwrap_err(),
            log.bounds("w", r).await.unwrap_err(),
            log.read("w", r, 0, 10).await.unwrap_err(),
            log.request_meta("w", 1).await.unwrap_err(),
        ] {
            assert!(
                matches!(e, LogError::Storage(ref m) if m.contains("older release")),
                "{e:?}"
            );
        }
        assert_eq!(
            cli(&redis, &["EXISTS", "mcpr:{w}:ev:1"]),
            "0",
            "nothing appended"
        );
    });
}

/// A request stream opened under a session id used before (its tombstone
/// forgotten) starts from nothing, not from the last id of the earlier
/// session's stream that retention emptied (kept a day, past the end).
#[test]
fn a_reused_id_does_not_inherit_an_emptied_stream() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (log, r) = with_request_stream(&redis).await;
        let stream = StreamKey::from_number(r);
        log.append("w", stream, vec![msg(1), msg(2)]).await.unwrap();
        // What an emptied stream leaves behind, as if its session's id came back.
        redis.cli(&["DEL", "mcpr:{w}:s", "mcpr:{w}:rs"]);
        redis.cli(&["SREM", "mcpr:sessions", "w"]);
        redis.cli(&["HSET", &format!("mcpr:{{w}}:st:{r}"), "x", "1"]);
        log.create_session("w", Bytes::new()).await.unwrap();
        let again = log
            .open_request_stream("w", Bytes::new(), 16)
            .await
            .unwrap();
        assert_eq!(again, r, "the same number");
        let b = log.bounds("w", stream).await.unwrap();
        assert_eq!((b.head, b.floor), (0, 1));
        assert_eq!(log.append("w", stream, vec![msg(1)]).await.unwrap(), 1);
    });
}
