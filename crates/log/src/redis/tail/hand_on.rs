//! Handing what a shard read on to its readers: up to each stream's
//! committed head (with replicas, the state hash's `c`; a seq-id stream has
//! none, all of it is committed), backing off while something read waits
//! for the replicas.

use std::time::Duration;

use super::super::layout::Layout;
use super::{Shard, MAX_HOLD_POLL};
use crate::subscription::EndReason;
use crate::{Event, Seq};

impl Shard {
    /// [`Self::hand_on`] for the read loops: while something read waits for
    /// the replicas, sleeps `held_for` (doubling up to [`MAX_HOLD_POLL`])
    /// instead of spinning on Redis. `None` when Redis was lost: every
    /// reader has been ended.
    pub(super) async fn hand_on_backing_off(
        &self,
        batches: Vec<(String, Vec<Event>)>,
        held_for: &mut Duration,
    ) -> Option<bool> {
        let held = match self.hand_on(batches).await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "Redis tail lost; ending its readers");
                self.end_everything(EndReason::Unavailable);
                return None;
            }
        };
        if held {
            tokio::time::sleep(*held_for).await;
            *held_for = (*held_for * 2).min(MAX_HOLD_POLL);
        } else {
            *held_for = Duration::from_millis(1);
        }
        Some(held)
    }

    /// Delivers what was read, up to each stream's committed head; `true`
    /// when something read is not committed yet (to be read again).
    async fn hand_on(&self, batches: Vec<(String, Vec<Event>)>) -> redis::RedisResult<bool> {
        let committed = self.committed(&batches).await?;
        let mut held = false;
        let mut st = self.lock();
        for ((key, events), committed) in batches.into_iter().zip(committed) {
            held |= events.last().is_some_and(|e| e.seq > committed);
            if let Some(f) = st.streams.get_mut(&key) {
                if !f.deliver(events, committed) {
                    st.streams.remove(&key);
                }
            }
        }
        Ok(held)
    }

    /// The committed head of each batch's stream: everything read, unless
    /// commits wait for replicas; then the streams' `c`, in one round trip
    /// (a seq-id stream has none: everything read).
    async fn committed(&self, batches: &[(String, Vec<Event>)]) -> redis::RedisResult<Vec<Seq>> {
        if !self.strict || batches.is_empty() {
            return Ok(vec![Seq::MAX; batches.len()]);
        }
        let keys: Vec<(String, Layout)> = {
            let st = self.lock();
            batches
                .iter()
                .map(|(k, _)| match st.streams.get(k) {
                    Some(f) => (f.state_key.clone(), f.layout),
                    None => ("mcpr:none".to_owned(), Layout::SeqZero),
                })
                .collect()
        };
        let cmds = keys
            .iter()
            .map(|(k, _)| {
                let mut c = redis::Cmd::new();
                c.arg("HGET").arg(k).arg("c");
                c
            })
            .collect();
        let c: Vec<Option<Seq>> = self.conn.each(cmds).await?;
        // A seq-id stream has no `c`: only a script that is the commit (one
        // server without replicas) appends to it, so what is in it is
        // committed (`layout.rs`).
        Ok(c.into_iter()
            .zip(&keys)
            .map(|(c, (_, layout))| match layout {
                Layout::SeqIds => Seq::MAX,
                Layout::SeqZero => c.unwrap_or(0),
            })
            .collect())
    }
}
