//! Opens the log a `--store` argument names, as `mcp-resume serve` does;
//! shared by this crate's examples.

use std::path::PathBuf;
use std::sync::Arc;

use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};

/// `memory`, `disk:DIR` or `redis://HOST:PORT/DB`, with `replicas` Redis
/// replicas acknowledging each append.
pub async fn open_log(store: &str, replicas: usize) -> Result<Arc<dyn Log>, String> {
    let retention = Retention::default();
    if store == "memory" {
        return Ok(Arc::new(MemoryLog::new(retention)));
    }
    if store.starts_with("redis://") {
        let log = RedisLog::connect(store, retention, replicas)
            .await
            .map_err(|e| format!("connecting to {store}: {e}"))?;
        return Ok(Arc::new(log));
    }
    match store.strip_prefix("disk:") {
        Some(p) if !p.is_empty() => DiskLog::open(PathBuf::from(p), retention)
            .map(|l| Arc::new(l) as Arc<dyn Log>)
            .map_err(|e| format!("opening the log at {p}: {e}")),
        _ => Err(format!(
            "--store {store:?}: expected memory, disk:DIR or redis://HOST:PORT/DB"
        )),
    }
}
