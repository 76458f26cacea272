//! What the tests of this crate share: the three log backends (Redis on a
//! `redis-server` of the test's own) and the `rmcp_durable` example binary.

#![allow(dead_code)]

pub mod mcp_http;
pub mod proc;

use std::path::PathBuf;
use std::sync::Arc;

use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};
#[allow(unused_imports)]
pub use mcp_resume_testkit::{rt, RedisServer};

/// One backend, reopenable when it is durable.
pub struct Backend {
    pub name: &'static str,
    pub log: Arc<dyn Log>,
    retention: Retention,
    capacity: usize,
    dir: Option<tempfile::TempDir>,
    pub redis: Option<RedisServer>,
}

impl Backend {
    /// Whether what was committed survives [`Backend::reopen`].
    pub fn durable(&self) -> bool {
        self.dir.is_some() || self.redis.is_some()
    }

    /// Another instance's handle where the backend has one (a second Redis
    /// connection), else the same handle (disk files belong to one process).
    pub async fn other_handle(&self) -> Arc<dyn Log> {
        match &self.redis {
            Some(r) => Arc::new(
                RedisLog::connect_with(&r.url, self.retention, 0, self.capacity)
                    .await
                    .expect("reconnect"),
            ),
            None => self.log.clone(),
        }
    }

    /// What a restarted process sees: a fresh Redis connection, or the disk
    /// files reopened (every other clone of the handle must be dropped first).
    pub async fn reopen(&mut self) -> Arc<dyn Log> {
        if let Some(r) = &self.redis {
            return Arc::new(
                RedisLog::connect_with(&r.url, self.retention, 0, self.capacity)
                    .await
                    .expect("reconnect"),
            );
        }
        if let Some(dir) = &self.dir {
            let _ = self.log.close().await;
            // The old handle must release the files before they open again.
            let old = std::mem::replace(
                &mut self.log,
                Arc::new(MemoryLog::new(self.retention)) as Arc<dyn Log>,
            );
            assert_eq!(
                Arc::strong_count(&old),
                1,
                "drop the stores before reopening"
            );
            drop(old);
            let log: Arc<dyn Log> = Arc::new(
                DiskLog::open_with(dir.path().join("log"), self.retention, self.capacity)
                    .expect("reopen"),
            );
            self.log = log.clone();
            return log;
        }
        self.log.clone()
    }
}

/// Memory, disk and Redis, with this retention and subscriber capacity.
pub async fn backends(retention: Retention, capacity: usize) -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk: Arc<dyn Log> = Arc::new(
        DiskLog::open_with(dir.path().join("log"), retention, capacity).expect("open disk"),
    );
    let server = RedisServer::start();
    let redis: Arc<dyn Log> = Arc::new(
        RedisLog::connect_with(&server.url, retention, 0, capacity)
            .await
            .expect("connect redis"),
    );
    vec![
        Backend {
            name: "memory",
            log: Arc::new(MemoryLog::with_subscriber_capacity(retention, capacity)),
            retention,
            capacity,
            dir: None,
            redis: None,
        },
        Backend {
            name: "disk",
            log: disk,
            retention,
            capacity,
            dir: Some(dir),
            redis: None,
        },
        Backend {
            name: "redis",
            log: redis,
            retention,
            capacity,
            dir: None,
            redis: Some(server),
        },
    ]
}

/// The `rmcp_durable` example next to this test binary.
pub fn example_binary() -> PathBuf {
    example("rmcp_durable")
}

/// The example `name` next to this test binary (cargo builds the examples
/// of the package before its tests).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} is missing: build it with cargo test -p mcp-resume-rmcp (examples are built with the tests)",
        bin.display()
    );
    bin
}
