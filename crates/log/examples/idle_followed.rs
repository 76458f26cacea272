//! What idle followed streams cost Redis (issue 28: "idle costs nothing"):
//! an instance B follows N idle session streams for its readers while
//! instance A writes nothing; the Redis commands per second B causes are
//! counted (`INFO commandstats` on every master, summed) over a window
//! after a warm-up, on one Redis server and on a Redis Cluster of three
//! masters. Then A ends 20 of the sessions and the time until B's readers
//! see the end is measured (pushed, or found by B's own checks).
//!
//! `cargo run --release -p mcp-resume-log --example idle_followed [-- STREAMS WARM_SECS WINDOW_SECS]`
//! (defaults 1000, 40, 60: the warm-up lets an adaptive safety read reach its longest interval).

use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{EventLog, RedisLog, Retention, SessionRecords, StreamKey};
use mcp_resume_testkit::{RedisCluster, RedisServer};

/// One topology: where Redis is, and how to count the commands it ran.
struct Target {
    name: &'static str,
    url: String,
    commands: Box<dyn Fn() -> u64>,
}

async fn measure(t: &Target, streams: usize, warm: Duration, window: Duration) {
    let a = RedisLog::connect(&t.url, Retention::default(), 0)
        .await
        .unwrap();
    let b = RedisLog::connect(&t.url, Retention::default(), 0)
        .await
        .unwrap();
    let ids: Vec<String> = (0..streams).map(|i| format!("idle-{i:06}")).collect();
    for id in &ids {
        a.create_session(id, Bytes::new()).await.unwrap();
    }
    let mut subs = Vec::new();
    for id in &ids {
        subs.push(b.subscribe(id, StreamKey::Session).await.unwrap().1);
    }
    tokio::time::sleep(warm).await;
    let c0 = (t.commands)();
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let rate = ((t.commands)() - c0) as f64 / t0.elapsed().as_secs_f64();
    // The end of a session on A, seen by B's reader.
    let mut ended = Vec::new();
    for (id, mut sub) in ids.iter().zip(subs.drain(..)).take(20) {
        a.end_session(id).await.unwrap();
        let at = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(120), sub.next()).await;
        assert!(
            matches!(r, Ok(Err(_))),
            "{}: the reader of {id} did not end: {r:?}",
            t.name
        );
        ended.push(at.elapsed());
    }
    ended.sort();
    println!(
        "| {} | {streams} | {rate:.1} | {:.3} | {:.0} | {:.0} |",
        t.name,
        rate / streams as f64,
        ended[ended.len() / 2].as_secs_f64() * 1e3,
        ended[ended.len() - 1].as_secs_f64() * 1e3,
    );
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let streams = *args.first().unwrap_or(&1000) as usize;
    let warm = Duration::from_secs(*args.get(1).unwrap_or(&40));
    let window = Duration::from_secs(*args.get(2).unwrap_or(&60));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = std::sync::Arc::new(RedisServer::start());
    let cluster = std::sync::Arc::new(RedisCluster::start(3, 0));
    let targets = [
        Target {
            name: "one server",
            url: server.url.clone(),
            commands: {
                let server = server.clone();
                Box::new(move || server.commands_run())
            },
        },
        Target {
            name: "cluster (3 masters)",
            url: cluster.url.clone(),
            commands: {
                let cluster = cluster.clone();
                Box::new(move || cluster.commands_run())
            },
        },
    ];
    println!("idle followed streams: {warm:?} warm-up, {window:?} window");
    println!();
    println!("| Redis | followed streams | commands/s | per stream | session end seen by the reader, p50 ms | max ms |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    rt.block_on(async {
        for t in &targets {
            measure(t, streams, warm, window).await;
        }
    });
}
