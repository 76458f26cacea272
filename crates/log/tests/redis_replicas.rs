//! "Committed" with replicas (docs/protocol.md 6): an append counts once Redis
//! and `--redis-replicas` replicas hold it, and no reader, on any instance,
//! sees an event before that. Against a real primary and a real replica.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{msg, RedisServer};
use mcp_resume_log::{EventLog, SessionRecords};
use mcp_resume_log::{LogError, RedisLog, Retention, StreamKey, Subscription};
use mcp_resume_testkit::rt;

const S: StreamKey = StreamKey::Session;

fn replica_of(primary: &RedisServer) -> RedisServer {
    let (h, p) = primary.host_port();
    RedisServer::start_with(&["--replicaof", &h, &p])
}

/// Waits until the primary sees `n` replicas online.
async fn replicas_online(url: &str, n: usize) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for _ in 0..200 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap();
        if info.contains(&format!("connected_slaves:{n}")) && (n == 0 || info.contains("online")) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the primary never saw {n} replicas online");
}

/// Each of `subs` gets the events `seqs`, in order, each within 5 s.
async fn delivered(subs: &mut [Subscription], seqs: impl IntoIterator<Item = u64> + Clone) {
    for sub in subs {
        for want in seqs.clone() {
            let ev = tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .expect("delivered")
                .unwrap();
            assert_eq!(ev.seq, want);
        }
    }
}

#[test]
fn nothing_is_readable_before_the_replicas_hold_it() {
    let primary = RedisServer::start();
    let mut replica = Some(replica_of(&primary));
    rt().block_on(async {
        replicas_online(&primary.url, 1).await;
        let log = RedisLog::connect(&primary.url, Retention::default(), 1)
            .await
            .unwrap();
        // Another instance reads what this one writes, and so does this one
        // (handed its commits from their replies, once committed).
        let other = RedisLog::connect(&primary.url, Retention::default(), 1)
            .await
            .unwrap();
        log.create_session("a", Bytes::new()).await.unwrap();
        let (b, sub) = other.subscribe("a", S).await.unwrap();
        assert_eq!(b.head, 0);
        let (_, here) = log.subscribe("a", S).await.unwrap();
        let mut subs = [sub, here];
        assert_eq!(
            log.append("a", S, (1..=10).map(msg).collect())
                .await
                .unwrap(),
            10
        );
        delivered(&mut subs, 1..=10).await;

        // The replica goes: an append is in Redis but not committed.
        drop(replica.take());
        replicas_online(&primary.url, 0).await;
        let err = log.append("a", S, vec![msg(11)]).await.unwrap_err();
        assert!(matches!(err, LogError::Unavailable(_)), "{err:?}");
        assert_eq!(other.bounds("a", S).await.unwrap().head, 10, "not named");
        assert!(
            other.read("a", S, 10, 100).await.unwrap().is_empty(),
            "not read"
        );
        for sub in &mut subs {
            assert!(
                tokio::time::timeout(Duration::from_millis(800), sub.next())
                    .await
                    .is_err(),
                "not sent to a subscriber"
            );
        }

        // A replica again: the next commit covers both, delivered in order.
        replica = Some(replica_of(&primary));
        replicas_online(&primary.url, 1).await;
        assert_eq!(log.append("a", S, vec![msg(12)]).await.unwrap(), 12);
        delivered(&mut subs, [11, 12]).await;
        assert_eq!(other.bounds("a", S).await.unwrap().head, 12);
    });
    drop(replica);
}

/// With replicas the tail is polled (the ring comes after the `WAIT`): a
/// commit that finds the reader's wake stream gone (Redis lost it) drops
/// the reader's registration. The reader's check finds the stream gone,
/// makes it again and registers what it follows again, so later commits
/// wake it again instead of leaving it to the safety reads for as long as
/// it follows the stream.
#[test]
fn a_lost_wake_stream_is_made_good_on_a_polled_tail() {
    let primary = RedisServer::start();
    let _replica = replica_of(&primary);
    rt().block_on(async {
        replicas_online(&primary.url, 1).await;
        let connect = || RedisLog::connect(&primary.url, Retention::default(), 1);
        let (writer, reader) = (connect().await.unwrap(), connect().await.unwrap());
        writer.create_session("w", Bytes::new()).await.unwrap();
        let (_, mut sub) = reader.subscribe("w", S).await.unwrap();
        writer.append("w", S, vec![msg(1)]).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(2), sub.next()).await;
        assert_eq!(first.unwrap().unwrap().seq, 1);
        let followers = || primary.cli(&["SCARD", "mcpr:{w}:f"]).trim().to_owned();
        let wakes = || primary.cli(&["--scan", "--pattern", "mcpr:wake:*"]);
        assert_eq!(followers(), "1", "the reader's instance follows the stream");
        let wake = wakes()
            .lines()
            .next()
            .expect("the reader's wake stream")
            .to_owned();
        // No check until the commit below has dropped the registration.
        reader.pace_wake_stream(Duration::from_secs(60), Duration::from_secs(3600));
        assert_eq!(primary.cli(&["DEL", &wake]).trim(), "1");
        // This commit finds no wake stream and drops the registration.
        writer.append("w", S, vec![msg(2)]).await.unwrap();
        let started = std::time::Instant::now();
        while followers() != "0" {
            assert!(started.elapsed() < Duration::from_secs(2), "never dropped");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let second = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
        assert_eq!(second.expect("event 2 is read").unwrap().seq, 2);
        // Within the check (every 100 ms now, after a blocking read of up
        // to a second): the wake stream again, and the registration with it.
        reader.pace_wake_stream(Duration::from_secs(60), Duration::from_millis(100));
        let started = std::time::Instant::now();
        while followers() != "1" || wakes().trim() != wake {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "the lost wake stream and registration were not made again"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// With replicas the committing instance rings the followers after the
/// commit (and its `WAIT`), leaving itself out: its own reader gets each
/// event from the append's reply once committed, another instance's from
/// its wake stream. Each commit costs the primary its event's `XADD` and
/// the other instance's wake-up, no third for the committing one's.
#[test]
fn a_reader_on_the_committing_instance_gets_the_commit_from_its_reply() {
    let primary = RedisServer::start();
    let _replica = replica_of(&primary);
    rt().block_on(async {
        replicas_online(&primary.url, 1).await;
        let connect = || RedisLog::connect(&primary.url, Retention::default(), 1);
        let (writer, other) = (connect().await.unwrap(), connect().await.unwrap());
        writer.create_session("w", Bytes::new()).await.unwrap();
        let (_, here) = writer.subscribe("w", S).await.unwrap();
        let (_, there) = other.subscribe("w", S).await.unwrap();
        let before = primary.commands_by_name();
        common::append_each_reaching(&writer, "w", 10, &mut [here, there]).await;
        // The last ring runs after its append returned.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ran = common::ran(&before, &primary.commands_by_name());
        assert_eq!(
            ran.get("xadd").copied().unwrap_or(0),
            20,
            "10 events and the other instance's 10 wake-ups, nothing more: {ran:?}"
        );
    });
}
