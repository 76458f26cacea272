//! The two layouts a session's streams are stored in on Redis, which every
//! instance of this release reads (`README.md`, "Layouts"):
//!
//! - **Seq-zero** (every release): entry ids `SEQ-0`, and each stream's
//!   head and floor in its state hash (`mcpr:{SESSION}:st:N`), which the
//!   append reads and writes; the followers in their own set
//!   (`mcpr:{SESSION}:f`). An event costs six Redis commands.
//! - **Seq ids** (since [`super::instance::SEQ_IDS`]): entry ids `0-SEQ`,
//!   numbered by Redis itself (`XADD KEY 0-*`), so the head is the
//!   stream's own last id; the followers in field `w` of the session's
//!   hash, read with the fence (`lua/seq_ids.lua`). An event costs three:
//!   the script, its `HMGET` and its `XADD`.
//!
//! A session keeps the layout it was created in (field `v` of its hash).
//! An instance of an older release cannot read a seq-id session (and a
//! request stream it opens in one has the older layout's heads, which this
//! release refuses: [`older_release_stream`]), so new
//! sessions take it only where the operator allowed it
//! ([`super::RedisLog::set_seq_ids`]) and while every live instance reads
//! it; only on one server without replicas, whose commit is the script.

use crate::{LogError, Seq};

/// How a stream's entries are numbered (see the module).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Layout {
    /// Ids `SEQ-0`, heads in the state hash.
    #[default]
    SeqZero,
    /// Ids `0-SEQ`, the head the stream's own.
    SeqIds,
}

impl Layout {
    /// The layout `bounds.lua` reported (its reply's third number).
    pub fn from_reply(n: i64) -> Result<Self, LogError> {
        match n {
            1 => Ok(Self::SeqZero),
            2 => Ok(Self::SeqIds),
            _ => Err(LogError::Corrupt(format!("unknown stream layout {n}"))),
        }
    }

    /// The entry id of `seq` in this layout (an `XRANGE` bound).
    pub fn id(self, seq: Seq) -> String {
        match self {
            Self::SeqZero => format!("{seq}-0"),
            Self::SeqIds => format!("0-{seq}"),
        }
    }
}

/// Request stream `n` of seq-id session `id` was opened by an instance of a
/// release before the layout, in its own: this release neither reads nor
/// appends to it (mixing the two numberings in one stream would let that
/// instance skip events), loudly.
pub(super) fn older_release_stream(id: &str, n: u64) -> LogError {
    LogError::Storage(format!(
        "request stream {n} of session {id} was opened by an instance of an older release, which does not read the session's layout (seq ids): run one release across the fleet before --redis-seq-ids"
    ))
}

/// The seq of entry id `id` in either layout: the part that is not zero
/// (no entry has id `0-0`).
pub(super) fn seq_of(id: &str) -> Option<Seq> {
    let (a, b) = id.split_once('-')?;
    let (a, b): (Seq, Seq) = (a.parse().ok()?, b.parse().ok()?);
    match (a, b) {
        (0, b) => Some(b),
        (a, 0) => Some(a),
        // Neither layout writes such an id.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_name_the_same_seq() {
        for seq in [1, 9, 10, 1 << 40] {
            assert_eq!(seq_of(&Layout::SeqZero.id(seq)), Some(seq));
            assert_eq!(seq_of(&Layout::SeqIds.id(seq)), Some(seq));
        }
        assert_eq!(seq_of("3-4"), None);
        assert_eq!(seq_of("x-0"), None);
        assert_eq!(seq_of("12"), None);
    }
}
