//! Backends under test, built the same way for every contract test.

#![allow(dead_code)]

use std::sync::{Arc, Weak};

use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};

pub use mcp_resume_testkit::{RedisCluster, RedisServer};

/// A backend plus whatever it needs to be reopened.
pub struct Backend {
    pub name: &'static str,
    pub log: Option<Arc<dyn Log>>,
    dir: Option<tempfile::TempDir>,
    redis: Option<RedisServer>,
    /// A Redis Cluster (3 masters, 3 replicas) instead of one server.
    cluster: Option<RedisCluster>,
    /// Redis creates its sessions in the seq-id layout (`RedisLog::set_seq_ids`).
    pub seq_ids: bool,
    retention: Retention,
    capacity: usize,
    /// Arms the backend's read fault hook (none for memory, whose
    /// housekeeping reads nothing).
    fail_reads: Option<Box<dyn Fn(u64) + Send + Sync>>,
}

fn disk_faults(log: &Arc<DiskLog>) -> Option<Box<dyn Fn(u64) + Send + Sync>> {
    let weak: Weak<DiskLog> = Arc::downgrade(log);
    Some(Box::new(move |n| {
        if let Some(l) = weak.upgrade() {
            l.fail_reads(n)
        }
    }))
}

fn redis_faults(log: &Arc<RedisLog>) -> Option<Box<dyn Fn(u64) + Send + Sync>> {
    let weak: Weak<RedisLog> = Arc::downgrade(log);
    Some(Box::new(move |n| {
        if let Some(l) = weak.upgrade() {
            l.fail_reads(n)
        }
    }))
}

impl Backend {
    pub fn log(&self) -> &Arc<dyn Log> {
        self.log.as_ref().expect("open")
    }

    /// Whether state survives [`Backend::restart`].
    pub fn durable(&self) -> bool {
        self.dir.is_some() || self.redis_url().is_some()
    }

    /// Whether pins outlive a restart of this process: every durable backend
    /// keeps them (Redis in the shared store, disk committed like events).
    pub fn pins_survive_restart(&self) -> bool {
        self.durable()
    }

    /// The Redis server's URL, for a second handle on the same data.
    pub fn redis_url(&self) -> Option<&str> {
        match (&self.redis, &self.cluster) {
            (Some(r), _) => Some(r.url.as_str()),
            (_, Some(c)) => Some(c.url.as_str()),
            _ => None,
        }
    }

