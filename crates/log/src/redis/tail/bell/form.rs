//! The form of this instance's follower members: compact while every
//! live instance reads that form, named otherwise ([`members`]); when it
//! changes, what this instance follows is registered again in the new form.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::super::conn::Conn;
use super::super::super::instance;
use super::super::members;
use super::super::Shard;
use super::{prefix_of, unfollow, Bell};

impl Bell {
    /// Checks which member form every live instance reads; when it changed,
    /// what this instance follows is to be registered again in the new form.
    /// Also whether every live instance reads the seq-id layout.
    pub(super) async fn check_fleet(&self, conn: &Conn) {
        if let Some(generation) = members::fleet_generation(conn).await {
            self.seq_ids
                .store(generation >= instance::SEQ_IDS, Ordering::SeqCst);
            let compact = generation >= instance::COMPACT_FOLLOWERS;
            if self.compact.swap(compact, Ordering::SeqCst) != compact {
                self.form.fetch_add(1, Ordering::SeqCst);
                self.reform.store(true, Ordering::SeqCst);
            }
        }
    }

    /// A stream registered under form count `form` ([`Bell::registration`]) has
    /// joined its shard: if the form changed since, it may hold a member of
    /// the old form that the change's reform did not see, so another runs.
    pub fn registered_under(&self, form: u64) {
        if self.form.load(Ordering::SeqCst) != form {
            self.reform.store(true, Ordering::SeqCst);
        }
    }

    /// Registers every followed stream again in the form now in use, then
    /// drops the other form's members: only once every new member is there
    /// (a refused `SADD`, a reordered retry on a cluster), so a stream never
    /// has neither. After a change to the named form, every followed stream
    /// is read once: an instance of an older release that joined committed
    /// without waking the compact members until now. `false` when Redis
    /// did not take every new member (to be tried again).
    pub(super) async fn reform(&self, conn: &Conn, shards: &[Arc<Shard>]) -> bool {
        let compact = self.compact.load(Ordering::SeqCst);
        let keys: Vec<String> = shards.iter().flat_map(|s| s.keys()).collect();
        let adds = keys.iter().filter_map(|k| self.register(k)).collect();
        let drops = keys
            .iter()
            .filter_map(|k| {
                let then = self.member(k, !compact);
                (then != self.member(k, compact))
                    .then(|| Some(unfollow(&prefix_of(k)?, &[then])))?
            })
            .collect();
        if conn.each::<i64>(adds).await.is_err() {
            return false;
        }
        // A member of the old form left behind costs a second wake-up, no more.
        let _ = conn.each::<i64>(drops).await;
        if !compact {
            for shard in shards {
                shard.mark_all();
            }
        }
        tracing::info!(
            streams = keys.len(),
            compact,
            "the instances' follower member form changed: every followed stream registered again"
        );
        true
    }
}
