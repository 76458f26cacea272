//! The Redis backend's numbers (issue 7), against a `redis-server` of the
//! benchmark's own on a free loopback port:
//!
//! - append throughput: N writers, each appending batches of B events; all
//!   of an instance's appends are pipelined on its one multiplexed
//!   connection, and each batch is one Lua call;
//! - delivery latency across two instances: two independent `RedisLog`s
//!   (each with its own connections and its own shared tail, exactly what two
//!   `serve` processes have), events appended on A, read by subscribers on B.
//!
//! `cargo bench -p mcp-resume-log --bench redis` (prints a table; no criterion:
//! the rows are load shapes, not micro-benchmarks).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mcp_resume_log::{Log, RedisLog, StreamKey};

mod common;

use common::{pct, retention, timed_appends};
use mcp_resume_log::{EventLog, Maintenance, SessionRecords};

const S: StreamKey = StreamKey::Session;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// `writers` sessions, each appending `per` events in batches of `batch`.
async fn append_row(url: &str, round: usize, writers: usize, per: usize, batch: usize) {
    let log: Arc<dyn Log> = Arc::new(RedisLog::connect(url, retention(), 0).await.unwrap());
    let ids: Vec<String> = (0..writers).map(|s| format!("a{round}w{s}")).collect();
    let (mut lat, rate) = timed_appends(log, &ids, per, batch).await;
    println!(
        "| {writers:>7} | {batch:>5} | {:>12.0} | {:>9.3} | {:>9.3} |",
        rate,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99)
    );
}

/// Appends on instance A to `streams` sessions, each followed by a
/// subscriber on instance B; `rate` events/s in total, `n` events.
async fn delivery_row(url: &str, round: usize, streams: usize, rate: u64, n: usize) {
    let a = Arc::new(RedisLog::connect(url, retention(), 0).await.unwrap());
    let b = Arc::new(RedisLog::connect(url, retention(), 0).await.unwrap());
    let ids: Vec<String> = (0..streams).map(|s| format!("d{round}s{s}")).collect();
    for id in &ids {
        a.create_session(id, Bytes::new()).await.unwrap();
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for id in &ids {
        let (_, mut sub) = b.subscribe(id, S).await.unwrap();
        let tx = tx.clone();
        tokio::spawn(async move {
            while let Ok(ev) = sub.next().await {
                let sent: u128 = std::str::from_utf8(&ev.message).unwrap().parse().unwrap();
                let _ = tx.send(Duration::from_nanos((now_ns() - sent) as u64));
            }
        });
    }
    drop(tx);
    let gap = Duration::from_nanos(1_000_000_000 / rate);
    let mut next = Instant::now();
    // Paced, not waiting for each append: appends of different sessions are
    // in flight together, as under a server's load.
    for i in 0..n {
        let (a, id) = (a.clone(), ids[i % streams].clone());
        tokio::spawn(async move {
            a.append(&id, S, vec![Bytes::from(now_ns().to_string())])
                .await
                .unwrap();
        });
        next += gap;
        tokio::time::sleep_until(next.into()).await;
    }
    let mut lat = Vec::with_capacity(n);
    while lat.len() < n {
        match tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
            Ok(Some(d)) => lat.push(d),
            _ => panic!("only {} of {n} events arrived on B", lat.len()),
        }
    }
    println!(
        "| {streams:>7} | {rate:>6} | {n:>6} | {:>8.3} | {:>8.3} | {:>8.3} |",
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        pct(&mut lat, 1.0)
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

fn main() {
    // `cargo bench` passes `--bench`; a word after `--` picks one part:
    // `append` or `delivery`.
    let only: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let run = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let rt = mcp_resume_testkit::rt();
    let redis = mcp_resume_testkit::RedisServer::start();
    let url = redis.url.clone();
    rt.block_on(async {
        let mut round = 0;
        if run("append") {
        println!("\nappend throughput, one Redis, 256-byte events, one instance's multiplexed connection");
        println!("| writers | batch |     events/s | p50 ms/append | p99 ms/append |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for (writers, per, batch) in [
            (1usize, 20_000usize, 1usize),
            (64, 500, 1),
            (1024, 50, 1),
            (1, 100_000, 64),
            (64, 3_200, 16),
            (64, 6_400, 64),
            (256, 1_600, 32),
            (1024, 400, 16),
        ] {
            round += 1;
            append_row(&url, round, writers, per, batch).await;
        }
        }
        if run("delivery") {
        println!("\ndelivery latency, append on instance A -> subscriber on instance B (ms)");
        println!("| streams | events/s | events |   p50 |   p99 |   max |");
        println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
        for (streams, rate, n) in [
            (1usize, 1_000u64, 5_000usize),
            (64, 5_000, 20_000),
            (1024, 5_000, 20_000),
            (1024, 20_000, 40_000),
        ] {
            round += 1;
            delivery_row(&url, round, streams, rate, n).await;
        }
        }
    });
}
