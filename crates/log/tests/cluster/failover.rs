//! A master killed with `kill -9` while sessions on it are written and
//! read, with `--redis-replicas 1`: its replica takes over, requests in
//! between fail loudly (`Unavailable`, a 503 to a client), open readers
//! end and resume from their cursors, and nothing a reader saw is lost or
//! differs afterwards.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{LogError, RedisLog, Retention, Seq, StreamKey};
use mcp_resume_testkit::{rt, RedisCluster};

use crate::common::msg;
use mcp_resume_log::{EventLog, SessionRecords};

const S: StreamKey = StreamKey::Session;
const SESSIONS: usize = 12;

fn id(i: usize) -> String {
    format!("fo-{i}")
}

/// What one reader saw, resuming from its cursor whenever its stream ends.
async fn follow(log: Arc<RedisLog>, id: String, stop: Arc<AtomicBool>) -> (Vec<(Seq, Bytes)>, u64) {
    let mut seen: Vec<(Seq, Bytes)> = Vec::new();
    let mut refusals = 0;
    while !stop.load(Ordering::Relaxed) {
        let cursor = seen.last().map_or(0, |e| e.0);
        // Catch up with a read, then follow: what a resuming client does.
        let (b, mut sub) = match log.subscribe(&id, S).await {
            Ok(x) => x,
            Err(_) => {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if b.head < cursor {
            // Only if the committed head's own replication lost the race with
            // the kill (docs/capacity.md): loud, and over at the next commit.
            refusals += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let mut after = cursor;
        let mut ok = true;
        while after < b.head {
            match log.read(&id, S, after, 512).await {
                Ok(evs) if !evs.is_empty() => {
                    for e in evs {
                        assert_eq!(e.seq, after + 1, "{id}: a gap in a read");
                        after = e.seq;
                        seen.push((e.seq, e.message));
                    }
                }
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            refusals += 1;
            continue;
        }
        while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(300), sub.next()).await {
            if e.seq <= after {
                continue; // the subscription's commit point was below the read's end
            }
            assert_eq!(e.seq, after + 1, "{id}: a gap in the tail");
            after = e.seq;
            seen.push((e.seq, e.message));
            if stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
    (seen, refusals)
}

#[test]
fn a_killed_master_loses_nothing_a_reader_saw() {
    let mut cluster = RedisCluster::start(3, 1);
    let url = cluster.url.clone();
    let victim = cluster.master_of(&format!("{{{}}}", id(0)));
    let runtime = rt();
    let (writer, reader) = runtime.block_on(async {
        let w = RedisLog::connect(&url, Retention::default(), 1)
            .await
            .unwrap();
        let r = RedisLog::connect(&url, Retention::default(), 1)
            .await
            .unwrap();
        for i in 0..SESSIONS {
            w.create_session(&id(i), Bytes::new()).await.unwrap();
        }
        (Arc::new(w), Arc::new(r))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let unavailable = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..SESSIONS)
        .map(|i| runtime.spawn(follow(reader.clone(), id(i), stop.clone())))
        .collect();
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..SESSIONS).map(|_| AtomicU64::new(0)).collect());
    let writing = {
        let (w, stop, unavailable, acked) = (
            writer.clone(),
            stop.clone(),
            unavailable.clone(),
            acked.clone(),
        );
        runtime.spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                for i in 0..SESSIONS {
                    match w.append(&id(i), S, vec![msg(n)]).await {
                        Ok(h) => acked[i].fetch_max(h, Ordering::Relaxed),
                        Err(LogError::Unavailable(_)) => {
                            unavailable.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("{}: {e}", id(i)),
                    };
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let before = acked[0].load(Ordering::Relaxed);
    assert!(before > 0, "writing before the kill");
    let killed_at = Instant::now();
    cluster.kill(victim);
    cluster.wait_failover(&format!("{{{}}}", id(0)), victim, Duration::from_secs(30));
    let failover = killed_at.elapsed();
    // The old master comes back as the new master's replica: WAIT 1 holds again.
    cluster.restart(victim);
    cluster.wait_healthy(Duration::from_secs(30));
    let healed = killed_at.elapsed();
    let resumed = acked[0].load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        acked[0].load(Ordering::Relaxed) > resumed,
        "writing again on the promoted master"
    );
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        writing.await.unwrap();
        let mut total_refusals = 0;
        for (i, r) in readers.into_iter().enumerate() {
            let (seen, refusals) = r.await.unwrap();
            total_refusals += refusals;
            let head = writer.bounds(&id(i), S).await.unwrap().head;
            assert!(
                head >= acked[i].load(Ordering::Relaxed),
                "{}: an acknowledged append lost",
                id(i)
            );
            let truth = writer.read(&id(i), S, 0, 1 << 20).await.unwrap();
            assert_eq!(truth.len() as u64, head, "{}: the stream is whole", id(i));
            for (seq, m) in &seen {
                assert_eq!(
                    &truth[*seq as usize - 1].message,
                    m,
                    "{} seq {seq}: different data",
                    id(i)
                );
            }
            assert!(!seen.is_empty(), "{}: read something", id(i));
        }
        eprintln!(
            "failover after {failover:?}, healed after {healed:?}; {} appends refused \
             (Unavailable) meanwhile; readers resumed {total_refusals} times after a refusal",
            unavailable.load(Ordering::Relaxed)
        );
        assert!(
            unavailable.load(Ordering::Relaxed) > 0,
            "the kill was noticed, loudly"
        );
    });
}
