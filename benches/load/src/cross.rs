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

/// A redis-server of the benchmark's own on a free port, killed on drop.
pub struct Redis {
    child: std::process::Child,
    pub url: String,
}

impl Redis {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test installs it)");
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(50));
        Self {
            child,
            url: format!("redis://127.0.0.1:{port}/0"),
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
