//! `cross`: how long from a `tools/call` on one instance to the event on a
//! reader of another, over real HTTP between real `serve` processes on one
//! Redis; beside the same probe within one instance on Redis and on the
//! default disk log.
//!
//! A probe: `emit {count: 1}` POSTed to the writer instance, timed until its
//! notification arrives on an SSE stream open on the reader instance. It
//! includes the POST, the append (commit), the tail and the SSE write.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_resume_client::sse::SseParser;
use serde_json::json;

use crate::workloads::Session;

/// `probes` probes on each of `sessions` sessions at once: created on
/// `writer`, read on `reader`. Returns every probe's latency in ms.
pub async fn probe(writer: &str, reader: &str, sessions: usize, probes: usize) -> Vec<f64> {
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let w = crate::workloads::session(writer).await;
        let r = Session {
            http: reqwest::Client::new(),
            url: reader.to_owned(),
            id: w.id.clone(),
        };
        tasks.push(tokio::spawn(async move {
            let resp = r.get(Some("0")).await;
            assert!(resp.status().is_success(), "reader GET: {}", resp.status());
            let mut body = resp.bytes_stream();
            let mut parser = SseParser::new();
            let mut lat = Vec::with_capacity(probes);
            for k in 1..=probes as u64 {
                let t = Instant::now();
                w.call(k, "emit", json!({"count": 1})).await;
                'wait: loop {
                    let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
                        .await
                        .expect("the event arrives")
                        .expect("stream open")
                        .unwrap();
                    for ev in parser.feed(&chunk) {
                        if ev.id.as_deref() == Some(&k.to_string()) {
                            break 'wait;
                        }
                    }
                }
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}
