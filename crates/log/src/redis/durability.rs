//! What backs "committed" on the Redis the log runs on, read at start-up.

use super::{prefix, unavailable, RedisLog};
use crate::LogError;

impl RedisLog {
    /// What backs "committed" on this Redis, in words, and a warning when it
    /// is weaker than docs/protocol.md 6 asks (an acknowledged event survives a
    /// crash: `appendfsync always`, or replicas that `WAIT` counts) or cannot
    /// work (fewer replicas than `WAIT` asks for). `CONFIG` may be disabled on
    /// managed Redis; then the words say "unknown".
    ///
    /// The words also give `stream-node-max-bytes`, what a session stream
    /// holding events costs Redis at least, and `hash-max-ziplist-value`,
    /// below which a session's hash is one compact listpack (its record,
    /// with the client's `initialize` params, is longer than Redis's default
    /// 64 bytes: a hash table, 648 B against 312 B).
    ///
    /// On a cluster every master is asked; the words give the weakest.
    pub async fn durability(&self) -> (String, Option<String>) {
        let config = |name: &'static str| async move {
            let mut cmd = redis::cmd("CONFIG");
            cmd.arg("GET").arg(name);
            let v: Result<Vec<Vec<String>>, _> = self.conn.on_masters(&cmd).await;
            let values: Vec<String> = v
                .ok()?
                .into_iter()
                .filter_map(|v| v.get(1).cloned())
                .collect();
            // Masters that differ show as "mixed", which never counts as synced.
            let first = values.first()?;
            Some(if values.iter().all(|v| v == first) {
                first.clone()
            } else {
                "mixed".to_owned()
            })
        };
        let aof = config("appendonly").await;
        let fsync = config("appendfsync").await;
        let infos: Vec<String> = self
            .conn
            .on_masters(redis::cmd("INFO").arg("replication"))
            .await
            .unwrap_or_default();
        let replicas: usize = infos
            .iter()
            .map(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("connected_slaves:"))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            })
            .min()
            .unwrap_or(0);
        // Not durability, but what a session costs Redis: a stream holding
        // events takes at least this much (its first node is preallocated
        // to it), most of a session's memory (docs/operator.md, Redis).
        let node = config("stream-node-max-bytes").await;
        // The name Redis 6 and 7 both know (7 calls it hash-max-listpack-value).
        let hash_value = config("hash-max-ziplist-value").await;
        let synced = aof.as_deref() == Some("yes") && fsync.as_deref() == Some("always");
        let words = format!(
            "appendonly {}, appendfsync {}, {replicas} replicas connected, WAIT for {}, \
             stream-node-max-bytes {}, hash-max-ziplist-value {}",
            aof.as_deref().unwrap_or("unknown"),
            fsync.as_deref().unwrap_or("unknown"),
            self.replicas,
            node.as_deref().unwrap_or("unknown"),
            hash_value.as_deref().unwrap_or("unknown"),
        );
        let warning = if replicas < self.replicas {
            Some(format!(
                "{words}: every append fails with 503 until {} replicas are connected",
                self.replicas
            ))
        } else if !synced && self.replicas == 0 {
            Some(format!(
                "{words}: a Redis crash can take back events clients have seen; run Redis \
                 with appendonly yes and appendfsync always, or with replicas and \
                 --redis-replicas N"
            ))
        } else {
            None
        };
        (words, warning)
    }

    /// `"1"` when an acknowledged append is committed at once (no replicas to wait for).
    pub(super) fn commit_at_ack(&self) -> &'static str {
        if self.replicas == 0 {
            "1"
        } else {
            "0"
        }
    }

    /// Waits until `--redis-replicas` replicas of the server holding
    /// session `id` (its slot's master on a cluster) have every write so far.
    pub(super) async fn wait_replicas(&self, id: &str) -> Result<(), LogError> {
        if self.replicas == 0 {
            return Ok(());
        }
        let acked = self
            .conn
            .wait(&format!("{}:s", prefix(id)), self.replicas, 1000)
            .await
            .map_err(unavailable)?;
        if (acked as usize) < self.replicas {
            return Err(LogError::Unavailable(format!(
                "only {acked} of {} replicas acknowledged",
                self.replicas
            )));
        }
        Ok(())
    }
}
