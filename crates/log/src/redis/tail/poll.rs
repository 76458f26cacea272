//! How a shard reads, on one server and on a cluster alike: non-blocking
//! reads of the streams that were woken ([`bell`](super::bell)), plus, where
//! the ring comes after the commit (a cluster, or replicas), a safety read
//! of every followed stream. (Not one blocking `XREAD` over
//! every followed stream: that cannot span a cluster's slots, and on one
//! server it was re-sent with every stream after each wake-up, so an event
//! cost Redis work in proportion to the sessions followed.)
//!
//! The safety read adapts: its interval starts at [`SAFETY_MIN`] and
//! doubles after each safety read that found nothing the wake-ups had not
//! already brought, up to the setting (`RedisLog::set_safety_read_max`,
//! [`SAFETY_MAX`] by default); a safety read that finds events no wake-up
//! announced (one was lost) starts it again from [`SAFETY_MIN`].
//!
//! A read is one `XRANGE key FROM + COUNT 512` per stream (`FROM` the id
//! of the seq after the last read, `(last+1)-0` or `0-(last+1)` by the
//! session's layout), all sent at
//! once, pipelined (the cluster connection routes each to its slot's master,
//! following `MOVED`/`ASK`, and pipelines those bound for one node), so a
//! round costs one round trip per node, not per stream. A stream is read
//! again at once when it was woken (an append was committed; also a new
//! stream that something may have passed by while its reader joined, `join`),
//! or filled its `COUNT`. The cost: an idle followed stream is one cheap
//! command per safety interval per instance following it (docs/capacity.md);
//! a lost wake-up delays its events by at most the interval, never skips
//! them.
//!
//! A stream whose read fails (its slot's master is failing over) ends its
//! readers loudly (`Unavailable`); they resume from their cursors, and the
//! streams on healthy masters go on.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};

use super::{reply, Shard, END_BACKSTOP};
use crate::subscription::EndReason;
use crate::Event;

/// The first interval between safety reads of every followed stream,
/// woken or not, and the one after a safety read found a lost wake-up.
pub(super) const SAFETY_MIN: Duration = Duration::from_millis(1000);
/// The longest interval by default: the bound on the delay a lost wake-up
/// causes on a stream whose wake-ups have kept arriving.
pub(super) const SAFETY_MAX: Duration = Duration::from_secs(30);
/// How long after its commit an event's wake-up may still be on its way:
/// an event a safety read finds unannounced is a lost wake-up only once
/// older than this.
const WAKE_GRACE: Duration = Duration::from_secs(2);
/// "Not until a doubt": the next full round of a pushed tail.
const NEVER: Duration = Duration::from_secs(86_400);
/// Entries read per stream per round.
const COUNT: usize = 512;

impl Shard {
    /// Follows this shard's streams until none is left or the log closes.
    pub(super) async fn poll(self: Arc<Self>) {
        let mut checked = Instant::now();
        let mut pruned = Instant::now();
        // No full round on starting: a stream joins having read its head
        // and registered in one step, and is read when a wake-up came
        // meanwhile (`Tails::join`).
        let mut next_full = Instant::now() + if self.pushed { NEVER } else { SAFETY_MIN };
        let mut safety = SAFETY_MIN;
        let mut held_for = Duration::from_millis(1);
        loop {
            let doubt = self.ends_doubt.swap(false, Ordering::Relaxed);
            if doubt || (!self.pushed && checked.elapsed() >= END_BACKSTOP) {
                checked = Instant::now();
                self.end_ended_sessions().await;
            }
            if self.pushed && pruned.elapsed() >= END_BACKSTOP {
                // Without full rounds, streams nobody reads any more are
                // let go here (in this process: no Redis command).
                pruned = Instant::now();
                if self.followed().is_none() {
                    return;
                }
            }
            // A full round: every stream, and which of them a wake-up named.
            // Otherwise only the streams marked (woken): a round costs
            // what it reads, not the number of streams the shard follows.
            let mut woken = None;
            let keys: Vec<(String, String)> = if Instant::now() >= next_full {
                let Some(all) = self.followed() else { return };
                woken = Some(std::mem::take(&mut self.lock().dirty));
                all
            } else {
                let Some(marked) = self.marked() else { return };
                marked
            };
            if keys.is_empty() {
                let until = if self.pushed {
                    next_full.min(pruned + END_BACKSTOP)
                } else {
                    next_full
                };
                tokio::select! {
                    _ = tokio::time::sleep_until(until.into()) => {}
                    _ = self.notify.notified() => {}
                }
                continue;
            }
            let cmds: Vec<Cmd> = keys
                .iter()
                .map(|(k, from)| {
                    let mut c = Cmd::new();
                    c.arg("XRANGE")
                        .arg(k)
                        .arg(from)
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
            let mut again = Vec::new();
            for ((key, _), r) in keys.into_iter().zip(replies) {
                match r
                    .map_err(|e| e.to_string())
                    .and_then(|v| reply::entries(&v).map_err(|e| e.to_string()))
                {
                    Ok(events) if events.is_empty() => {}
                    Ok(events) => {
                        if events.len() >= COUNT {
                            again.push(key.clone());
                        }
                        batches.push((key, events));
                    }
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
            let read: Vec<String> = batches.iter().map(|(k, _)| k.clone()).collect();
            if let Some(woken) = &woken {
                // Events on a stream nobody woke that were committed a while
                // ago: a wake-up was lost; keep the safety reads close until
                // they stop. (A recent one's wake-up may just be on its way:
                // under load a full round always meets some, and taking
                // those for lost kept the safety reads at their shortest.)
                let late = crate::types::now_ms().saturating_sub(WAKE_GRACE.as_millis() as u64);
                let lost = batches.iter().any(|(k, events)| {
                    !woken.contains(k) && events.first().is_some_and(|e| e.at_ms < late)
                });
                let max = Duration::from_millis(self.safety_max_ms.load(Ordering::Relaxed));
                safety = if lost {
                    SAFETY_MIN
                } else {
                    (safety * 2).min(max)
                };
                next_full = Instant::now() + safety;
                if self.pushed {
                    // Every commit wakes this instance in its own step (its
                    // own commits from the script's reply, `local`), and a
                    // doubt about that is resolved when it arises: no
                    // safety reads (`bell`).
                    next_full = Instant::now() + NEVER;
                }
            }
            // As for one server: not acknowledged by the replicas yet; the
            // commit wakes them, this is the backstop.
            match self.hand_on_backing_off(batches, &mut held_for).await {
                None => return,
                Some(true) => again.extend(read),
                Some(false) => {}
            }
            if !again.is_empty() {
                self.lock().dirty.extend(again);
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
