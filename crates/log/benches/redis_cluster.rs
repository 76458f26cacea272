//! The Redis Cluster backend's building blocks (issue 17, docs/capacity.md),
//! on a cluster of the benchmark's own (three masters, no replicas, loopback):
//!
//! - appends/s on one master and on three, in the same run and with the
//!   same client: the "one master" rows use sessions whose slots all live on
//!   one master, the "three masters" rows sessions spread over all of them;
//! - memory per idle session and per event on the masters (`used_memory`
//!   before and after);
//! - what the polling tail costs: commands/s the masters serve for idle
//!   followed streams, and delivery latency to a subscriber on another instance.
//!
//! `cargo bench -p mcp-resume-log --bench redis_cluster` (prints a table).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{RedisLog, StreamKey};
use mcp_resume_testkit::RedisCluster;

mod common;

use common::{payload, pct, retention, timed_appends};
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};

const S: StreamKey = StreamKey::Session;

/// `n` session ids (prefixed `tag`), with the port of the master serving each.
fn ids(cluster: &RedisCluster, tag: &str, n: usize) -> Vec<(String, u16)> {
    (0..n)
        .map(|i| {
            let id = format!("{tag}{i}");
            let port = cluster.master_of(&format!("{{{id}}}"));
            (id, port)
        })
        .collect()
}

/// Appends from `writers` sessions, each `per` events in batches of `batch`; events/s.
async fn append_rate(log: &Arc<RedisLog>, ids: &[String], per: usize, batch: usize) -> (f64, f64) {
    let (mut lat, rate) = timed_appends(log.clone(), ids, per, batch).await;
    (rate, pct(&mut lat, 0.5))
}

fn used_memory(cluster: &RedisCluster) -> i64 {
    cluster
        .masters()
        .into_iter()
        .map(|p| {
            cluster
                .cli(p, &["INFO", "memory"])
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn commands(cluster: &RedisCluster) -> i64 {
    cluster
        .masters()
        .into_iter()
        .map(|p| {
            cluster
                .cli(p, &["INFO", "stats"])
                .lines()
                .find_map(|l| l.strip_prefix("total_commands_processed:"))
                .and_then(|v| v.trim().parse::<i64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

fn main() {
    let cluster = RedisCluster::start(3, 0);
    let rt = mcp_resume_testkit::rt();
    rt.block_on(async {
        let log = Arc::new(
            RedisLog::connect(&cluster.url, retention(), 0)
                .await
                .unwrap(),
        );
        println!("appends/s, 256-byte events, one client instance, masters with no replicas");
        println!("| masters | writers | batch | events/s | p50 ms/append |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for (round, (writers, batch, per)) in [(64, 1, 2000), (64, 16, 8000)].into_iter().enumerate() {
            for pass in 0..2 {
                // Alternating, so both see the same machine.
                let round = round * 2 + pass;
                let all = ids(&cluster, &format!("r{round}t"), writers);
                let three: Vec<String> = all.iter().map(|(i, _)| i.clone()).collect();
                let first = all[0].1;
                let mut one = Vec::new();
                let mut k = 0;
                while one.len() < writers {
                    let id = format!("r{round}o{k}");
                    k += 1;
                    if cluster.master_of(&format!("{{{id}}}")) == first {
                        one.push(id);
                    }
                }
                let (r1, l1) = append_rate(&log, &one, per, batch).await;
                println!("| 1 | {writers} | {batch} | {r1:.0} | {l1:.3} |");
                let (r3, l3) = append_rate(&log, &three, per, batch).await;
                println!("| 3 | {writers} | {batch} | {r3:.0} | {l3:.3} |");
            }
        }

        // Memory: idle sessions, then events.
        let n = 20_000;
        let before = used_memory(&cluster);
        for i in 0..n {
            log.create_session(&format!("idle{i}"), Bytes::new()).await.unwrap();
        }
        let per_session = (used_memory(&cluster) - before) as f64 / n as f64;
        // Maintenance walks every live session (idle expiry, age retention).
        let long = Duration::from_secs(3600);
        let t = Instant::now();
        log.maintain(long, long).await.unwrap();
        let maintain_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        let events = 200_000;
        let sessions: Vec<String> = (0..100).map(|i| format!("idle{i}")).collect();
        let before = used_memory(&cluster);
        let p = payload();
        for chunk in 0..events / (100 * 20) {
            let _ = chunk;
            let tasks: Vec<_> = sessions
                .iter()
                .map(|id| {
                    let (log, id, p) = (log.clone(), id.clone(), p.clone());
                    tokio::spawn(async move { log.append(&id, S, vec![p; 20]).await.unwrap() })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }
        let per_event = (used_memory(&cluster) - before) as f64 / events as f64;
        println!();
        println!("memory on the masters (used_memory deltas)");
        println!("| what | bytes |");
        println!("| --- | ---: |");
        println!("| per idle session ({n} sessions: session hash, stream-0 hash, live-set entry) | {per_session:.0} |");
        println!("| per event (256-byte message, {events} events in 100 streams) | {per_event:.0} |");
        println!();
        println!(
            "maintenance (one pass, {n} idle sessions, one instance): {maintain_us:.1} us per session"
        );

        // The polling tail: idle followed streams, then delivery latency.
        let reader = Arc::new(
            RedisLog::connect(&cluster.url, retention(), 0)
                .await
                .unwrap(),
        );
        println!();
        println!("the polling tail on another instance: idle followed streams");
        println!("| followed streams | master commands/s while idle | per stream |");
        println!("| ---: | ---: | ---: |");
        let mut subs = Vec::new();
        for want in [100usize, 1000, 5000] {
            while subs.len() < want {
                let id = format!("idle{}", subs.len());
                subs.push(reader.subscribe(&id, S).await.unwrap().1);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let c0 = commands(&cluster);
            let t = Instant::now();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let rate = (commands(&cluster) - c0) as f64 / t.elapsed().as_secs_f64();
            println!("| {want} | {rate:.0} | {:.1} |", rate / want as f64);
        }
        // Delivery latency with 5000 followed, 100 of them written.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut sent: HashMap<u64, Instant> = HashMap::new();
        let mut followed = Vec::new();
        for s in subs.drain(..100) {
            followed.push(s);
        }
        for (i, mut s) in followed.into_iter().enumerate() {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Ok(ev) = s.next().await {
                    let _ = tx.send((i, ev.seq, Instant::now()));
                }
            });
        }
        let mut lat = Vec::new();
        for k in 0..2000u64 {
            let i = (k % 100) as usize;
            let t = Instant::now();
            let h = log.append(&format!("idle{i}"), S, vec![p.clone()]).await.unwrap();
            sent.insert(i as u64 * 1_000_000 + h, t);
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        while lat.len() < 2000 {
            match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
                Ok(Some((i, seq, at))) => {
                    if let Some(t) = sent.get(&(i as u64 * 1_000_000 + seq)) {
                        lat.push(at - *t);
                    }
                }
                _ => break,
            }
        }
        println!();
        println!(
            "delivery, append on instance A -> subscriber on instance B, 5000 streams followed, 100 written: \
             {} events, p50 {:.2} ms, p99 {:.2} ms",
            lat.len(),
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99)
        );
        drop(subs);
    });
}
