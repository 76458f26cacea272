//! Log benchmarks (issue 2): append throughput at 1 / 64 / 1024 concurrent
//! sessions on memory and disk, replay of 100,000 events from disk, commit
//! latency percentiles and append-to-subscriber latency.
//!
//! `cargo bench -p mcp-resume-log --bench log` (criterion for throughput; the
//! latency percentiles are printed after it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput};
use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, StreamKey};

mod common;

use common::{payload, pct, retention};
use mcp_resume_testkit::rt;

const S: StreamKey = StreamKey::Session;

struct Fixture {
    log: Arc<dyn Log>,
    _dir: Option<tempfile::TempDir>,
    _redis: Option<mcp_resume_testkit::RedisServer>,
}

fn open(backend: &str, rt: &tokio::runtime::Runtime) -> Fixture {
    match backend {
        "memory" => Fixture {
            log: Arc::new(MemoryLog::new(retention())),
            _dir: None,
            _redis: None,
        },
        "redis" => {
            let redis = mcp_resume_testkit::RedisServer::start();
            let url = redis.url.clone();
            // Connected on the runtime that will use it: the connection's driver task lives there.
            let log = rt
                .block_on(RedisLog::connect(&url, retention(), 0))
                .unwrap();
            Fixture {
                log: Arc::new(log),
                _dir: None,
                _redis: Some(redis),
            }
        }
        _ => {
            let dir = tempfile::tempdir().unwrap();
            let log = DiskLog::open(dir.path().join("log"), retention()).unwrap();
            Fixture {
                log: Arc::new(log),
                _dir: Some(dir),
                _redis: None,
            }
        }
    }
}

/// `sessions` writers, each appending `per_session` events in batches of `batch`.
/// Returns the time of the append phase alone (sessions are created first) and every append's latency.
async fn append_load(
    log: &Arc<dyn Log>,
    round: u64,
    sessions: usize,
    per_session: usize,
    batch: usize,
) -> (Duration, Vec<Duration>) {
    let ids: Vec<String> = (0..sessions).map(|s| format!("r{round}s{s}")).collect();
    let mut creates = Vec::new();
    for id in &ids {
        let (log, id) = (log.clone(), id.clone());
        creates.push(tokio::spawn(async move {
            log.create_session(&id, Bytes::new()).await.unwrap()
        }));
    }
    for c in creates {
        c.await.unwrap();
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for id in ids {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let p = payload();
            let mut lat = Vec::with_capacity(per_session / batch);
            let mut n = 0;
            while n < per_session {
                let t = Instant::now();
                log.append(&id, S, vec![p.clone(); batch]).await.unwrap();
                lat.push(t.elapsed());
                n += batch;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (start.elapsed(), all)
}

fn bench_append(c: &mut Criterion) {
    let rt = rt();
    let mut g = c.benchmark_group("append");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(1));
    for backend in ["memory", "disk"] {
        // (sessions, events per session, batch per append)
        for (sessions, per, batch) in [
            (1usize, 20_000usize, 1usize),
            (1, 20_000, 64),
            (64, 320, 1),
            (1024, 20, 1),
        ] {
            if backend == "disk" && sessions == 1 && batch == 1 {
                continue; // one fsync per event: see the latency report instead
            }
            let total = sessions * per;
            g.throughput(Throughput::Elements(total as u64));
            let f = open(backend, &rt);
            let mut round = 0u64;
            g.bench_with_input(
                BenchmarkId::new(backend, format!("{sessions}x{per}/batch{batch}")),
                &(),
                |b, _| {
                    b.iter_custom(|iters| {
                        let mut total_time = Duration::ZERO;
                        for _ in 0..iters {
                            round += 1;
                            total_time += rt
                                .block_on(append_load(&f.log, round, sessions, per, batch))
                                .0;
                        }
                        total_time
                    })
                },
            );
        }
    }
    g.finish();
}

fn bench_replay(c: &mut Criterion) {
    let rt = rt();
    let f = open("disk", &rt);
    rt.block_on(async {
        f.log.create_session("replay", Bytes::new()).await.unwrap();
        for _ in 0..100 {
            f.log
                .append("replay", S, vec![payload(); 1000])
                .await
                .unwrap();
        }
    });
    let mut g = c.benchmark_group("replay");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("disk/100k-after-cursor-0", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut after = 0;
                while after < 100_000 {
                    let evs = f.log.read("replay", S, after, 512).await.unwrap();
                    after = evs.last().unwrap().seq;
                }
            })
        })
    });
    g.finish();
}

/// Commit latency per append under load, and append-to-subscriber latency.
fn latency_report() {
    let rt = rt();
    println!("\n== latency (ms) ==");
    for backend in ["memory", "disk", "redis"] {
        for sessions in [1usize, 64, 1024] {
            let f = open(backend, &rt);
            let per = if backend == "disk" && sessions == 1 {
                300
            } else {
                (20_000 / sessions).max(20)
            };
            let (elapsed, mut lat) = rt.block_on(append_load(&f.log, 0, sessions, per, 1));
            let rate = (sessions * per) as f64 / elapsed.as_secs_f64();
            println!(
                "commit {backend:6} {sessions:4} sessions x1: p50 {:.3}  p99 {:.3}  ({rate:.0} events/s)",
                pct(&mut lat, 0.5),
                pct(&mut lat, 0.99)
            );
        }
        // Append-to-subscriber: one writer, one subscriber, paced appends.
        let f = open(backend, &rt);
        let mut lat = rt.block_on(async {
            f.log.create_session("sub", Bytes::new()).await.unwrap();
            let (_, mut sub) = f.log.subscribe("sub", S).await.unwrap();
            let reader = tokio::spawn(async move {
                let mut lat = Vec::new();
                for _ in 0..500 {
                    let ev = sub.next().await.unwrap();
                    let sent: u128 = std::str::from_utf8(&ev.message).unwrap().parse().unwrap();
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_nanos();
                    lat.push(Duration::from_nanos((now - sent) as u64));
                }
                lat
            });
            for _ in 0..500 {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                f.log
                    .append("sub", S, vec![Bytes::from(now.to_string())])
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            reader.await.unwrap()
        });
        println!(
            "append-to-subscriber {backend:6}: p50 {:.3}  p99 {:.3}",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99)
        );
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_append(&mut c);
    bench_replay(&mut c);
    c.final_summary();
    latency_report();
}
