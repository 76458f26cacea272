//! Backends under test, built the same way for every contract test.

#![allow(dead_code)]

use std::sync::Arc;

use mcp_resume_log::{DiskLog, Log, MemoryLog, Retention};

/// A backend plus whatever it needs to be reopened.
pub struct Backend {
    pub name: &'static str,
    pub log: Option<Arc<dyn Log>>,
    dir: Option<tempfile::TempDir>,
    retention: Retention,
    capacity: usize,
}

impl Backend {
    pub fn log(&self) -> &Arc<dyn Log> {
        self.log.as_ref().expect("open")
    }

    /// Whether state survives [`Backend::restart`].
    pub fn durable(&self) -> bool {
        self.dir.is_some()
    }

    /// Drops the log and opens it again from its files (durable backends only).
    pub fn restart(&mut self) {
        let Some(dir) = &self.dir else { return };
        drop(self.log.take());
        let log = DiskLog::open_with(dir.path().join("log"), self.retention, self.capacity)
            .expect("reopen");
        self.log = Some(Arc::new(log));
    }
}

/// Every backend, with the given retention and subscriber capacity.
pub fn backends(retention: Retention, capacity: usize) -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = DiskLog::open_with(dir.path().join("log"), retention, capacity).expect("open disk");
    vec![
        Backend {
            name: "memory",
            log: Some(Arc::new(MemoryLog::with_subscriber_capacity(
                retention, capacity,
            ))),
            dir: None,
            retention,
            capacity,
        },
        Backend {
            name: "disk",
            log: Some(Arc::new(disk)),
            dir: Some(dir),
            retention,
            capacity,
        },
    ]
}

pub fn msg(i: u64) -> bytes::Bytes {
    bytes::Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"i":{i}}}}}"#
    ))
}
