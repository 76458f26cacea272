//! A commit's wake-up for this instance's own readers, handed over in
//! memory instead of through Redis.
//!
//! A commit rings each follower's wake stream ([`super::bell`]): on one
//! server without replicas in the append script's own step, on a cluster or
//! with replicas right after the commit ([`super::members::ring`]). Both
//! leave out the committing instance's own (`append.lua`'s `me`): that one
//! learns of the commit from the script's reply (and, with replicas, from
//! the move of the committed head after it), and hands the events to its
//! shard here ([`LocalCommit::committed`]), as a wake-up carrying them would. A reader
//! on the instance that commits (a tool's notification to its own
//! session's stream, the common case behind a balancer that keeps a
//! session on one instance) so costs Redis no `XADD` to a wake stream and
//! no `XREAD` of it.
//!
//! Nothing is lost by it: the readers the hand-over is for live in the
//! process that committed, so they die with it if it dies before handing
//! over. A commit whose outcome this instance does not know (Redis did not
//! answer, or the caller stopped waiting and dropped the append) marks the
//! stream for a read from what the shard has read ([`Drop`]), which finds
//! the commit if it happened; and again [`RECHECK`] later, in case the
//! script ran after that read (sent before a reconnect that the read went
//! over): so such a commit reaches them within a bound, never only with the
//! stream's next one. With replicas a commit reaches readers only once its
//! committed head moved: events whose `WAIT` failed stay held, here as on
//! every instance, until a later commit moves it past them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{shard_index, Shard, Tails};
use crate::Seq;

/// When a commit of unknown outcome has its stream read a second time.
const RECHECK: Duration = Duration::from_secs(1);

/// An append this instance is making to a stream that its own readers may
/// follow; made before the script runs ([`Tails::local_commit`]).
pub(in crate::redis) struct LocalCommit {
    shard: Arc<Shard>,
    key: String,
    /// Settled: handed over, or known not to have committed.
    settled: bool,
}

impl Tails {
    /// What hands the commit to stream `key` (`mcpr:{SESSION}:ev:N`) of
    /// `session` to this instance's readers once the append script has
    /// answered; made before it runs, so that a commit whose answer never
    /// arrives still reaches them ([`LocalCommit`]'s drop).
    pub fn local_commit(&self, session: &str, key: String) -> LocalCommit {
        LocalCommit {
            shard: self.shards[shard_index(session, self.shards.len())].clone(),
            key,
            settled: false,
        }
    }
}

impl LocalCommit {
    /// The script committed `messages` at `first` and on, at `at_ms`:
    /// handed to this instance's readers of the stream, if it has any.
    pub fn committed(mut self, first: Seq, at_ms: u64, messages: Vec<Bytes>) {
        self.settled = true;
        self.shard.offer(&self.key, first, at_ms, messages);
    }

    /// The script refused (no live session or stream, not the owner):
    /// nothing was committed, nothing to hand over.
    pub fn refused(mut self) {
        self.settled = true;
    }
}

impl Drop for LocalCommit {
    /// Not settled: the commit may have happened unseen (Redis did not
    /// answer, the append was dropped while waiting), so the stream is
    /// read from what the shard has read, now and [`RECHECK`] later. A
    /// stream not followed here costs nothing.
    fn drop(&mut self) {
        if self.settled || !self.shard.mark(&self.key) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (shard, key) = (self.shard.clone(), std::mem::take(&mut self.key));
            rt.spawn(async move {
                tokio::time::sleep(RECHECK).await;
                shard.mark(&key);
            });
        }
    }
}
