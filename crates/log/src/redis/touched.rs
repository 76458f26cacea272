//! Touches coalesced per session: a session used again and again by one
//! instance is marked as used in Redis once per window, not once per
//! request (a touch is a script round trip, three commands, as much as the
//! append it follows).
//!
//! A touch is also the request's check that the session still lives. An
//! end on another instance reaches this one by push (`tail::endings`, the
//! stream of end notices every instance follows): the notice forgets the
//! session here, so the next touch asks Redis and finds it ended. How long
//! a touch is answered from memory depends on how far those notices are
//! trusted:
//!
//! - [`COALESCE`] (1 s) by default: on a cluster the notice follows the end
//!   as a second command (an instance dying in between loses it), and while
//!   the notice reader is cut off nothing is noticed; a request may then
//!   pass an end elsewhere for at most this long.
//! - The touch interval (`RedisLog::set_touch_interval`, a fraction of the
//!   session TTL) on one server without replicas while its notice reader
//!   reads: there the end script writes the notice in the end's own step,
//!   so a notice is lost only with the stream, which the reader watches
//!   ([`Touched::doubt`] on a reconnect or a trim forgets every session).
//!   A busy session then costs Redis one touch per interval instead of one
//!   per second: at 20,000 sessions and 1,000 events/s, one request in
//!   three instead of every one (benches/results/redis-path.md).
//!
//! Idle expiry, which reads the last use, sees it at most one window late;
//! the interval is set well under the session TTL.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The longest a touch is answered from memory while end notices are not
/// trusted (and the least it is while they are).
pub(super) const COALESCE: Duration = Duration::from_secs(1);

/// Sessions remembered before the stale ones are dropped: the threshold
/// doubles with the sessions kept, so pruning costs O(1) a touch.
const PRUNE_AT: usize = 4096;

/// The sessions this handle touched in Redis, and how far its end notices
/// are trusted.
pub(super) struct Touched {
    map: Mutex<Map>,
    /// The touch interval, in ms, while notices are trusted.
    interval_ms: AtomicU64,
    /// Whether end notices are pushed in the end's own step (one server
    /// without replicas) and the reader is reading them now.
    trusted: AtomicBool,
    /// Counts the ends noticed and the doubts, under the map's lock: a
    /// touch whose answer from Redis may predate one of them is not
    /// remembered ([`Touched::touched`]).
    generation: AtomicU64,
}

#[derive(Default)]
struct Map {
    /// Hashed with foldhash, as the tail's shards.
    at: foldhash::HashMap<String, Instant>,
    prune_at: usize,
}

impl Default for Touched {
    fn default() -> Self {
        Self {
            map: Mutex::new(Map {
                at: Default::default(),
                prune_at: PRUNE_AT,
            }),
            interval_ms: AtomicU64::new(COALESCE.as_millis() as u64),
            trusted: AtomicBool::new(false),
            generation: AtomicU64::new(0),
        }
    }
}

impl Touched {
    fn lock(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a touch is answered from memory now.
    fn window(&self) -> Duration {
        if self.trusted.load(Ordering::Acquire) {
            Duration::from_millis(self.interval_ms.load(Ordering::Relaxed)).max(COALESCE)
        } else {
            COALESCE
        }
    }

    /// Sets the touch interval used while end notices are trusted.
    pub(super) fn set_interval(&self, every: Duration) {
        self.interval_ms
            .store(every.max(COALESCE).as_millis() as u64, Ordering::Relaxed);
    }

    /// The notice reader reads (`true`) or is cut off (`false`). Only a
    /// pushed tail's reader ever says `true`.
    pub(super) fn set_trusted(&self, reading: bool) {
        self.trusted.store(reading, Ordering::Release);
    }

    /// Notices may have been missed (the reader reconnected, or notices it
    /// had not read were trimmed): every session's next touch asks Redis.
    pub(super) fn doubt(&self) {
        let mut m = self.lock();
        m.at.clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Taken before a touch asks Redis, and handed to [`Touched::touched`].
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether `id` was touched in Redis within the window and no end of
    /// it was noticed since.
    pub(super) fn fresh(&self, id: &str) -> bool {
        let window = self.window();
        self.lock()
            .at
            .get(id)
            .is_some_and(|at| at.elapsed() < window)
    }

    /// `id` was touched in Redis just now (it was live), by a touch that
    /// took `since` ([`Touched::generation`]) before it asked. Not
    /// remembered if an end was noticed or a doubt arose meanwhile: the
    /// notice of an end right after Redis answered may have come first, and
    /// remembering the touch after it would let the ended session's requests
    /// pass for a whole interval.
    pub(super) fn touched(&self, id: &str, since: u64) {
        let window = self.window();
        let mut m = self.lock();
        if self.generation.load(Ordering::Acquire) != since {
            return;
        }
        if m.at.len() >= m.prune_at {
            m.at.retain(|_, at| at.elapsed() < window);
            m.prune_at = (m.at.len() * 2).max(PRUNE_AT);
        }
        m.at.insert(id.to_owned(), Instant::now());
    }

    /// `id` ended (here, or on another instance: a notice): its next touch
    /// asks Redis.
    pub(super) fn forget(&self, id: &str) {
        let mut m = self.lock();
        m.at.remove(id);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_is_fresh_for_the_coalescing_time_until_an_end_is_noticed() {
        let t = Touched::default();
        assert!(!t.fresh("s"));
        t.touched("s", t.generation());
        assert!(t.fresh("s"));
        t.forget("s");
        assert!(
            !t.fresh("s"),
            "an end noticed makes the next touch ask Redis"
        );
    }

    #[test]
    fn the_interval_applies_only_while_notices_are_trusted_and_a_doubt_forgets_all() {
        let t = Touched::default();
        t.set_interval(Duration::from_secs(60));
        t.lock()
            .at
            .insert("s".into(), Instant::now() - COALESCE * 2);
        assert!(!t.fresh("s"), "untrusted: the coalescing time");
        t.set_trusted(true);
        assert!(t.fresh("s"), "trusted: the interval");
        t.doubt();
        assert!(!t.fresh("s"), "a doubt forgets every session");
        t.touched("s", t.generation());
        t.set_trusted(false);
        assert!(t.fresh("s"));
    }

    #[test]
    fn a_touch_answered_before_an_end_was_noticed_is_not_remembered() {
        let t = Touched::default();
        let since = t.generation();
        // Redis answered "live"; then the notice of its end came first.
        t.forget("s");
        t.touched("s", since);
        assert!(
            !t.fresh("s"),
            "the ended session would pass for an interval"
        );
        let since = t.generation();
        t.doubt();
        t.touched("s", since);
        assert!(!t.fresh("s"), "a touch racing a doubt is not remembered");
        t.touched("s", t.generation());
        assert!(t.fresh("s"));
    }

    #[test]
    fn the_map_is_pruned_of_stale_sessions_and_pruning_stays_linear() {
        let t = Touched::default();
        for i in 0..PRUNE_AT {
            t.lock()
                .at
                .insert(format!("old{i}"), Instant::now() - COALESCE * 2);
        }
        t.touched("new", t.generation());
        assert_eq!(t.lock().at.len(), 1);
        // Fresh sessions past the threshold: kept, and the threshold grows,
        // so the next touch does not walk them all again.
        for i in 0..PRUNE_AT * 2 {
            t.touched(&format!("live{i}"), t.generation());
        }
        let m = t.lock();
        assert_eq!(m.at.len(), PRUNE_AT * 2 + 1);
        assert!(m.prune_at > m.at.len() / 2 && m.prune_at >= PRUNE_AT);
    }
}
