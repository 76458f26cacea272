//! Age retention shared by the backends whose events are not all in memory.

use crate::{Bounds, Log, Seq, StreamKey};

/// The first seq of `stream` committed at or after `cutoff_ms`, scanning
/// from the floor (oldest first); `head + 1` when every event is older.
pub(crate) async fn first_young(
    log: &dyn Log,
    id: &str,
    stream: StreamKey,
    b: Bounds,
    cutoff_ms: u64,
) -> Seq {
    let mut after = b.floor.saturating_sub(1);
    loop {
        let evs = match log.read(id, stream, after, 1024).await {
            Ok(evs) if !evs.is_empty() => evs,
            _ => return b.head + 1,
        };
        if let Some(e) = evs.iter().find(|e| e.at_ms >= cutoff_ms) {
            return e.seq;
        }
        after = evs.last().map(|e| e.seq).unwrap_or(after);
    }
}
