//! Which sessions are live and which ended, without commands that span
//! slots on a cluster.
//!
//! On one server the live set `mcpr:sessions` and the ended index
//! `mcpr:ended` are updated inside the session's own scripts (atomic). On a
//! cluster they would span slots, so each is split into [`BUCKETS`] keys
//! (`mcpr:sessions:{bN}`, `mcpr:ended:{bN}`, both of a bucket in one slot)
//! and updated by a second command next to the session's script: an id is
//! listed as live *before* its session is created and unlisted *after* it
//! ends, so a crash in between leaves an id listed that maintenance
//! reconciles (it drops ids with no live session and files ended ones in
//! the ended index), never a live session that nothing lists.
//! On a cluster, counting costs [`BUCKETS`] `SCARD`s and listing
//! [`BUCKETS`] `SMEMBERS` (concurrent, a few per node), whatever the number
//! of sessions; on one server, one `SCARD`, and listing pages of `SSCAN`.

use redis::Cmd;

use super::{conn, unavailable, RedisLog};
use crate::LogError;

// The buckets of the live set and of the ended index on a cluster: enough
// to spread them over the masters, few enough to count with one round of
// commands; the same buckets divide maintenance among instances
// ([`super::buckets`]).
use crate::BUCKETS;
/// The live set on one server.
pub(super) const LIVE: &str = "mcpr:sessions";
/// The ended index on one server: ended ids scored by when they ended (ms).
pub(super) const ENDED: &str = "mcpr:ended";
/// Ids asked for per `SSCAN` of the live set on one server.
const SCAN_PAGE: usize = 4096;

/// The bucket of session `id`.
pub(super) fn bucket(id: &str) -> u16 {
    conn::slot(id.as_bytes()) % BUCKETS
}

/// The live-set key that lists `id`.
pub(super) fn live_key(cluster: bool, id: &str) -> String {
    if cluster {
        format!("{LIVE}:{{b{}}}", bucket(id))
    } else {
        LIVE.to_owned()
    }
}

/// The ended-index key that lists `id`.
pub(super) fn ended_key(cluster: bool, id: &str) -> String {
    if cluster {
        format!("{ENDED}:{{b{}}}", bucket(id))
    } else {
        ENDED.to_owned()
    }
}

/// Every ended-index key.
pub(super) fn ended_keys(cluster: bool) -> Vec<String> {
    if cluster {
        (0..BUCKETS).map(|b| format!("{ENDED}:{{b{b}}}")).collect()
    } else {
        vec![ENDED.to_owned()]
    }
}

fn live_keys(cluster: bool) -> Vec<String> {
    if cluster {
        (0..BUCKETS).map(|b| format!("{LIVE}:{{b{b}}}")).collect()
    } else {
        vec![LIVE.to_owned()]
    }
}

