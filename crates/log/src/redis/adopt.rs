//! Tombstones that versions before tombstone expiry left behind: their
//! end script did not list the id in the ended index `mcpr:ended`, so
//! they carry no end time and nothing would ever forget them. Maintenance
//! adopts them: it sweeps the session hashes and lists each tombstone that
//! has no end time as ended now, so it is forgotten one tombstone TTL later
//! like any other (as the disk backend counts its older records from the
//! next open).
//!
//! Only on one server: the cluster backend came with the ended index, and
//! there every tombstone is listed, as ended or (after a crash between its
//! end and its listing) as live, which maintenance reconciles ([`super::live`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::live::ENDED;
use super::{unavailable, RedisLog};
use crate::types::now_ms;
use crate::LogError;

/// Keys `SCAN` visits per step.
const SCAN_COUNT: usize = 1000;
/// `SCAN` steps per maintenance pass: a pass costs a bounded amount
/// however many keys Redis holds, and a sweep of a large keyspace spreads
/// over several passes.
const STEPS_PER_PASS: usize = 16;
/// The keys of session hashes (live sessions and tombstones).
const PATTERN: &str = "mcpr:{*}:s";

/// Where the sweep of this handle goes on at its next pass (0: a new sweep).
#[derive(Default)]
pub(super) struct Sweep(AtomicU64);

/// The session id of a session hash's key, `mcpr:{ID}:s`.
fn id_of(key: &str) -> Option<&str> {
    key.strip_prefix("mcpr:{")?.strip_suffix("}:s")
}

impl RedisLog {
    /// Lists in the ended index, as ended now, every tombstone this pass
    /// meets that has no end time. The sweep goes on across passes and
    /// starts again once done, so a tombstone an older instance writes
    /// during a rolling upgrade is met too.
    pub(super) async fn adopt_unlisted_tombstones(&self) -> Result<(), LogError> {
        if self.cluster() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let mut cursor = self.sweep.0.load(Ordering::Relaxed);
        for _ in 0..STEPS_PER_PASS {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(PATTERN)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            self.adopt(&keys).await?;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        self.sweep.0.store(cursor, Ordering::Relaxed);
        Ok(())
    }

    /// Lists the tombstones among the session hashes `keys` that have no end
    /// time, in one script: a session ending or forgotten meanwhile is seen
    /// either before or after, never half.
    async fn adopt(&self, keys: &[String]) -> Result<(), LogError> {
        let hashes: Vec<(&String, &str)> =
            keys.iter().filter_map(|k| Some((k, id_of(k)?))).collect();
        if hashes.is_empty() {
            return Ok(());
        }
        let mut inv = self.scripts.adopt.key(ENDED);
        inv.arg(now_ms());
        for (key, id) in hashes {
            inv.key(key).arg(id);
        }
        let adopted: u64 = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if adopted > 0 {
            tracing::info!(
                count = adopted,
                "tombstones without an end time (from an older version) will be forgotten after the tombstone TTL"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::id_of;

    #[test]
    fn ids_of_session_hash_keys() {
        assert_eq!(id_of("mcpr:{abc}:s"), Some("abc"));
        assert_eq!(id_of("mcpr:{a}b}:s"), Some("a}b"));
        assert_eq!(id_of("mcpr:sessions"), None);
        assert_eq!(id_of("mcpr:{abc}:st:0"), None);
    }
}
