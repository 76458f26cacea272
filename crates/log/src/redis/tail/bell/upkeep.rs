//! The wake stream's upkeep: made, its expiry pushed back, checked, and a
//! doubt about it resolved ([`Bell::resync`]).

use std::sync::Arc;

use redis::Value;

use super::super::super::conn::Conn;
use super::super::Shard;
use super::{Bell, MAXLEN, TTL_MS};

/// What a check found of the wake stream ([`Bell::sound`]).
pub(super) enum Health {
    /// There, and nothing unread trimmed from it.
    Sound,
    /// Gone (expired, or Redis lost it): commits meanwhile dropped this
    /// instance's registrations, which a resync makes again.
    Gone,
    /// Trimmed past what was read, or Redis did not answer: wake-ups may
    /// have been lost, not registrations.
    Unsure,
}

impl Bell {
    /// Whether the wake stream is sound: it exists and nothing this reader
    /// has not read (after `last`) was trimmed from it. Trims what it has
    /// read, so the stream stays small.
    pub(super) async fn sound(&self, conn: &Conn, last: &str) -> Health {
        let mut info = redis::cmd("XINFO");
        info.arg("STREAM").arg(&self.key);
        let v = match info.query_async::<Value>(&mut conn.clone()).await {
            Ok(v) => v,
            // Expired, or Redis lost it.
            Err(e) if e.to_string().contains("no such key") => return Health::Gone,
            Err(_) => return Health::Unsure,
        };
        if super::super::reply::trimmed_past(&v, last) != Some(false) {
            return Health::Unsure;
        }
        let _: Result<i64, _> = redis::cmd("XTRIM")
            .arg(&self.key)
            .arg("MINID")
            .arg(last)
            .query_async(&mut conn.clone())
            .await;
        Health::Sound
    }

    /// Resolves a doubt about wake-ups: the wake stream made sure of (read
    /// from its newest entry on), every followed stream registered again,
    /// then each read once from its own last seq, so nothing committed
    /// meanwhile waits for a wake-up that never comes. `false` when Redis
    /// did not answer (to be tried again).
    pub(super) async fn resync(
        &self,
        conn: &Conn,
        shards: &[Arc<Shard>],
        last: &mut String,
    ) -> bool {
        let Some(id) = self.create(conn).await else {
            return false;
        };
        let keys: Vec<String> = shards.iter().flat_map(|s| s.keys()).collect();
        let cmds = keys.iter().filter_map(|k| self.register(k)).collect();
        if conn.each::<i64>(cmds).await.is_err() {
            return false;
        }
        *last = id;
        for shard in shards {
            shard.mark_all();
        }
        tracing::info!(
            streams = keys.len(),
            "wake-ups were in doubt: every followed stream registered again and read"
        );
        true
    }

    /// Pushes back the wake stream's expiry: `Some(false)` when it is gone,
    /// `None` when Redis did not answer. A gone stream is not made again
    /// here: the registrations commits dropped while it was gone would stay
    /// dropped unnoticed ([`Bell::resync`] makes it and registers again).
    pub(super) async fn extend(&self, conn: &Conn) -> Option<bool> {
        let kept: i64 = redis::cmd("PEXPIRE")
            .arg(&self.key)
            .arg(TTL_MS)
            .query_async(&mut conn.clone())
            .await
            .ok()?;
        Some(kept == 1)
    }

    /// Creates (or refreshes) the wake stream and pushes back its expiry:
    /// the stream must exist for `NOMKSTREAM` wake-ups to land. Returns the
    /// id of the entry it added, from which a read misses no later wake-up.
    pub(super) async fn create(&self, conn: &Conn) -> Option<String> {
        let (id, _): (String, i64) = redis::pipe()
            .cmd("XADD")
            .arg(&self.key)
            .arg("MAXLEN")
            .arg("~")
            .arg(MAXLEN)
            .arg("*")
            .arg("k")
            .arg("")
            .cmd("PEXPIRE")
            .arg(&self.key)
            .arg(TTL_MS)
            .query_async(&mut conn.clone())
            .await
            .ok()?;
        Some(id)
    }
}
