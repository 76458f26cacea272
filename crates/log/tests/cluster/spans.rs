//! What spans slots on a cluster: the live set and the ended index (in
//! buckets), the tail (polled per stream, grouped by node), `WAIT` (on the
//! session's master).

use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{RedisLog, Retention, StreamKey};
use mcp_resume_testkit::{rt, RedisCluster};

use crate::common::msg;
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};

const S: StreamKey = StreamKey::Session;
const N: usize = 60;

fn id(i: usize) -> String {
    format!("sess-{i}")
}

/// Sessions on every master: counted, listed, ended, their tombstones
/// forgotten, and nothing of them left on any node.
#[test]
fn sessions_on_every_master_are_counted_listed_and_forgotten() {
    let cluster = RedisCluster::start(3, 1);
    let masters: std::collections::HashSet<u16> = (0..N)
        .map(|i| cluster.master_of(&format!("{{{}}}", id(i))))
        .collect();
    assert_eq!(masters.len(), 3, "the sessions span every master");
    rt().block_on(async {
        let log = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        for i in 0..N {
            log.create_session(&id(i), Bytes::new()).await.unwrap();
            log.append(&id(i), S, vec![msg(1)]).await.unwrap();
        }
        assert_eq!(log.live_sessions().await, N);
        let mut ids = log.session_ids().await.unwrap();
        ids.sort();
        let mut want: Vec<String> = (0..N).map(id).collect();
        want.sort();
        assert_eq!(ids, want);
        for i in 0..N {
            log.end_session(&id(i)).await.unwrap();
        }
        assert_eq!(log.live_sessions().await, 0);
        let long = Duration::from_secs(3600);
        log.maintain(long, long).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), N);
        tokio::time::sleep(Duration::from_millis(20)).await;
        log.maintain(long, Duration::from_millis(1)).await.unwrap();
        assert_eq!(log.tombstones().await.unwrap(), 0);
        for port in cluster.masters() {
            let keys = cluster.cli(port, &["KEYS", "mcpr:{sess-*"]);
            assert!(keys.trim().is_empty(), "left on {port}: {keys}");
        }
        log.close().await.unwrap();
    });
}

/// A listing that a crash lost is reconciled by maintenance: an id listed
/// but never created is unlisted; an ended session still listed is filed
/// as a tombstone.
#[test]
fn maintenance_reconciles_a_half_done_listing() {
    let cluster = RedisCluster::start(3, 1);
    rt().block_on(async {
        let log = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        log.create_session("ended", Bytes::new()).await.unwrap();
        log.end_session("ended").await.unwrap();
        // As if the instance died between the script and the listing.
        let bucket = |id: &str| {
            let slot: u16 = cluster
                .cli(cluster.masters()[0], &["CLUSTER", "KEYSLOT", id])
                .trim()
                .parse()
                .unwrap();
            slot % 64
        };
        for (id, cmd) in [("ended", "SADD"), ("ghost", "SADD")] {
            let key = format!("mcpr:sessions:{{b{}}}", bucket(id));
            let port = cluster.master_of(&key);
            cluster.cli(port, &[cmd, &key, id]);
        }
        let ended = format!("mcpr:ended:{{b{}}}", bucket("ended"));
        cluster.cli(cluster.master_of(&ended), &["ZREM", &ended, "ended"]);
        assert_eq!(log.live_sessions().await, 2, "both listed");
        let long = Duration::from_secs(3600);
        log.maintain(long, long).await.unwrap();
        assert_eq!(log.live_sessions().await, 0);
        assert_eq!(log.tombstones().await.unwrap(), 1, "the ended one filed");
        log.close().await.unwrap();
    });
}

/// Readers on one instance follow streams on all three masters, written
/// by another, each getting every event in order; with `WAIT 1` on each
/// session's own master.
#[test]
fn readers_follow_streams_on_every_master_with_replicas() {
    let cluster = RedisCluster::start(3, 1);
    rt().block_on(async {
        let writer = RedisLog::connect(&cluster.url, Retention::default(), 1)
            .await
            .unwrap();
        let reader = RedisLog::connect(&cluster.url, Retention::default(), 1)
            .await
            .unwrap();
        let (words, warning) = writer.durability().await;
        assert!(warning.is_none(), "{words}: {warning:?}");
        assert!(words.contains("1 replicas connected"), "{words}");
        let mut subs = Vec::new();
        for i in 0..N {
            writer.create_session(&id(i), Bytes::new()).await.unwrap();
            writer.append(&id(i), S, vec![msg(1)]).await.unwrap();
            let (b, sub) = reader.subscribe(&id(i), S).await.unwrap();
            assert_eq!(b.head, 1);
            subs.push(sub);
        }
        for i in 0..N {
            writer
                .append(&id(i), S, (2..=20).map(msg).collect())
                .await
                .unwrap();
        }
        for (i, mut sub) in subs.into_iter().enumerate() {
            for want in 2..=20 {
                let ev = tokio::time::timeout(Duration::from_secs(10), sub.next())
                    .await
                    .unwrap_or_else(|_| panic!("{}: nothing after {}", id(i), want - 1))
                    .unwrap();
                assert_eq!(ev.seq, want, "{}", id(i));
            }
        }
    });
}

/// A commit wakes the instances that follow the stream: events arrive in
/// about a round trip, not at the next safety read (1 s).
#[test]
fn a_commit_wakes_its_followers() {
    let cluster = RedisCluster::start(3, 0);
    rt().block_on(async {
        let writer = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        let reader = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        let mut subs = Vec::new();
        for i in 0..20 {
            writer.create_session(&id(i), Bytes::new()).await.unwrap();
            subs.push(reader.subscribe(&id(i), S).await.unwrap().1);
        }
        tokio::time::sleep(Duration::from_millis(1500)).await; // past a safety read
        let mut lat = Vec::new();
        for round in 1..=5u64 {
            for (i, sub) in subs.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                writer.append(&id(i), S, vec![msg(round)]).await.unwrap();
                let ev = tokio::time::timeout(Duration::from_secs(5), sub.next())
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(ev.seq, round);
                lat.push(t.elapsed());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        lat.sort();
        let median = lat[lat.len() / 2];
        assert!(
            median < Duration::from_millis(250),
            "woken, not found by the safety read: median {median:?}"
        );
    });
}
