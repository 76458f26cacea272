//! A session's slot moves to another master (the `CLUSTER SETSLOT` /
//! `MIGRATE` steps of a resharding, one key at a time) while it is written
//! on one instance and followed on another: commands follow `ASK` and then
//! `MOVED`, an append that meets the slot half-moved (`TRYAGAIN`) fails
//! loudly and is retried, and the reader gets every event once, in order.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{LogError, RedisLog, Retention, StreamKey};
use mcp_resume_testkit::{rt, RedisCluster};

use crate::common::msg;
use mcp_resume_log::{EventLog, SessionRecords};

const S: StreamKey = StreamKey::Session;
const ID: &str = "moving";

#[test]
fn a_slot_moved_mid_stream_loses_nothing() {
    let cluster = RedisCluster::start(3, 0);
    let key = format!("{{{ID}}}");
    let from = cluster.master_of(&key);
    let to = *cluster.masters().iter().find(|&&p| p != from).unwrap();
    let id_of = |p: u16| cluster.cli(p, &["CLUSTER", "MYID"]).trim().to_owned();
    let (from_id, to_id) = (id_of(from), id_of(to));
    let slot = cluster
        .cli(from, &["CLUSTER", "KEYSLOT", &key])
        .trim()
        .to_owned();
    let runtime = rt();
    let (writer, reader) = runtime.block_on(async {
        let w = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        let r = RedisLog::connect(&cluster.url, Retention::default(), 0)
            .await
            .unwrap();
        w.create_session(ID, Bytes::new()).await.unwrap();
        (Arc::new(w), Arc::new(r))
    });
    let stop = Arc::new(AtomicBool::new(false));
    let (acked, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writing = {
        let (w, stop, acked, refused) =
            (writer.clone(), stop.clone(), acked.clone(), refused.clone());
        runtime.spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                match w.append(ID, S, vec![msg(n)]).await {
                    Ok(h) => {
                        acked.store(h, Ordering::Relaxed);
                    }
                    Err(LogError::Unavailable(_)) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let reading = {
        let (r, stop) = (reader.clone(), stop.clone());
        runtime.spawn(async move {
            let mut seen = 0u64;
            let mut resumed = 0;
            while !stop.load(Ordering::Relaxed) {
                let Ok((b, mut sub)) = r.subscribe(ID, S).await else {
                    resumed += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                // Catch up from the cursor with reads, then follow.
                while seen < b.head {
                    match r.read(ID, S, seen, 512).await {
                        Ok(evs) => {
                            for e in evs {
                                assert_eq!(e.seq, seen + 1, "a gap in a read");
                                seen = e.seq;
                            }
                        }
                        Err(_) => break,
                    }
                }
                while let Ok(Ok(e)) =
                    tokio::time::timeout(Duration::from_millis(300), sub.next()).await
                {
                    if e.seq <= seen {
                        continue;
                    }
                    assert_eq!(e.seq, seen + 1, "a gap in the tail");
                    seen = e.seq;
                }
                resumed += 1;
            }
            (seen, resumed)
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = acked.load(Ordering::Relaxed);
    assert!(before > 0);
    cluster.cli(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    cluster.cli(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let mut moved = 0;
    loop {
        let keys = cluster.cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "1"]);
        let Some(k) = keys.lines().next().filter(|k| !k.is_empty()) else {
            break;
        };
        let port = to.to_string();
        let out = cluster.cli(from, &["MIGRATE", "127.0.0.1", &port, k, "0", "5000"]);
        assert!(out.contains("OK"), "MIGRATE {k}: {out}");
        moved += 1;
        // The slot stays half-moved for a while, under load.
        std::thread::sleep(Duration::from_millis(200));
    }
    for p in cluster.masters() {
        cluster.cli(p, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
    assert!(moved >= 3, "the session's keys moved: {moved}");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(cluster.master_of(&key), to);
    let after = acked.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        acked.load(Ordering::Relaxed) > after,
        "written on the new master"
    );
    stop.store(true, Ordering::Relaxed);
    runtime.block_on(async {
        writing.await.unwrap();
        let (seen, resumed) = reading.await.unwrap();
        let head = writer.bounds(ID, S).await.unwrap().head;
        assert!(head >= acked.load(Ordering::Relaxed));
        let all = writer.read(ID, S, 0, 1 << 20).await.unwrap();
        assert_eq!(all.len() as u64, head, "the stream is whole");
        assert!(seen + 50 >= head, "the reader kept up: {seen} of {head}");
        eprintln!(
            "moved {moved} keys of slot {slot} from {from} to {to}; head {head}, \
             {} appends refused meanwhile, the reader re-subscribed {resumed} times",
            refused.load(Ordering::Relaxed)
        );
    });
}
