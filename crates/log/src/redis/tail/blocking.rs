//! A connection of its own for a blocking read (`XREAD ... BLOCK`), on one
//! server or a cluster: the reader of session end notices and the reader of
//! this instance's wake stream each hold one, so a read that blocks never
//! holds up the shared connection's other commands.

use std::time::Duration;

use redis::Value;

/// Where a blocking connection comes from.
#[derive(Clone)]
pub(super) enum Source {
    Server(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

/// A blocking connection of either kind.
pub(super) enum Blocking {
    Server(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Source {
    /// A new connection whose reads may block for `block_ms` (its response
    /// timeout leaves five seconds beyond that, so a stalled Redis is
    /// noticed, not waited on forever).
    pub(super) async fn connect(&self, block_ms: u64) -> redis::RedisResult<Blocking> {
        match self {
            Source::Server(c) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(super::super::CONNECT_TIMEOUT)
                    .set_response_timeout(Duration::from_millis(block_ms + 5000));
                Ok(Blocking::Server(
                    c.get_multiplexed_async_connection_with_config(&config)
                        .await?,
                ))
            }
            Source::Cluster(c) => Ok(Blocking::Cluster(c.get_async_connection().await?)),
        }
    }
}

impl Blocking {
    /// Runs `cmd` on this connection.
    pub(super) async fn query(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
        match self {
            Blocking::Server(c) => cmd.query_async(c).await,
            Blocking::Cluster(c) => cmd.query_async(c).await,
        }
    }
}
