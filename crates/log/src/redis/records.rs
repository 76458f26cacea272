//! Session records on Redis: creating, reading, touching and ending a
//! session, its meta, and how many live.

use async_trait::async_trait;
use bytes::Bytes;

use super::{live, prefix, unavailable, RedisLog};
use crate::types::now_ms;
use crate::{LogError, SessionInfo, SessionRecords};

#[async_trait]
impl SessionRecords for RedisLog {
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        let p = prefix(id);
        self.list_live(id).await?;
        // Created is used: the session's next request (`initialize`'s
        // `notifications/initialized`) is touched from memory, as after a
        // touch the script answered ([`touched`]), so the end notices'
        // reader is started here as a touch would.
        self.tails.follow_endings().await;
        let since = self.touched.generation();
        let seq_ids = self.creates_seq_ids().await;
        let mut inv = self.scripts.create.key(format!("{p}:s"));
        inv.key(format!("{p}:st:0"));
        if !self.cluster() {
            inv.key(live::LIVE);
        }
        let r: i64 = inv
            .arg(now_ms())
            .arg(meta.as_ref())
            .arg(id)
            .arg(if seq_ids { "2" } else { "1" })
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if r < 0 {
            return Err(LogError::SessionExists(id.to_owned()));
        }
        self.live_count.adjust(1);
        self.wait_replicas(id).await?;
        self.touched.touched(id, since);
        Ok(())
    }

    async fn session(&self, id: &str) -> Result<SessionInfo, LogError> {
        let (c, e, m): (Option<u64>, Option<String>, Option<Vec<u8>>) = redis::cmd("HMGET")
            .arg(format!("{}:s", prefix(id)))
            .arg("c")
            .arg("e")
            .arg("m")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match (c, e.as_deref()) {
            (Some(created_ms), Some("0")) => Ok(SessionInfo {
                id: id.to_owned(),
                created_ms,
                meta: Bytes::from(m.unwrap_or_default()),
            }),
            _ => Err(LogError::NoSession(id.to_owned())),
        }
    }

    async fn live_sessions(&self) -> usize {
        if let Some(n) = self.live_count.fresh() {
            return n;
        }
        match self.count_live().await {
            Ok(n) => {
                self.live_count.set(n);
                n
            }
            Err(_) => 0,
        }
    }

    async fn set_meta(&self, id: &str, meta: Bytes) -> Result<(), LogError> {
        self.hset_if_live(id, "m", meta.as_ref()).await?;
        self.wait_replicas(id).await
    }

    async fn swap_meta(&self, id: &str, expect: Bytes, meta: Bytes) -> Result<bool, LogError> {
        let r: i64 = self
            .scripts
            .swap_meta
            .key(format!("{}:s", prefix(id)))
            .arg(expect.as_ref())
            .arg(meta.as_ref())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if r < 0 {
            return Err(LogError::NoSession(id.to_owned()));
        }
        if r == 1 {
            self.wait_replicas(id).await?;
        }
        Ok(r == 1)
    }

    async fn touch(&self, id: &str) -> Result<(), LogError> {
        if self.touched.fresh(id) {
            return Ok(());
        }
        // An end on another instance must reach this one before a touch is
        // answered from memory ([`touched`]).
        self.tails.follow_endings().await;
        let since = self.touched.generation();
        self.hset_if_live(id, "a", now_ms()).await?;
        self.touched.touched(id, since);
        Ok(())
    }

    async fn end_session(&self, id: &str) -> Result<(), LogError> {
        self.touched.forget(id);
        self.end_unless_used_since(id, None).await.map(|_| ())
    }

    async fn session_ids(&self) -> Result<Vec<String>, LogError> {
        self.live_ids().await
    }
}

impl RedisLog {
    /// Whether a session created now takes the seq-id layout (`layout.rs`):
    /// allowed ([`RedisLog::set_seq_ids`]), on one server without replicas,
    /// and every live instance reads it (as last checked, `Tails::fleet_reads_seq_ids`).
    async fn creates_seq_ids(&self) -> bool {
        self.seq_ids.load(std::sync::atomic::Ordering::Relaxed)
            && self.rings_in_script()
            && self.tails.fleet_reads_seq_ids().await
    }
}
