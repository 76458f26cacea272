//! Age retention shared by the backends whose events are not all in memory.
//!
//! The one rule here: a trim moves the floor only past events this scan has
//! *seen* to be old. A read that fails proves nothing, so it never widens a
//! trim; the stream is left alone until the next pass.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::{Bounds, Event, Log, LogError, Seq, StreamKey};

/// How many times a read that hit a racing count trim is retried from the new floor.
const TRUNCATED_RETRIES: usize = 8;

/// The read [`first_young`] scans with; every [`Log`] is one. A seam of its
/// own so that a test can race a read against a trim without a whole backend.
#[async_trait]
pub(crate) trait ReadEvents: Send + Sync {
    async fn read_events(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError>;
}

#[async_trait]
impl<L: Log + ?Sized> ReadEvents for L {
    async fn read_events(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        self.read(id, stream, after, max).await
    }
}

/// The first seq of `stream` committed at or after `cutoff_ms`, scanning
/// from the floor (oldest first); `head + 1` when every event up to the head
/// `b` was seen to be older.
///
/// Errors instead of guessing: a failed read (Redis timeout, storage error)
/// is returned, and the caller trims nothing. A read refused as
/// [`LogError::Truncated`] because a count trim moved the floor meanwhile is
/// retried from the new floor: what the trim removed is gone either way.
pub(crate) async fn first_young(
    log: &dyn ReadEvents,
    id: &str,
    stream: StreamKey,
    b: Bounds,
    cutoff_ms: u64,
) -> Result<Seq, LogError> {
    Ok(first_young_at(log, id, stream, b, cutoff_ms).await?.0)
}

/// [`first_young`], and when that event was committed, if it was read (not
/// when the stream holds nothing young, nor when a lost range comes first):
/// nothing in the stream grows old before that time plus the age limit.
pub(crate) async fn first_young_at(
    log: &dyn ReadEvents,
    id: &str,
    stream: StreamKey,
    b: Bounds,
    cutoff_ms: u64,
) -> Result<(Seq, Option<u64>), LogError> {
    let mut after = b.floor.saturating_sub(1);
    let mut retries = 0;
    // The first seq of a lost range stepped over and not yet shown old: lost
    // events have no commit time, so they go only once a later event is
    // seen to be old (committed after them, so they are older still).
    let mut lost_from: Option<Seq> = None;
    while after < b.head {
        let evs = match log.read_events(id, stream, after, 1024).await {
            Ok(evs) => evs,
            Err(LogError::Truncated { floor, .. })
                if retries < TRUNCATED_RETRIES && floor > after + 1 =>
            {
                retries += 1;
                after = floor - 1;
                continue;
            }
            // Damaged storage lost these: step past them, but keep them
            // (and so their `data-lost` answer) until something after them
            // is seen to be old.
            Err(LogError::DataLost { to, .. }) if to > after => {
                lost_from.get_or_insert(after + 1);
                after = to;
                continue;
            }
            Err(e) => return Err(e),
        };
        let young = evs.iter().position(|e| e.at_ms >= cutoff_ms);
        if young != Some(0) && !evs.is_empty() {
            lost_from = None;
        }
        if let Some(i) = young {
            return Ok(match lost_from {
                Some(lost) => (lost, None),
                None => (evs[i].seq, Some(evs[i].at_ms)),
            });
        }
        match evs.last() {
            Some(last) => after = last.seq,
            // Nothing after `after`: only what was seen may go.
            None => return Ok((lost_from.unwrap_or(after + 1), None)),
        }
    }
    Ok((lost_from.unwrap_or(after + 1), None))
}

/// Makes a backend's reads fail on purpose, so tests can prove that
/// housekeeping trims nothing it could not read.
#[derive(Debug, Default)]
pub(crate) struct ReadFaults(AtomicU64);

impl ReadFaults {
    /// The next `n` reads fail; `u64::MAX` means every read until reset, 0 none.
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// Fails this read if a fault is armed.
    pub fn check(&self) -> Result<(), LogError> {
        let armed = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                0 => None,
                u64::MAX => Some(u64::MAX),
                n => Some(n - 1),
            });
        match armed {
            Ok(_) => Err(LogError::Unavailable("injected read fault".into())),
            Err(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
