//! What the log benchmarks share: the event they append, the retention that
//! keeps a whole run, and how they report a percentile.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{Log, Retention, StreamKey};

/// A 256-byte JSON-RPC notification.
pub fn payload() -> Bytes {
    let base =
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":""#;
    let pad = 256 - base.len() - 4;
    Bytes::from(format!("{base}{}\"}}}}", "x".repeat(pad)))
}

/// Retains everything a benchmark writes.
pub fn retention() -> Retention {
    let mut retention = Retention::default();
    retention.max_events = 1_000_000;
    retention.max_age = Duration::from_secs(3600);
    retention
}

/// The `p` percentile of `v`, in ms.
pub fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0
}

/// Creates the sessions `ids`, then has each append `per` events to its
/// session stream in batches of `batch`, all at once; returns every append's
/// latency and the events per second over the whole run.
pub async fn timed_appends(
    log: Arc<dyn Log>,
    ids: &[String],
    per: usize,
    batch: usize,
) -> (Vec<Duration>, f64) {
    for id in ids {
        log.create_session(id, Bytes::new()).await.unwrap();
    }
    let start = Instant::now();
    let tasks: Vec<_> = ids
        .iter()
        .cloned()
        .map(|id| {
            let log = log.clone();
            tokio::spawn(async move {
                let p = payload();
                let mut lat = Vec::new();
                let mut n = 0;
                while n < per {
                    let t = Instant::now();
                    log.append(&id, StreamKey::Session, vec![p.clone(); batch])
                        .await
                        .unwrap();
                    lat.push(t.elapsed());
                    n += batch;
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let rate = (ids.len() * per) as f64 / start.elapsed().as_secs_f64();
    (lat, rate)
}