    /// On one Redis server, field `v` of session `id`'s hash: `Some("2")`
    /// in the seq-id layout; `None` elsewhere.
    pub fn layout_of(&self, id: &str) -> Option<String> {
        let v = self
            .redis
            .as_ref()?
            .cli(&["HGET", &format!("mcpr:{{{id}}}:s"), "v"]);
        Some(v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    /// Makes the next `n` reads fail (`u64::MAX`: all, until `fail_reads(0)`);
    /// `false` when this backend has no such hook.
    pub fn fail_reads(&self, n: u64) -> bool {
        match &self.fail_reads {
            Some(f) => {
                f(n);
                true
            }
            None => false,
        }
    }

    /// Drops the log and opens it again from its files or server (durable backends only).
    pub async fn restart(&mut self) {
        if let Some(url) = self.redis_url().map(str::to_owned) {
            drop(self.log.take());
            let log = RedisLog::connect_with(&url, self.retention, 0, self.capacity)
                .await
                .expect("reconnect");
            log.set_seq_ids(self.seq_ids);
            let log = Arc::new(log);
            self.fail_reads = redis_faults(&log);
            self.log = Some(log);
            return;
        }
        let Some(dir) = &self.dir else { return };
        drop(self.log.take());
        let log = DiskLog::open_with(dir.path().join("log"), self.retention, self.capacity)
            .expect("reopen");
        let log = Arc::new(log);
        self.fail_reads = disk_faults(&log);
        self.log = Some(log);
    }
}

/// Every backend, with the given retention and subscriber capacity; Redis on
/// a `redis-server` started for this call, once in each layout of its
/// sessions (`redis`: ids `SEQ-0`, heads in state hashes; `redis-seq-ids`).
pub async fn backends(retention: Retention, capacity: usize) -> Vec<Backend> {
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = Arc::new(
        DiskLog::open_with(dir.path().join("log"), retention, capacity).expect("open disk"),
    );
    let server = RedisServer::start();
    let redis = Arc::new(
        RedisLog::connect_with(&server.url, retention, 0, capacity)
            .await
            .expect("connect redis"),
    );
    let seq_server = RedisServer::start();
    let seq_ids = Arc::new(
        RedisLog::connect_with(&seq_server.url, retention, 0, capacity)
            .await
            .expect("connect redis"),
    );
    seq_ids.set_seq_ids(true);
    vec![
        Backend {
            name: "memory",
            log: Some(Arc::new(MemoryLog::with_subscriber_capacity(
                retention, capacity,
            ))),
            dir: None,
            redis: None,
            cluster: None,
            seq_ids: false,
            retention,
            capacity,
            fail_reads: None,
        },
        Backend {
            name: "disk",
            fail_reads: disk_faults(&disk),
            log: Some(disk),
            dir: Some(dir),
            redis: None,
            cluster: None,
            seq_ids: false,
            retention,
            capacity,
        },
        Backend {
            name: "redis",
            fail_reads: redis_faults(&redis),
            log: Some(redis),
            dir: None,
            redis: Some(server),
            cluster: None,
            seq_ids: false,
            retention,
            capacity,
        },
        Backend {
            name: "redis-seq-ids",
            fail_reads: redis_faults(&seq_ids),
            log: Some(seq_ids),
            dir: None,
            redis: Some(seq_server),
            cluster: None,
            seq_ids: true,
            retention,
            capacity,
        },
    ]
}

/// The Redis backend on a cluster of its own: three masters, three replicas.
pub async fn cluster_backend(retention: Retention, capacity: usize) -> Backend {
    let cluster = RedisCluster::start(3, 1);
    let log = Arc::new(
        RedisLog::connect_with(&cluster.url, retention, 0, capacity)
            .await
            .expect("connect redis cluster"),
    );
    Backend {
        name: "redis-cluster",
        fail_reads: redis_faults(&log),
        log: Some(log),
        dir: None,
        redis: None,
        cluster: Some(cluster),
        seq_ids: false,
        retention,
        capacity,
    }
}

pub fn msg(i: u64) -> bytes::Bytes {
    bytes::Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"i":{i}}}}}"#
    ))
}

/// The commands Redis ran between two `commands_by_name` readings, by name
/// (those that ran at all).
pub fn ran(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// Appends events 1 to `n` to the session stream of `id` on `writer`, one at
/// a time, each reaching every one of `subs` within a second, in order.
pub async fn append_each_reaching(
    writer: &RedisLog,
    id: &str,
    n: u64,
    subs: &mut [mcp_resume_log::Subscription],
) {
    use mcp_resume_log::{EventLog, StreamKey};
    for i in 1..=n {
        writer
            .append(id, StreamKey::Session, vec![msg(i)])
            .await
            .unwrap();
        for sub in subs.iter_mut() {
            let ev = tokio::time::timeout(std::time::Duration::from_secs(1), sub.next())
                .await
                .expect("woken within a second")
                .unwrap();
            assert_eq!((ev.seq, ev.message), (i, msg(i)));
        }
    }
}

/// What the append script of a generation-1 instance (one server, ringing
/// in the commit's step; tests/fixtures/append-generation-1.lua) answers
/// when it appends `message` to stream 0 of session `id`: the older
/// release in a rolling upgrade.
pub async fn old_append(url: &str, id: &str, message: &[u8]) -> Vec<i64> {
    const OLD_APPEND: &str = include_str!("../fixtures/append-generation-1.lua");
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let p = format!("mcpr:{{{id}}}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    redis::Script::new(OLD_APPEND)
        .key(format!("{p}:s"))
        .key(format!("{p}:st:0"))
        .key(format!("{p}:ev:0"))
        .key(format!("{p}:pin"))
        .key(format!("{p}:once"))
        .key(format!("{p}:rs"))
        .key(format!("{p}:f"))
        .arg(0)
        .arg(now)
        .arg(100_000)
        .arg(0)
        .arg("1")
        .arg("")
        .arg("")
        .arg("1")
        .arg(message)
        .invoke_async(&mut conn)
        .await
        .unwrap()
}
