//! What the log benchmarks share: the event they append, the retention that
//! keeps a whole run, and how they report a percentile.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::Retention;

/// A 256-byte JSON-RPC notification.
pub fn payload() -> Bytes {
    let base =
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":""#;
    let pad = 256 - base.len() - 4;
    Bytes::from(format!("{base}{}\"}}}}", "x".repeat(pad)))
}

/// Retains everything a benchmark writes.
pub fn retention() -> Retention {
    Retention {
        max_events: 1_000_000,
        max_age: Duration::from_secs(3600),
    }
}

/// The `p` percentile of `v`, in ms.
pub fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0
}
