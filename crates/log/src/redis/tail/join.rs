//! A new subscriber joining its shard: registered as its stream's follower
//! and bounded in one script, then joined, read only when a wake-up came in
//! between.

use super::{bell, shard_index, Fanout, Sub, Tails};
use crate::subscription::Feed;
use crate::{Seq, Subscription};

impl Tails {
    /// Prepares a new subscriber of `key` (the events of `session`): its
    /// shard, and the registration of this instance as the stream's
    /// follower if the shard does not follow it yet, for the script that
    /// reads the subscriber's bounds to make in the same step
    /// ([`Joining::registration`]); then [`Tails::join`].
    ///
    /// Registered and bounded at one instant, every commit is either at or
    /// below the head the script returns, or rings this instance: the
    /// stream needs no read on joining, unless a wake-up for it came while
    /// it was not in its shard yet (counted by the shard, compared in
    /// [`Tails::join`]).
    pub async fn prepare(&self, session: &str, key: &str) -> Joining {
        let shard = shard_index(session, self.shards.len());
        // Before the first read: an end after it is not missed.
        self.endings.start(&self.shards, &self.closed).await;
        let (followed, missed) = {
            let st = self.shards[shard].lock();
            (st.streams.contains_key(key), st.missed)
        };
        let mut registration = None;
        if !followed {
            self.bell
                .start(&self.conn, &self.shards, &self.closed)
                .await;
            registration = self.bell.registration(key);
        }
        Joining {
            shard,
            registration,
            missed,
        }
    }

    /// Joins a subscriber prepared by [`Tails::prepare`] to its shard, with
    /// `head` the commit point its script read (registering it, if it was
    /// to): returns the commit point `C` and the subscription of every
    /// event after it.
    pub fn join(
        &self,
        joining: Joining,
        session: &str,
        key: String,
        state_key: String,
        head: Seq,
    ) -> (Seq, Subscription) {
        let shard = &self.shards[joining.shard];
        let (c, start, read, sub) = {
            let mut st = shard.lock();
            let new_stream = !st.streams.contains_key(&key);
            // A stream not registered here (the shard let it go since it
            // was prepared) or woken before it joined is read once now.
            let read =
                new_stream && (joining.registration.is_none() || st.missed != joining.missed);
            if read {
                st.dirty.insert(key.clone());
            }
            let f = st.streams.entry(key).or_insert_with(|| Fanout {
                session: session.to_owned(),
                state_key,
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

/// A new subscriber between [`Tails::prepare`] and [`Tails::join`].
pub(in crate::redis) struct Joining {
    shard: usize,
    registration: Option<bell::Registration>,
    /// The shard's count of wake-ups for streams it did not follow, when
    /// prepared.
    missed: u64,
}

impl Joining {
    /// The follower set and member the bounds script registers (`None`:
    /// the stream is followed here already).
    pub fn registration(&self) -> Option<(&str, &str)> {
        self.registration
            .as_ref()
            .map(|r| (r.followers.as_str(), r.member.as_str()))
    }
}
