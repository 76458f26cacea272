//! What tests steer a Redis log with: failing reads, a reader held
//! between its bounds and joining its shard, the wake stream's pace.
//! Hidden from the docs; none costs the paths it steers more than a
//! relaxed atomic load.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::RedisLog;

impl RedisLog {
    /// For tests: the next `n` reads fail (`u64::MAX`: all until reset with
    /// 0), to prove that housekeeping trims nothing it could not read.
    #[doc(hidden)]
    pub fn fail_reads(&self, n: u64) {
        self.faults.set(n);
    }

    /// For tests: a new reader waits `hold` between the script that read
    /// its bounds (and registered this instance as its stream's follower)
    /// and joining its shard, so a commit can fall in between.
    #[doc(hidden)]
    pub fn hold_joins(&self, hold: Duration) {
        self.join_hold_ms
            .store(hold.as_millis() as u64, Ordering::Relaxed);
    }

    /// For tests: the wake stream's expiry is pushed back every `refresh`
    /// and the stream checked every `check` (60 s and 1 s otherwise), so a
    /// refresh can come between the stream's loss and the check.
    #[doc(hidden)]
    pub fn pace_wake_stream(&self, refresh: Duration, check: Duration) {
        self.tails.pace_wake_stream(refresh, check);
    }
}
