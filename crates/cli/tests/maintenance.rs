//! Maintenance divided among instances: three `serve` on one Redis share
//! the 64 session buckets, each bucket leased to exactly one live instance
//! (the lease hash in Redis and each instance's own
//! `mcp_resume_maintenance_buckets` agree), idle sessions are ended once
//! whoever made them, and the buckets of an instance killed with `kill -9`
//! are taken over within its lease (the 10 s heartbeat) and one pass.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{rt, RedisServer, Serve};
use mcp_resume_client::McpClient;

/// The heartbeat TTL: how long a killed instance's leases outlive it.
const LEASE: Duration = Duration::from_secs(10);

/// A sample of one instance's scrape.
async fn metric(url: &str, name: &str) -> u64 {
    let base = url.trim_end_matches("/mcp");
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{name} in {text}"))
        .trim()
        .parse::<f64>()
        .unwrap() as u64
}

/// How many buckets each instance holds in the lease hash `mcpr:maint`.
fn holders(redis: &RedisServer) -> BTreeMap<String, u64> {
    let out = redis.cli(&["HGETALL", "mcpr:maint"]);
    let lines: Vec<&str> = out.lines().collect();
    let mut held = BTreeMap::new();
    for pair in lines.chunks(2) {
        if let [_, holder] = pair {
            *held.entry(holder.to_string()).or_default() += 1;
        }
    }
    held
}

/// Waits until every bucket is held once, by exactly `live.len()` instances
/// whose own gauges say the same counts; how long it took.
async fn settled(redis: &RedisServer, live: &[&Serve], within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let mut gauges = Vec::new();
        for s in live {
            gauges.push(metric(&s.url, "mcp_resume_maintenance_buckets").await);
        }
        let held = holders(redis);
        let mut counts: Vec<u64> = held.values().copied().collect();
        counts.sort();
        gauges.sort();
        if counts.iter().sum::<u64>() == 64 && counts.len() == live.len() && counts == gauges {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "buckets not divided among {} instances after {within:?}: lease holders {held:?}, gauges {gauges:?}",
            live.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn three_instances_maintain_each_bucket_once_and_take_over_a_killed_ones_buckets() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Sessions idle 2 s end; maintenance passes every second.
    let args = ["--store", redis.url.as_str(), "--session-ttl-secs", "2"];
    let mut a = Serve::spawn(dir.path(), "127.0.0.1:0", &args);
    let b = Serve::spawn(dir.path(), "127.0.0.1:0", &args);
    let c = Serve::spawn(dir.path(), "127.0.0.1:0", &args);
    rt().block_on(async {
        settled(&redis, &[&a, &b, &c], Duration::from_secs(20)).await;
        for s in [&a, &b, &c] {
            let mine = metric(&s.url, "mcp_resume_maintenance_buckets").await;
            assert!((20..=22).contains(&mine), "an uneven share: {mine} of 64");
        }

        // Idle sessions made on every instance are ended once each, by the
        // instance that holds their bucket (not by all three).
        let made = 30;
        for i in 0..made {
            let url = &[&a, &b, &c][i % 3].url;
            McpClient::new(url).initialize().await.unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut expired = 0;
            for s in [&a, &b, &c] {
                expired += metric(&s.url, "mcp_resume_sessions_expired_total").await;
            }
            assert!(expired <= made as u64, "{expired} expiries of {made} sessions");
            // Each instance's own inbox (forwarded messages) is a session too.
            let listed: Vec<String> = redis
                .cli(&["SMEMBERS", "mcpr:sessions"])
                .lines()
                .filter(|id| !id.starts_with("inbox."))
                .map(str::to_owned)
                .collect();
            if expired == made as u64 && listed.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{expired} of {made} idle sessions ended, {listed:?} still listed live"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        a.kill9();
        let took = settled(&redis, &[&b, &c], LEASE + Duration::from_secs(10)).await;
        eprintln!("a killed instance's buckets taken over {took:?} after the kill");
        assert!(
            took <= LEASE + Duration::from_secs(3),
            "the killed instance's buckets were taken over after {took:?}, more than its lease and a pass"
        );
        assert_eq!(
            redis.cli(&["SCARD", "mcpr:instances"]).trim(),
            "2",
            "the dead instance is unregistered"
        );
    });
}
