//! One connection type for both topologies, so every command and script of
//! the backend is written once: a single Redis server (`redis://`) through a
//! reconnecting [`ConnectionManager`], or a Redis Cluster
//! (`redis-cluster://`) through a [`ClusterConnection`] that routes each
//! command to the master of its key's slot and follows `MOVED`/`ASK`.
//!
//! What differs is only what spans slots: a pipeline (one node only on a
//! cluster), `WAIT` (the master of the session's slot), and the keys that are
//! not a session's (see [`super::keys`]).

use futures_util::future::join_all;
use redis::aio::{ConnectionLike, ConnectionManager};

use super::heal::Healing;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

/// The number of hash slots of a Redis Cluster.
pub(super) const SLOTS: u16 = 16384;

/// A connection to a single Redis or to a cluster; cheap to clone (both are multiplexed).
#[derive(Clone)]
pub(super) enum Conn {
    /// `redis://`: every key on one server.
    Single(ConnectionManager),
    /// `redis-cluster://`: each key on the master of its slot (replaced when stuck).
    Cluster(Healing),
}

impl Conn {
    /// Whether keys live on several nodes (multi-key commands must stay in one slot).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Runs independent commands: one pipeline on a single server, concurrent
    /// commands on a cluster (each routed by its own key; the cluster
    /// connection pipelines those going to the same node).
    pub async fn each<T: FromRedisValue>(&self, cmds: Vec<Cmd>) -> RedisResult<Vec<T>> {
        self.each_result(cmds).await?.into_iter().collect()
    }

    /// As [`Conn::each`], with each command's own outcome (on a cluster one
    /// slot may be moving while the others answer).
    pub async fn each_result<T: FromRedisValue>(
        &self,
        cmds: Vec<Cmd>,
    ) -> RedisResult<Vec<RedisResult<T>>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Conn::Single(c) => {
                let mut pipe = Pipeline::new();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                let v: Vec<Value> = pipe.query_async(&mut c.clone()).await?;
                Ok(v.into_iter().map(|v| T::from_redis_value(&v)).collect())
            }
            Conn::Cluster(h) => Ok(join_all(cmds.into_iter().map(|cmd| {
                let mut c = Conn::Cluster(h.clone());
                async move { cmd.query_async::<T>(&mut c).await }
            }))
            .await),
        }
    }

    /// `WAIT replicas timeout` on the server that holds `key`: on a cluster
    /// the master of the key's slot, whose replicas are the ones that count.
    pub async fn wait(&self, key: &str, replicas: usize, timeout_ms: u64) -> RedisResult<i64> {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(replicas).arg(timeout_ms);
        match self {
            Conn::Single(c) => cmd.query_async(&mut c.clone()).await,
            Conn::Cluster(h) => {
                let route = redis::cluster_routing::Route::new(
                    slot(key.as_bytes()),
                    redis::cluster_routing::SlotAddr::Master,
                );
                let v = h
                    .current()
                    .route_command(
                        &cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await;
                h.observe(&v);
                i64::from_redis_value(&v?)
            }
        }
    }
}

impl Conn {
    /// A keyless command's reply from every master (one on a single server).
    pub async fn on_masters<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<Vec<T>> {
        match self {
            Conn::Single(c) => Ok(vec![cmd.query_async(&mut c.clone()).await?]),
            Conn::Cluster(h) => {
                let v = h
                    .current()
                    .route_command(
                        cmd,
                        RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
                    )
                    .await;
                h.observe(&v);
                match v? {
                    Value::Map(m) => m.iter().map(|(_, v)| T::from_redis_value(v)).collect(),
                    Value::Array(a) => a.iter().map(T::from_redis_value).collect(),
                    other => Ok(vec![T::from_redis_value(&other)?]),
                }
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(h) => Box::pin(async move {
                let r = h.current().req_packed_command(cmd).await;
                h.observe(&r);
                r
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(h) => Box::pin(async move {
                let r = h.current().req_packed_commands(cmd, offset, count).await;
                h.observe(&r);
                r
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(_) => 0,
        }
    }
}

/// The cluster hash slot of `key` (CRC16/XMODEM of its hash tag, or of the
/// whole key without one, modulo 16384), as Redis computes it.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|b| *b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|b| *b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"mcpr:{foo}:s"), 12182);
        assert_eq!(slot(b"a{}b"), slot(b"a{}b"));
    }
}
