//! Opening the log on one Redis server or on a Redis Cluster.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::conn::Conn;
use super::scripts::Scripts;
use super::{instance, tail, unavailable, RedisLog, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::{LogError, Retention};

impl RedisLog {
    /// Sets the longest interval between the safety reads of followed
    /// streams on a Redis Cluster (default 30 s, at least 1 s): the interval
    /// starts at 1 s and doubles while wake-ups keep arriving, so an idle
    /// followed stream costs one command per this interval; it is also the
    /// longest a lost wake-up can delay events. No effect on one server,
    /// whose tail blocks on its streams.
    pub fn set_safety_read_max(&self, max: std::time::Duration) {
        self.tails.set_safety_read_max(max);
    }

    /// Sets how long a session's touch (its mark of use, and the request's
    /// check that it lives) is answered from memory while this handle
    /// trusts the end notices it reads (one server without replicas; at
    /// least 1 s, the default, and always 1 s elsewhere): a busy session
    /// costs one touch per this interval. Idle expiry sees a session's use
    /// at most this late, so keep it a small part of the session TTL
    /// (`serve` takes an eighth of it, at most 60 s).
    pub fn set_touch_interval(&self, every: std::time::Duration) {
        self.touched.set_interval(every);
    }

    /// The least time between two walks of maintenance over its sessions'
    /// state (0, the default: every pass). A walk reads each session of the
    /// instance's buckets (one `HMGET` a session, pipelined): at 100,000
    /// sessions and a pass every 30 s that was 3,333 commands a second
    /// whatever the traffic. A session idle past the TTL, or an event past
    /// the age limit, then waits up to this much longer to go, so keep it a
    /// small part of both (`serve` takes a sixteenth of the shorter, at
    /// most 120 s). A bucket newly held is walked at the next pass.
    pub fn set_walk_interval(&self, every: std::time::Duration) {
        self.walks.set_every(every);
    }

    /// Creates new sessions in the seq-id layout (`layout.rs`: an event
    /// costs Redis three commands instead of six) when `on`, while every
    /// live instance reads it, and only on one server without replicas;
    /// off by default. A release before it cannot read such a session
    /// (its requests fail, loudly): turn it on once no instance of an
    /// older release will run against this Redis again, a rollback
    /// included. Sessions keep the layout they were created in.
    pub fn set_seq_ids(&self, on: bool) {
        self.seq_ids.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Connects to `url`: `redis://HOST:PORT/DB` (one server) or
    /// `redis-cluster://HOST:PORT[,HOST:PORT...]` (a Redis Cluster, any of
    /// its nodes as seeds). `replicas` is how many replicas must acknowledge
    /// each append (`WAIT`, on the session's master) before it counts as committed.
    pub async fn connect(
        url: &str,
        retention: Retention,
        replicas: usize,
    ) -> Result<Self, LogError> {
        Self::connect_with(
            url,
            retention,
            replicas,
            crate::memory::DEFAULT_SUB_CAPACITY,
        )
        .await
    }

    /// As [`RedisLog::connect`], with subscribers lagging after `capacity` unread events.
    pub async fn connect_with(
        url: &str,
        retention: Retention,
        replicas: usize,
        capacity: usize,
    ) -> Result<Self, LogError> {
        let bad = |e: redis::RedisError| LogError::Storage(format!("{url}: {e}"));
        let (conn, blocking, cluster) = if let Some(nodes) = url.strip_prefix("redis-cluster://") {
            let seeds: Vec<String> = nodes
                .split(',')
                .filter(|n| !n.is_empty())
                .map(|n| format!("redis://{}", n.trim_end_matches('/')))
                .collect();
            // As for one server: fail fast while a slot has no master (a
            // request answers 503 instead of queueing behind a failover).
            let client = redis::cluster::ClusterClient::builder(seeds)
                .retries(2)
                .min_retry_wait(50)
                .max_retry_wait(250)
                .connection_timeout(CONNECT_TIMEOUT)
                .response_timeout(RESPONSE_TIMEOUT)
                .build()
                .map_err(bad)?;
            let conn = super::heal::Healing::open(client.clone())
                .await
                .map_err(unavailable)?;
            (Conn::Cluster(conn), None, Some(client))
        } else {
            let client = redis::Client::open(url).map_err(bad)?;
            // Fail fast while Redis is away (a request answers 503 within about a
            // second instead of queueing behind a long reconnect), and notice a
            // silent peer instead of waiting forever.
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(2)
                .set_factor(50)
                .set_max_delay(250)
                .set_connection_timeout(CONNECT_TIMEOUT)
                .set_response_timeout(RESPONSE_TIMEOUT);
            let conn = ConnectionManager::new_with_config(client.clone(), config)
                .await
                .map_err(unavailable)?;
            (Conn::Single(conn), Some(client), None)
        };
        let scripts = Scripts::new();
        let closed = Arc::new(AtomicBool::new(false));
        let heartbeat = instance::Heartbeat::start(conn.clone()).await?;
        let touched = Arc::new(super::touched::Touched::default());
        Ok(Self {
            heartbeat,
            tails: tail::Tails::new(
                blocking,
                cluster,
                conn.clone(),
                capacity,
                closed.clone(),
                replicas > 0,
                touched.clone(),
            ),
            touched,
            live_count: Default::default(),
            conn,
            retention,
            replicas,
            closed,
            scripts: Arc::new(scripts),
            faults: Default::default(),
            join_hold_ms: Default::default(),
            sweep: Default::default(),
            held: Default::default(),
            due: Default::default(),
            walks: Default::default(),
            seq_ids: AtomicBool::new(false),
        })
    }
}
