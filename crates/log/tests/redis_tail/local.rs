//! A commit's own instance hands it to its readers from the append script's
//! reply (`tail/local.rs`): the script rings only the other instances'
//! wake streams, and a commit whose reply never came still reaches the
//! readers here.

use super::*;

/// Two readers of one stream, one on the committing instance and one on
/// another: each commit costs Redis its event's `XADD` and one wake-up,
/// the other instance's (the committing instance's own was a second, and
/// a blocking read of it), and both readers get every event at once.
#[test]
fn a_reader_on_the_committing_instance_costs_no_wake_up() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let (writer, other) = (instance(&redis).await, instance(&redis).await);
        writer.create_session("w", Bytes::new()).await.unwrap();
        let (_, here) = writer.subscribe("w", S).await.unwrap();
        let (_, there) = other.subscribe("w", S).await.unwrap();
        let before = redis.commands_by_name();
        common::append_each_reaching(&writer, "w", 20, &mut [here, there]).await;
        let ran = ran(&before, &redis.commands_by_name());
        assert_eq!(
            ran.get("xadd").copied().unwrap_or(0),
            40,
            "20 events and the other instance's 20 wake-ups, nothing more: {ran:?}"
        );
        // Neither stream was read: the events came with their commits.
        assert_eq!(ran.get("xrange").copied().unwrap_or(0), 0, "{ran:?}");
    });
}

/// An append whose caller stopped waiting before Redis ran it (held by
/// `CLIENT PAUSE`): the script commits it later, with nobody to hand it
/// over, and it still reaches the committing instance's reader, by a
/// read of the stream, and later commits as before.
#[test]
fn a_commit_whose_reply_never_came_still_reaches_a_reader_here() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let log = instance(&redis).await;
        log.create_session("w", Bytes::new()).await.unwrap();
        let (_, mut sub) = log.subscribe("w", S).await.unwrap();
        woken_at_once(&log, "w", &mut sub).await;
        redis.cli(&["CLIENT", "PAUSE", "600", "WRITE"]);
        let dropped =
            tokio::time::timeout(Duration::from_millis(100), log.append("w", S, vec![msg(2)]))
                .await;
        assert!(dropped.is_err(), "the paused append answered: {dropped:?}");
        let ev = tokio::time::timeout(Duration::from_secs(3), sub.next())
            .await
            .expect("the commit nobody saw reached the reader")
            .unwrap();
        assert_eq!((ev.seq, ev.message), (2, msg(2)));
        log.append("w", S, vec![msg(3)]).await.unwrap();
        let ev = tokio::time::timeout(Duration::from_secs(1), sub.next())
            .await
            .expect("woken within a second")
            .unwrap();
        assert_eq!(ev.seq, 3);
    });
}
