//! The tail on a cluster: rounds of non-blocking reads instead of one
//! blocking `XREAD`, which cannot span slots.
//!
//! Each round sends one `XRANGE key (last+1)-0 + COUNT 512` per followed
//! stream, all at once; the cluster connection routes each to its slot's
//! master (following `MOVED`/`ASK`) and pipelines those bound for one node,
//! so a round costs one round trip per node, not per stream. While
//! something is new the next round starts at once; while nothing is, the
//! pause doubles from 1 ms to [`MAX_IDLE_POLL`], cut short when a reader
//! follows a new stream. The cost: an idle followed stream is one cheap
//! command per [`MAX_IDLE_POLL`] per instance (docs/capacity.md).
//!
//! A stream whose read fails (its slot's master is failing over) ends its
//! readers loudly (`Unavailable`); they resume from their cursors, and the
//! streams on healthy masters go on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};

use super::{reply, Shard, END_CHECK, MAX_HOLD_POLL};
use crate::subscription::EndReason;
use crate::Event;

/// The longest pause between rounds while nothing is new: how long an
/// event on an idle stream may wait before this instance reads it.
pub(super) const MAX_IDLE_POLL: Duration = Duration::from_millis(20);
/// Entries read per stream per round.
const COUNT: usize = 512;

impl Shard {
    /// Follows this shard's streams until none is left or the log closes.
    pub(super) async fn poll(self: Arc<Self>) {
        let mut checked = Instant::now();
        let mut idle = Duration::from_millis(1);
        let mut held_for = Duration::from_millis(1);
        loop {
            let Some(keys) = self.followed() else { return };
            let cmds: Vec<Cmd> = keys
                .iter()
                .map(|(k, last)| {
                    let mut c = Cmd::new();
                    c.arg("XRANGE")
                        .arg(k)
                        .arg(format!("{}-0", last + 1))
                        .arg("+")
                        .arg("COUNT")
                        .arg(COUNT);
                    c
                })
                .collect();
            let replies: Vec<RedisResult<Value>> = match self.conn.each_result(cmds).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "Redis tail lost; ending its readers");
                    return self.end_everything(EndReason::Unavailable);
                }
            };
            let mut batches: Vec<(String, Vec<Event>)> = Vec::new();
            let mut failed = Vec::new();
            for ((key, _), r) in keys.into_iter().zip(replies) {
                match r
                    .map_err(|e| e.to_string())
                    .and_then(|v| reply::entries(&v).map_err(|e| e.to_string()))
                {
                    Ok(events) if events.is_empty() => {}
                    Ok(events) => batches.push((key, events)),
                    Err(e) => {
                        tracing::warn!(stream = %key, error = %e,
                            "Redis stream unreadable (failover?); ending its readers");
                        failed.push(key);
                    }
                }
            }
            if !failed.is_empty() {
                self.end_streams(&failed, EndReason::Unavailable);
            }
            let got = !batches.is_empty();
            let held = match self.hand_on(batches).await {
                Ok(held) => held,
                Err(e) => {
                    tracing::warn!(error = %e, "Redis tail lost; ending its readers");
                    return self.end_everything(EndReason::Unavailable);
                }
            };
            if held {
                // As for one server: not acknowledged by the replicas yet.
                tokio::time::sleep(held_for).await;
                held_for = (held_for * 2).min(MAX_HOLD_POLL);
            } else {
                held_for = Duration::from_millis(1);
            }
            if got {
                idle = Duration::from_millis(1);
                tokio::task::yield_now().await;
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(idle) => {}
                    _ = self.notify.notified() => {}
                }
                idle = (idle * 2).min(MAX_IDLE_POLL);
            }
            if checked.elapsed() >= END_CHECK {
                checked = Instant::now();
                self.end_ended_sessions().await;
            }
        }
    }

    /// Ends the readers of `keys` and stops following them.
    fn end_streams(&self, keys: &[String], why: EndReason) {
        let mut st = self.lock();
        for k in keys {
            if let Some(mut f) = st.streams.remove(k) {
                f.end_all(why);
            }
        }
    }
}
