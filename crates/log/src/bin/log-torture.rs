//! A writer for the kill test: appends to a disk log from several tasks and
//! prints every append that committed (`ACK`) and every event a subscriber
//! saw (`SEEN`), so a test can `kill -9` it at any moment and check the log
//! against what any reader could have observed.
//!
//! Usage: `log-torture PATH SEED`. Each message carries a random `x` and a
//! check value `h` derived from it, so a torn record cannot pass for a whole one.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use mcp_resume_log::{DiskLog, Log, LogError, Retention, StreamKey};

/// The check value every message carries (FNV-1a of `x`).
pub fn check(x: u64) -> u64 {
    x.to_le_bytes().iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100000001b3)
    })
}

fn next(state: &mut u64) -> u64 {
    // xorshift64*
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545F4914F6CDD1D)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: log-torture PATH SEED");
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1) | 1;
    let mut retention = Retention::default();
    retention.max_events = u64::MAX / 2;
    let log: Arc<dyn Log> = Arc::new(DiskLog::open(&path, retention).expect("open"));
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for w in 0..4u64 {
        let (log, out) = (log.clone(), out.clone());
        let id = format!("s{w}");
        match log.create_session(&id, Bytes::new()).await {
            Ok(()) | Err(LogError::SessionExists(_)) => {}
            Err(e) => panic!("{e}"),
        }
        // A subscriber: whatever it sees must survive the kill.
        let (_, mut sub) = log
            .subscribe(&id, StreamKey::Session)
            .await
            .expect("subscribe");
        let (sid, sout) = (id.clone(), out.clone());
        tokio::spawn(async move {
            while let Ok(ev) = sub.next().await {
                let line = format!(
                    "SEEN {sid} {} {}\n",
                    ev.seq,
                    String::from_utf8_lossy(&ev.message)
                );
                let _ = sout.lock().unwrap().write_all(line.as_bytes());
            }
        });
        let mut rng = seed.wrapping_mul(w + 7);
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next(&mut rng) % 16 + 1;
                let xs: Vec<u64> = (0..n).map(|_| next(&mut rng) >> 1).collect();
                let msgs = xs
                    .iter()
                    .map(|x| Bytes::from(format!(r#"{{"x":{x},"h":{}}}"#, check(*x))))
                    .collect();
                let last = log
                    .append(&id, StreamKey::Session, msgs)
                    .await
                    .expect("append");
                let xs: Vec<String> = xs.iter().map(|x| x.to_string()).collect();
                let line = format!("ACK {id} {last} {}\n", xs.join(","));
                let _ = out.lock().unwrap().write_all(line.as_bytes());
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}
