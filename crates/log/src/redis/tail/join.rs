//! A new subscriber joining its shard: registered as its stream's follower
//! and bounded in one script ([`Tails::prepare`], then the script), then
//! joined ([`Tails::join`]), its stream read on joining only when something
//! may have passed it by in between.
//!
//! Registered and bounded at one instant in Redis, every commit is either
//! at or below the head the script returns, or rings this instance (on one
//! server inside the commit's own script; on a cluster or with replicas the
//! appending instance rings after it, and a ring lost there is made good by
//! the safety reads, [`super::poll`]; this instance's own commits from the
//! script's reply, [`super::local`]). What
//! rings it before the stream is in its shard is not lost: from prepare to
//! join the stream has a [`Joiners`] entry in its shard, and the stream is
//! read once on joining if, meanwhile,
//!
//! - a wake-up named it (`Shard::mark`, `Shard::offer`);
//! - wake-ups were in doubt (`Shard::mark_all`: the wake stream unreadable,
//!   lost or trimmed; its resync registers the joining streams again, as
//!   it does the followed ones, from [`Shard::keys`]);
//! - the shard followed it at some point (at prepare, or joined by another
//!   subscriber), so the shard may have taken a wake-up for it and let the
//!   stream go before this subscriber joined.
//!
//! A session that ends in between ends its joining subscribers at once.

use std::sync::Arc;

use super::super::layout::Layout;
use super::{bell, shard_index, Fanout, Shard, ShardState, Sub, Tails};
use crate::subscription::{EndReason, Feed};
use crate::{Seq, Subscription};

/// The subscribers of one stream between prepare and join.
pub(super) struct Joiners {
    /// The stream's session (an end in between ends them).
    pub session: String,
    /// How many.
    pub count: usize,
    /// The stream is read on joining.
    pub read: bool,
    /// The session ended in between.
    pub ended: bool,
}

impl ShardState {
    /// A wake-up for `key`, which this shard does not follow: `true` if a
    /// subscriber is joining it (read once it has; on a polled tail the
    /// registration is kept).
    pub(super) fn stray(&mut self, key: &str) -> bool {
        match self.joining.get_mut(key) {
            Some(j) => {
                j.read = true;
                true
            }
            None => false,
        }
    }
}

impl Tails {
    /// Prepares a new subscriber of `key` (the events of `session`): its
    /// place among the stream's joiners, and this instance's registration
    /// as the stream's follower, for the script that reads the subscriber's
    /// bounds to make in the same step ([`Joining::registration`]); then
    /// [`Tails::join`]. Every subscriber registers (an idempotent `SADD`
    /// inside the script): a stream followed here now may be let go before
    /// the subscriber joins.
    pub async fn prepare(&self, session: &str, key: String) -> Joining {
        let shard = self.shards[shard_index(session, self.shards.len())].clone();
        // Before the first read: an end after it is not missed.
        self.endings.start(&self.shards, &self.closed).await;
        self.bell
            .start(&self.conn, &self.shards, &self.closed)
            .await;
        let registration = self.bell.registration(&key);
        {
            let mut st = shard.lock();
            let followed = st.streams.contains_key(&key);
            let j = st.joining.entry(key.clone()).or_insert_with(|| Joiners {
                session: session.to_owned(),
                count: 0,
                read: false,
                ended: false,
            });
            j.count += 1;
            j.read |= followed || registration.is_none();
        }
        Joining {
            shard,
            key,
            registration,
            joined: false,
        }
    }

    /// Joins a subscriber prepared by [`Tails::prepare`] to its shard, with
    /// `head` the commit point its script read: returns the commit point
    /// `C` and the subscription of every event after it.
    pub fn join(
        &self,
        mut joining: Joining,
        session: &str,
        state_key: String,
        head: Seq,
        layout: Layout,
    ) -> (Seq, Subscription) {
        joining.joined = true;
        let shard = joining.shard.clone();
        let key = std::mem::take(&mut joining.key);
        let (c, start, read, sub) = {
            let mut st = shard.lock();
            let (to_read, ended) = leave(&mut st, &key);
            if ended {
                let (feed, sub) = Feed::pair(shard.capacity, head);
                feed.end(EndReason::SessionEnded);
                return (head, sub);
            }
            let new_stream = !st.streams.contains_key(&key);
            let read = new_stream && to_read;
            if new_stream {
                // Followed from now on: another joiner of it may find it let
                // go again, with a wake-up taken meanwhile.
                if let Some(others) = st.joining.get_mut(&key) {
                    others.read = true;
                }
            }
            if read {
                st.dirty.insert(key.clone());
            }
            let f = st.streams.entry(key).or_insert_with(|| Fanout {
                session: session.to_owned(),
                state_key,
                layout,
                last: head,
                subs: Vec::new(),
            });
            let c = head.max(f.last);
            let (feed, sub) = Feed::pair(shard.capacity, c);
            f.subs.push(Sub { feed, after: c });
            let start = !st.running;
            st.running = true;
            (c, start, read, sub)
        };
        // In the shard now: a reform of the member form from here on sees it.
        if let Some(r) = &joining.registration {
            self.bell.registered_under(r.form);
        }
        if start {
            tokio::spawn(shard.clone().poll());
        } else if read {
            shard.notify.notify_one();
        }
        (c, sub)
    }
}

/// Takes one joiner of `key` off its entry: whether its stream is to be
/// read on joining, and whether its session ended meanwhile.
fn leave(st: &mut ShardState, key: &str) -> (bool, bool) {
    let Some(j) = st.joining.get_mut(key) else {
        // Not reached (an entry lives while it has joiners): read, to be safe.
        return (true, false);
    };
    j.count -= 1;
    let seen = (j.read, j.ended);
    if j.count == 0 {
        st.joining.remove(key);
    }
    seen
}

/// A new subscriber between [`Tails::prepare`] and [`Tails::join`]; one
/// dropped before it joined (its script failed, its request went away)
/// leaves the stream's joiners.
pub(in crate::redis) struct Joining {
    shard: Arc<Shard>,
    key: String,
    registration: Option<bell::Registration>,
    joined: bool,
}

impl Joining {
    /// The follower set and member the bounds script registers (`None` for
    /// a key that is not a session's stream).
    pub fn registration(&self) -> Option<(&str, &str)> {
        self.registration
            .as_ref()
            .map(|r| (r.followers.as_str(), r.member.as_str()))
    }
}

impl Drop for Joining {
    fn drop(&mut self) {
        if !self.joined {
            leave(&mut self.shard.lock(), &self.key);
        }
    }
}
