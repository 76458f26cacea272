//! This handle among the instances that share one Redis: its identity
//! (the heartbeat of [`super::instance`]), whether another instance is
//! alive, and the owner leases of sessions (field `o` of the session hash,
//! taken over by `claim.lua` once the owner's heartbeat is gone, given up by
//! `release.lua` at an owner's graceful stop).

use async_trait::async_trait;
use bytes::Bytes;

use super::{instance, prefix, unavailable, RedisLog};
use crate::{Leases, LogError};

#[async_trait]
impl Leases for RedisLog {
    fn instance(&self) -> &str {
        &self.heartbeat.id
    }

    fn shared(&self) -> bool {
        true
    }

    async fn instance_alive(&self, instance: &str) -> Result<bool, LogError> {
        instance::alive(&mut self.conn.clone(), instance).await
    }

    fn leases_fresh(&self) -> bool {
        self.heartbeat.liveness.fresh()
    }

    fn lease_epoch(&self) -> u64 {
        self.heartbeat.liveness.epoch()
    }

    async fn claim(&self, id: &str) -> Result<Option<String>, LogError> {
        let key = format!("{}:s", prefix(id));
        let me = self.instance();
        let seen: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg("o")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if let Some(owner) = &seen {
            if owner == me || self.instance_alive(owner).await? {
                return Ok(seen);
            }
        }
        let owner: String = self
            .scripts
            .claim
            .key(key)
            .arg(me)
            .arg(seen.as_deref().unwrap_or(""))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if owner == "-" {
            return Err(LogError::NoSession(id.to_owned()));
        }
        if owner == me {
            // A lease a failover could take back would let two instances
            // run the session's state.
            self.wait_replicas(id).await?;
        }
        Ok(Some(owner))
    }

    async fn lease_holder(&self, id: &str) -> Result<Option<String>, LogError> {
        redis::cmd("HGET")
            .arg(format!("{}:s", prefix(id)))
            .arg("o")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)
    }

    async fn release(&self, id: &str, seen: Option<u64>) -> Result<bool, LogError> {
        let given_up: i64 = self
            .scripts
            .release
            .key(format!("{}:s", prefix(id)))
            .arg(self.instance())
            .arg(seen.map(|s| s.to_string()).unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        Ok(given_up == 1)
    }

    async fn open_carrier(
        &self,
        id: &str,
        owner: &str,
        meta: Bytes,
        max: u64,
    ) -> Result<Option<u64>, LogError> {
        self.open_request(id, meta, Some(owner), max).await
    }
}
