//! This handle's liveness in Redis, so that other instances can tell whether
//! the owner of a call is still running: a key `mcpr:instance:ID` that
//! expires [`TTL`] after its last refresh, refreshed every [`REFRESH`] by a
//! task of its own, deleted on close.

use std::time::Duration;

use super::conn::Conn;
use tokio::task::JoinHandle;

use super::unavailable;
use crate::LogError;

/// How long a heartbeat outlives its last refresh: how soon a crashed
/// instance counts as dead.
pub(super) const TTL: Duration = Duration::from_secs(10);
/// How often the heartbeat is refreshed: three misses in a row before it expires.
const REFRESH: Duration = Duration::from_secs(3);

/// The key that says `instance` is alive.
pub(super) fn key(instance: &str) -> String {
    format!("mcpr:instance:{instance}")
}

/// The heartbeat of one handle; the refreshing task stops on drop.
pub(super) struct Heartbeat {
    /// This handle's instance id.
    pub id: String,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Sets the key once (so the handle is alive as soon as it is open) and
    /// starts refreshing it.
    pub async fn start(conn: Conn) -> Result<Self, LogError> {
        let id = crate::types::new_instance_id();
        beat(&mut conn.clone(), &id).await.map_err(unavailable)?;
        let task = {
            let (mut conn, id) = (conn, id.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(REFRESH).await;
                    if let Err(e) = beat(&mut conn, &id).await {
                        tracing::warn!(error = %e, "instance heartbeat not refreshed");
                    }
                }
            })
        };
        Ok(Self { id, task })
    }

    /// Stops refreshing and deletes the key: this instance is dead at once.
    pub async fn stop(&self, conn: &mut Conn) -> Result<(), LogError> {
        self.task.abort();
        redis::cmd("DEL")
            .arg(key(&self.id))
            .query_async::<()>(conn)
            .await
            .map_err(unavailable)
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sets (or refreshes) the heartbeat key with its TTL.
async fn beat(conn: &mut Conn, id: &str) -> redis::RedisResult<()> {
    redis::cmd("SET")
        .arg(key(id))
        .arg(1)
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(conn)
        .await
}

/// Whether `instance`'s heartbeat is still there.
pub(super) async fn alive(conn: &mut Conn, instance: &str) -> Result<bool, LogError> {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key(instance))
        .query_async(conn)
        .await
        .map_err(unavailable)?;
    Ok(n > 0)
}
