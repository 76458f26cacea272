//! A new reader between the script that reads its bounds (and registers
//! its instance as its stream's follower) and joining its shard: whatever
//! happens in between (a commit, the stream let go, the wake stream lost,
//! the session ending) reaches it, and leaves nothing behind in Redis.

use super::*;

/// What [`join_held`]'s task gives back: the reader's log, and the head
/// and subscription it joined with.
type Joined = (
    RedisLog,
    Result<(u64, Subscription), mcp_resume_log::LogError>,
);

/// A reader of `session` on `reader` that waits `hold` between its bounds
/// (read, and its instance registered, when the call is made) and joining
/// its shard, so commits can fall in between.
fn join_held(
    reader: RedisLog,
    session: &'static str,
    hold: Duration,
) -> tokio::task::JoinHandle<Joined> {
    reader.hold_joins(hold);
    tokio::spawn(async move {
        let r = reader
            .subscribe(session, S)
            .await
            .map(|(b, sub)| (b.head, sub));
        (reader, r)
    })
}

/// Event 1 of `session` (created), then a reader of it on `reader` held
/// `hold` before joining. 300 ms in, once its script has run (registered,
/// its head read), `between` runs and `event` is committed as event 2,
/// which the joined reader must get within two seconds. Returns the
/// reader's log and its subscription.
async fn commit_while_joining(
    redis: &RedisServer,
    writer: &RedisLog,
    reader: RedisLog,
    session: &'static str,
    hold: Duration,
    between: fn(&RedisServer),
    event: Bytes,
) -> (RedisLog, Subscription) {
    writer.append(session, S, vec![msg(1)]).await.unwrap();
    let joining = join_held(reader, session, hold);
    tokio::time::sleep(Duration::from_millis(300)).await;
    between(redis);
    writer.append(session, S, vec![event]).await.unwrap();
    let (reader, joined) = joining.await.unwrap();
    let (head, mut sub) = joined.unwrap();
    assert_eq!(head, 1, "the head read before the commit");
    let ev = tokio::time::timeout(Duration::from_secs(2), sub.next())
        .await
        .expect("committed while the reader joined: it reaches the reader")
        .unwrap();
    assert_eq!(ev.seq, 2);
    (reader, sub)
}

/// A commit of more than 1 KiB, whose wake-up only names its stream.
fn large() -> Bytes {
    Bytes::from(format!("{{\"pad\":\"{}\"}}", "x".repeat(2048)))
}

/// A commit after a new reader's bounds were read (and its instance
/// registered) but before the reader joined its shard rings an instance
/// that does not follow the stream yet: the shard keeps that for the
/// joining reader, whose stream is read once it joins, so the event is not
/// left waiting for a wake-up that already came (one server: no safety
/// reads). A small commit's wake-up carries its events, a large one's only
/// names the stream: both.
#[test]
fn a_commit_while_a_reader_joins_reaches_it() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, mut reader) = (instance(&redis).await, instance(&redis).await);
        // A session each: a stream the shard has followed since the joiner
        // was prepared is read on joining whatever rang, which would hide
        // the wake-up's own path.
        for (session, event) in [("small", msg(2)), ("large", large())] {
            writer.create_session(session, Bytes::new()).await.unwrap();
            let hold = Duration::from_millis(600);
            (reader, _) =
                commit_while_joining(&redis, &writer, reader, session, hold, |_| {}, event).await;
        }
    });
}

/// A stream the shard follows when a new reader of it is prepared, let go
/// before the reader joins (its last reader left) with a wake-up taken
/// meanwhile (a large commit, which only names the stream): the shard
/// dropped the stream without reading it, and the joining reader's stream
/// is read on joining, so the commit reaches it.
#[test]
fn a_stream_let_go_while_a_reader_joins_is_read() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader) = (instance(&redis).await, instance(&redis).await);
        writer.create_session("w", Bytes::new()).await.unwrap();
        let (_, first) = reader.subscribe("w", S).await.unwrap();
        drop(first);
        let hold = Duration::from_millis(600);
        commit_while_joining(&redis, &writer, reader, "w", hold, |_| {}, large()).await;
    });
}

