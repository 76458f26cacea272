//! An instance follows its readers' Redis streams over a few shared
//! connections, not one per reader, and every reader still gets every event
//! after its own commit point, in order.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{msg, RedisServer};
use mcp_resume_log::{EventLog, SessionRecords};
use mcp_resume_log::{RedisLog, Retention, StreamKey};

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

#[test]
fn three_hundred_readers_share_a_handful_of_connections() {
    let redis = RedisServer::start();
    mcp_resume_testkit::rt().block_on(async {
        let writer = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
        let reader = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap();
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
            n <= 2 + 64 + 1,
            "two managers, at most 64 tail shards and the reader of session end notices, not one per reader: {n} connections"
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