impl RedisLog {
    pub(super) fn cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// On a cluster, lists `id` as live before its session is created.
    pub(super) async fn list_live(&self, id: &str) -> Result<(), LogError> {
        if !self.cluster() {
            return Ok(()); // the create script does it
        }
        let _: i64 = redis::cmd("SADD")
            .arg(live_key(true, id))
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// On a cluster, moves `id` from the live set to the ended index (one
    /// slot, one `MULTI`) after its session ended at `at_ms`.
    pub(super) async fn list_ended(&self, id: &str, at_ms: u64) -> Result<(), LogError> {
        if !self.cluster() {
            return Ok(()); // the end script does it
        }
        let _: redis::Value = redis::pipe()
            .atomic()
            .cmd("SREM")
            .arg(live_key(true, id))
            .arg(id)
            .cmd("ZADD")
            .arg(ended_key(true, id))
            .arg(at_ms)
            .arg(id)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    /// How many ids the live set(s) list.
    pub(super) async fn count_live(&self) -> Result<usize, LogError> {
        let cmds = live_keys(self.cluster())
            .into_iter()
            .map(|k| {
                let mut c = Cmd::new();
                c.arg("SCARD").arg(k);
                c
            })
            .collect();
        let n: Vec<usize> = self.conn.each(cmds).await.map_err(unavailable)?;
        Ok(n.into_iter().sum())
    }

    /// Every id the live set(s) list. On one server the one live set is
    /// read in pages ([`SCAN_PAGE`]): at 100,000 sessions one `SMEMBERS`
    /// is a 6.4 MB reply that holds Redis for its length and, on the
    /// instance's one multiplexed connection, every reply behind it.
    pub(super) async fn live_ids(&self) -> Result<Vec<String>, LogError> {
        if !self.cluster() {
            return self.scan_set(LIVE).await;
        }
        let cmds = live_keys(true)
            .into_iter()
            .map(|k| {
                let mut c = Cmd::new();
                c.arg("SMEMBERS").arg(k);
                c
            })
            .collect();
        let ids: Vec<Vec<String>> = self.conn.each(cmds).await.map_err(unavailable)?;
        Ok(ids.into_iter().flatten().collect())
    }

    /// The members of the set `key`, a page a round trip (`SSCAN`, which
    /// may list a member twice: each is kept once). A member added or
    /// removed during the scan may be listed or not, as with a read just
    /// before or after it.
    async fn scan_set(&self, key: &str) -> Result<Vec<String>, LogError> {
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0u64;
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(key)
                .arg(cursor)
                .arg("COUNT")
                .arg(SCAN_PAGE)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(unavailable)?;
            seen.extend(page);
            if next == 0 {
                return Ok(seen.into_iter().collect());
            }
            cursor = next;
        }
    }

    /// The ids the live set(s) list in the buckets of `mask`: on a cluster
    /// only those buckets' sets are read.
    pub(super) async fn live_ids_in(
        &self,
        mask: super::buckets::Mask,
    ) -> Result<Vec<String>, LogError> {
        use super::buckets::Share;
        if mask == 0 {
            return Ok(Vec::new());
        }
        if !self.cluster() {
            let mut ids = self.live_ids().await?;
            ids.retain(|id| Share::has(mask, bucket(id)));
            return Ok(ids);
        }
        let cmds = (0..BUCKETS)
            .filter(|b| Share::has(mask, *b))
            .map(|b| {
                let mut c = Cmd::new();
                c.arg("SMEMBERS").arg(format!("{LIVE}:{{b{b}}}"));
                c
            })
            .collect();
        let ids: Vec<Vec<String>> = self.conn.each(cmds).await.map_err(unavailable)?;
        Ok(ids.into_iter().flatten().collect())
    }

    /// Maintenance on a cluster: `id` is listed live but its session hash
    /// says `e` (`None`: no session). A create that never ran is unlisted;
    /// an end whose listing was lost is filed in the ended index now.
    pub(super) async fn reconcile(&self, id: &str, e: Option<&str>) -> Result<(), LogError> {
        match e {
            Some("0") => Ok(()),
            Some(_) => self.list_ended(id, crate::types::now_ms()).await,
            None => {
                let _: i64 = redis::cmd("SREM")
                    .arg(live_key(true, id))
                    .arg(id)
                    .query_async(&mut self.conn.clone())
                    .await
                    .map_err(unavailable)?;
                Ok(())
            }
        }
    }
}

/// The number of live sessions as last counted, for [`crate::SessionRecords::live_sessions`]:
/// counted again at most every [`LiveCount::FRESH`] (a count is a `SCARD`
/// per bucket set, 64 on a cluster, which every `initialize` asked for to
/// check the server's limit), and kept current meanwhile with the sessions
/// this handle creates and ends. Other instances' creations show at the
/// next count: a limit on live sessions is within what the fleet creates
/// in that time.
#[derive(Default)]
pub(super) struct LiveCount(std::sync::Mutex<Option<(std::time::Instant, usize)>>);

impl LiveCount {
    /// How long a count is used before it is taken again.
    pub(super) const FRESH: std::time::Duration = std::time::Duration::from_millis(250);

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(std::time::Instant, usize)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The count, if taken within [`LiveCount::FRESH`].
    pub(super) fn fresh(&self) -> Option<usize> {
        self.lock()
            .filter(|(at, _)| at.elapsed() < Self::FRESH)
            .map(|(_, n)| n)
    }

    /// A count just taken.
    pub(super) fn set(&self, n: usize) {
        *self.lock() = Some((std::time::Instant::now(), n));
    }

    /// The next count is taken afresh (maintenance changed the live sets).
    pub(super) fn forget(&self) {
        *self.lock() = None;
    }

    /// This handle created (`+1`) or ended (`-1`) a session.
    pub(super) fn adjust(&self, by: isize) {
        if let Some((_, n)) = self.lock().as_mut() {
            *n = n.saturating_add_signed(by);
        }
    }
}