/// The wake stream lost while a reader joins (Redis lost it): the commit in
/// between cannot ring, and drops the fresh registration. The instance's
/// check finds the wake stream gone, registers the joining stream again
/// with the followed ones and has it read on joining: the event arrives,
/// and later commits ring it again.
#[test]
fn a_wake_stream_lost_while_a_reader_joins_is_made_good() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader) = (instance(&redis).await, instance(&redis).await);
        writer.create_session("w", Bytes::new()).await.unwrap();
        // Held past the instance's check of its wake stream (every second).
        // The commit finds no wake stream and drops the registration
        // (unless the instance's check came between the two, a few ms out
        // of its second: then it rings the new wake stream).
        let hold = Duration::from_millis(2500);
        let (_reader, mut sub) = commit_while_joining(
            &redis,
            &writer,
            reader,
            "w",
            hold,
            lose_the_wake_stream,
            msg(2),
        )
        .await;
        woken_again(&writer, &mut sub).await;
    });
}

/// A session that ends while a reader of it joins (its end notice reaches
/// the instance before the reader is in its shard) ends the reader at once,
/// as it would a reader already there: nothing waits for events that will
/// never come (one server: no backstop for a while).
#[test]
fn a_session_ending_while_a_reader_joins_ends_it() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader) = (instance(&redis).await, instance(&redis).await);
        writer.create_session("w", Bytes::new()).await.unwrap();
        let joining = join_held(reader, "w", Duration::from_millis(800));
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer.end_session("w").await.unwrap();
        let (_reader, joined) = joining.await.unwrap();
        let (_, mut sub) = joined.unwrap();
        let end = tokio::time::timeout(Duration::from_secs(2), sub.next())
            .await
            .expect("ended at once, not left waiting");
        assert_eq!(
            end.map(|e| e.seq),
            Err(mcp_resume_log::LogError::SessionEnded)
        );
    });
}

/// A session that ends while a reader of it joins, with a resync between
/// the end and the join (its wake stream lost): the resync registers
/// what its shards follow or are joining again, but not for a session
/// that ended, whose follower set the end deleted and nothing would
/// delete again.
#[test]
fn a_resync_leaves_no_follower_set_of_an_ended_session() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, reader, _sub) = two_instances_following(&redis).await;
        reader.pace_wake_stream(Duration::from_secs(60), Duration::from_millis(100));
        writer.create_session("x", Bytes::new()).await.unwrap();
        let joining = join_held(reader, "x", Duration::from_secs(6));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let followers = || redis.cli(&["EXISTS", "mcpr:{x}:f"]).trim().to_owned();
        assert_eq!(followers(), "1", "the reader's script registered it");
        writer.end_session("x").await.unwrap();
        assert_eq!(followers(), "0", "the end deleted it");
        lose_the_wake_stream(&redis);
        // The check (every 100 ms, after a blocking read of up to a
        // second) finds it gone, and resyncs while the reader still joins.
        let started = std::time::Instant::now();
        while redis
            .cli(&["--scan", "--pattern", "mcpr:wake:*"])
            .trim()
            .is_empty()
        {
            assert!(
                started.elapsed() < Duration::from_secs(4),
                "the resync made the wake stream again"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!joining.is_finished(), "the resync came before the join");
        let (_reader, joined) = joining.await.unwrap();
        if let Ok((_, mut sub)) = joined {
            let end = tokio::time::timeout(Duration::from_secs(2), sub.next()).await;
            assert!(
                matches!(end, Ok(Err(_))),
                "the reader of an ended session ends"
            );
        }
        assert_eq!(followers(), "0", "a follower set outlived its session");
    });
}
