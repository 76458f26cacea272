//! Touches coalesced per session: a session used again and again by one
//! instance is marked as used in Redis at most once per [`COALESCE`], not
//! once per request (a touch is a script round trip, three commands, as much
//! as the append it precedes).
//!
//! A touch is also the request's check that the session still lives. An
//! end on another instance reaches this one by push (`tail::endings`, the
//! stream of end notices every instance follows): the notice forgets the
//! session here, so the next touch asks Redis and finds it ended. Until the
//! notice arrives (a millisecond on one server; on a cluster, where the
//! notice follows the end, at most until the tail's backstop) a request may
//! still pass; never for longer than [`COALESCE`], after which every touch
//! asks Redis again. Idle expiry, which reads the last use, sees it at most
//! [`COALESCE`] late: nothing next to a session TTL of minutes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest a touch is answered from memory.
pub(super) const COALESCE: Duration = Duration::from_secs(1);

/// Most sessions remembered: past it the stale ones are dropped.
const PRUNE_AT: usize = 4096;

/// The sessions this handle touched in Redis within [`COALESCE`].
#[derive(Default)]
pub(super) struct Touched(Mutex<HashMap<String, Instant>>);

impl Touched {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `id` was touched in Redis within [`COALESCE`] and no end of
    /// it was noticed since.
    pub(super) fn fresh(&self, id: &str) -> bool {
        self.lock()
            .get(id)
            .is_some_and(|at| at.elapsed() < COALESCE)
    }

    /// `id` was touched in Redis just now (it was live).
    pub(super) fn touched(&self, id: &str) {
        let mut m = self.lock();
        if m.len() >= PRUNE_AT {
            m.retain(|_, at| at.elapsed() < COALESCE);
        }
        m.insert(id.to_owned(), Instant::now());
    }

    /// `id` ended (here, or on another instance: a notice): its next touch
    /// asks Redis.
    pub(super) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_is_fresh_for_the_coalescing_time_until_an_end_is_noticed() {
        let t = Touched::default();
        assert!(!t.fresh("s"));
        t.touched("s");
        assert!(t.fresh("s"));
        t.forget("s");
        assert!(
            !t.fresh("s"),
            "an end noticed makes the next touch ask Redis"
        );
    }

    #[test]
    fn the_map_is_pruned_of_stale_sessions() {
        let t = Touched::default();
        for i in 0..PRUNE_AT {
            t.lock()
                .insert(format!("old{i}"), Instant::now() - COALESCE * 2);
        }
        t.touched("new");
        assert_eq!(t.lock().len(), 1);
    }
}
