//! Following Redis streams for this instance's readers: a few shards of
//! streams read for every local subscriber, instead of a Redis connection
//! per reader, woken by the commits of the streams they follow.
//!
//! Each followed stream has a [`Fanout`] whose `last` is the seq it has read
//! up to. A subscriber joins with the commit point `C = max(head, last)`
//! (both committed) and receives only events after its own cursor, so it
//! cannot miss what the shard read before it joined nor see anything twice.
//! The shard reads every stream from its `last`, so nothing appended
//! between two reads is missed either.
//!
//! A shard reads with non-blocking single-key reads ([`poll`]): the streams a
//! commit woke ([`bell`]: the commit adds the stream's key to the wake stream
//! of each instance registered as its follower, inside the append script on
//! one server, and this instance's own commits come from the script's reply,
//! [`local`]) and the rare new stream that something may have passed by
//! while its reader joined ([`join`]), sent concurrently (pipelined per
//! node); on a cluster, or with replicas, where the ring comes after the
//! commit, also every followed stream once per safety period (growing while
//! wake-ups arrive in order). On one server without replicas a wake-up is
//! lost only with its wake stream, which [`bell`] watches, so an idle
//! followed stream costs nothing there. So an event costs Redis a read of its
//! own stream per following instance, not a re-sent blocking read of every
//! stream a shard follows (which grew with the sessions: 94 % of Redis's time
//! at 20,000 sessions, benches/results/redis-path.md). Session ends are
//! pushed to every instance ([`endings`]), with a check every
//! [`END_BACKSTOP`] behind them.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::conn::Conn;
use super::layout::Layout;
use super::reply;

use crate::subscription::{EndReason, Feed};
use crate::{Event, Seq};

mod bell;
mod blocking;
mod endings;
mod hand_on;
mod join;
mod local;
mod members;
mod poll;

pub(super) use endings::{notice as end_notice, ENDINGS};
pub(super) use members::{followers_key, ring};

/// Shards per instance: each a lock over the streams it follows and a task
/// that reads them, so delivering to many readers spreads over tasks and
/// no one lock is held by every commit. No shard holds a connection of its
/// own: reads go over the shared, pipelined one.
const SHARDS: usize = 16;

/// `XREAD COUNT 512 BLOCK block_ms STREAMS`: how a blocking read (of
/// session end notices) begins (its keys, then their ids, follow).
fn xread_blocking(block_ms: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("XREAD");
    cmd.arg("COUNT")
        .arg(512)
        .arg("BLOCK")
        .arg(block_ms)
        .arg("STREAMS");
    cmd
}
/// The longest pause between looks at a stream whose newest events are not committed yet.
const MAX_HOLD_POLL: Duration = Duration::from_millis(100);
/// How often the sessions of followed streams are checked for having
/// ended, a backstop: ends are pushed ([`endings`]), this finds a lost notice.
const END_BACKSTOP: Duration = Duration::from_secs(30);

struct Sub {
    feed: Feed,
    /// The last seq this subscriber has (or needs not get).
    after: Seq,
}

/// One followed stream.
struct Fanout {
    session: String,
    /// The stream's state hash, whose `c` is the committed head.
    state_key: String,
    /// How its entries are numbered.
    layout: Layout,
    /// The seq the shard has read this stream up to.
    last: Seq,
    subs: Vec<Sub>,
}

impl Fanout {
    /// Hands events on; `false` when the stream must be dropped (a gap:
    /// entries were trimmed before the shard read them).
    /// Events above `committed` stay in Redis until they are committed.
    fn deliver(&mut self, events: Vec<Event>, committed: Seq) -> bool {
        for ev in events {
            if ev.seq <= self.last {
                continue;
            }
            if ev.seq > committed {
                break;
            }
            if ev.seq != self.last + 1 {
                // Never skip: every reader ends and resumes from its cursor (a 409 if truncated).
                self.end_all(EndReason::Lagged);
                return false;
            }
            self.last = ev.seq;
            self.subs.retain_mut(|s| {
                if ev.seq <= s.after {
                    return true;
                }
                s.after = ev.seq;
                s.feed.offer(&ev)
            });
        }
        true
    }

    fn end_all(&mut self, why: EndReason) {
        for s in self.subs.drain(..) {
            s.feed.end(why);
        }
    }
}

#[derive(Default)]
struct ShardState {
    running: bool,
    /// By stream key (hashed with foldhash: an instance opening sessions
    /// grows these maps, and SipHash's rehashing of the keys was a few
    /// percent of an open's CPU).
    streams: foldhash::HashMap<String, Fanout>,
    /// Streams to read at once (woken, read to their `COUNT`, or joined
    /// when something may have passed their new reader by).
    dirty: foldhash::HashSet<String>,
    /// Streams with subscribers between prepare and join ([`join`]).
    joining: foldhash::HashMap<String, join::Joiners>,
}

struct Shard {
    conn: Conn,
    /// Wakes the shard's task: a stream to read at once (woken).
    notify: tokio::sync::Notify,
    capacity: usize,
    closed: Arc<AtomicBool>,
    /// Appends are committed only after `WAIT` (replicas): deliver up to `c`, not to what is in the stream.
    strict: bool,
    /// The longest interval between safety reads ([`poll`]), in ms.
    safety_max_ms: Arc<AtomicU64>,
    /// Commits are pushed to this instance in their own step (one server
    /// without replicas: the append script rings): no safety reads, no
    /// periodic check for ended sessions; a doubt is resolved when it
    /// arises instead ([`bell`], [`endings`]).
    pushed: bool,
    /// Set when end notices may have been missed (their reader reconnected,
    /// or found the stream trimmed past what it read): the shard checks its
    /// sessions once.
    ends_doubt: AtomicBool,
    state: Mutex<ShardState>,
}

/// Every stream this instance follows for its readers.
pub(super) struct Tails {
    shards: Vec<Arc<Shard>>,
    /// This instance's wake stream.
    bell: Arc<bell::Bell>,
    /// The reader of session end notices.
    endings: endings::Endings,
    conn: Conn,
    closed: Arc<AtomicBool>,
    safety_max_ms: Arc<AtomicU64>,
}

impl Drop for Tails {
    fn drop(&mut self) {
        self.bell.stop();
        self.endings.stop();
    }
}

/// The shard that follows the streams of `session`.
fn shard_index(session: &str, shards: usize) -> usize {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    session.hash(&mut h);
    h.finish() as usize % shards
}

impl Tails {
    /// `client` on one server, or `cluster`: where the blocking reads of
    /// wake-ups and session end notices connect.
    pub fn new(
        client: Option<redis::Client>,
        cluster: Option<redis::cluster::ClusterClient>,
        conn: Conn,
        capacity: usize,
        closed: Arc<AtomicBool>,
        strict: bool,
        touched: Arc<super::touched::Touched>,
    ) -> Self {
        let nonce = members::new_nonce();
        let source = match (&client, &cluster) {
            (_, Some(c)) => blocking::Source::Cluster(c.clone()),
            (Some(c), None) => blocking::Source::Server(c.clone()),
            (None, None) => unreachable!("a tail reads one server or a cluster"),
        };
        // One server whose commit is the append script: the script rings,
        // so wake-ups are lost only with their stream, which is watched.
        let pushed = cluster.is_none() && !strict;
        let bell = Arc::new(bell::Bell::new(source.clone(), nonce, pushed));
        let safety_max_ms = Arc::new(AtomicU64::new(poll::SAFETY_MAX.as_millis() as u64));
        let shards = (0..SHARDS)
            .map(|_| {
                Arc::new(Shard {
                    conn: conn.clone(),
                    notify: tokio::sync::Notify::new(),
                    capacity,
                    closed: closed.clone(),
                    strict,
                    safety_max_ms: safety_max_ms.clone(),
                    pushed,
                    ends_doubt: AtomicBool::new(false),
                    state: Mutex::new(ShardState::default()),
                })
            })
            .collect();
        Self {
            shards,
            bell,
            endings: endings::Endings::new(source, touched, pushed),
            conn,
            closed,
            safety_max_ms,
        }
    }

    /// This instance's wake stream (`mcpr:wake:{NONCE}`).
    pub fn wake_key(&self) -> &str {
        &self.bell.key
    }

    /// The log closes: every shard's task wakes at once, finds it closed
    /// and ends its readers (`Closed`).
    pub fn close(&self) {
        for s in &self.shards {
            s.notify.notify_one();
        }
    }

    /// Follows the notices of session ends (once): from then on an end on
    /// any instance reaches this one's readers and touches.
    pub async fn follow_endings(&self) {
        self.endings.start(&self.shards, &self.closed).await;
    }

    /// Whether every live instance reads the seq-id layout, as last checked
    /// (`layout.rs`); starts the wake stream's reader, whose first step is
    /// the check, if it is not running yet.
    pub async fn fleet_reads_seq_ids(&self) -> bool {
        self.bell
            .start(&self.conn, &self.shards, &self.closed)
            .await;
        self.bell.seq_ids.load(Ordering::SeqCst)
    }

    /// Sets the longest interval between the safety reads of followed
    /// streams on a cluster ([`poll`]): the bound on the delay a lost
    /// wake-up causes once the interval has grown to it.
    pub fn set_safety_read_max(&self, max: Duration) {
        let ms = max.max(poll::SAFETY_MIN).as_millis() as u64;
        self.safety_max_ms.store(ms, Ordering::Relaxed);
    }

    /// For tests: how often the wake stream's expiry is pushed back and
    /// the stream checked ([`bell::Bell::pace`]).
    pub fn pace_wake_stream(&self, refresh: Duration, check: Duration) {
        self.bell.pace(refresh, check);
    }
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks `key` for an immediate read; `false` if this shard does not follow it.
    fn mark(&self, key: &str) -> bool {
        let mut st = self.lock();
        if !st.streams.contains_key(key) {
            return st.stray(key);
        }
        st.dirty.insert(key.to_owned());
        drop(st);
        self.notify.notify_one();
        true
    }

    /// Hands on the events a wake-up carried (`first` and on, committed:
    /// one server, whose commit is the script that rang) or this instance's
    /// own commit ([`local`], once committed in every topology), unless they do
    /// not follow what the shard has read: then the stream is marked for a
    /// read from its last seq, which brings them and anything before them.
    /// `false` if this shard does not follow the stream.
    fn offer(&self, key: &str, first: Seq, at_ms: u64, messages: Vec<Bytes>) -> bool {
        let mut st = self.lock();
        let Some(f) = st.streams.get_mut(key) else {
            return st.stray(key);
        };
        if first > f.last.saturating_add(1) {
            st.dirty.insert(key.to_owned());
            drop(st);
            self.notify.notify_one();
            return true;
        }
        let events = messages
            .into_iter()
            .zip(first..)
            .map(|(message, seq)| Event {
                seq,
                at_ms,
                message,
            })
            .collect();
        if !f.deliver(events, Seq::MAX) {
            st.streams.remove(key);
        }
        true
    }

    /// The keys of the streams this shard follows.
    /// Those with a subscriber joining are among them: registered by its
    /// script, they are registered again with the rest on a resync or a
    /// reform.
    fn keys(&self) -> Vec<String> {
        let st = self.lock();
        let joining_only = st.joining.keys().filter(|k| !st.streams.contains_key(*k));
        st.streams.keys().chain(joining_only).cloned().collect()
    }

    /// Whether this shard follows `key`, or a subscriber is joining it.
    fn follows(&self, key: &str) -> bool {
        let st = self.lock();
        st.streams.contains_key(key) || st.joining.contains_key(key)
    }

    /// Marks every followed stream for an immediate read, and every joining
    /// one for a read on joining: wake-ups may have been lost (the wake
    /// stream was unreadable, gone or trimmed).
    fn mark_all(&self) {
        let mut guard = self.lock();
        let st = &mut *guard;
        st.dirty.extend(st.streams.keys().cloned());
        for j in st.joining.values_mut() {
            j.read = true;
        }
        drop(guard);
        self.notify.notify_one();
    }

    /// Ends the readers of every stream of `session` (it ended) and stops
    /// following them.
    fn end_session(&self, session: &str) {
        let mut st = self.lock();
        for j in st.joining.values_mut() {
            if j.session == session {
                j.ended = true;
            }
        }
        st.streams.retain(|_, f| {
            if f.session == session {
                f.end_all(EndReason::SessionEnded);
                false
            } else {
                true
            }
        });
    }

    /// Ends every subscriber of the shard and stops following anything.
    fn end_everything(&self, why: EndReason) {
        let mut st = self.lock();
        for (_, mut f) in st.streams.drain() {
            f.end_all(why);
        }
        st.running = false;
    }

    /// What to read, from which entry id, after dropping the streams nobody reads
    /// any more; `None` when the shard stops (closed, or nothing to follow).
    fn followed(&self) -> Option<Vec<(String, String)>> {
        let mut st = self.lock();
        if self.closed.load(Ordering::Relaxed) {
            drop(st);
            self.end_everything(EndReason::Closed);
            return None;
        }
        st.streams.retain(|_, f| {
            f.subs.retain(|s| !s.feed.is_closed());
            !f.subs.is_empty()
        });
        if st.streams.is_empty() {
            st.running = false;
            return None;
        }
        Some(
            st.streams
                .iter()
                .map(|(k, f)| (k.clone(), f.layout.id(f.last + 1)))
                .collect(),
        )
    }

    /// The streams marked for an immediate read, from which entry id, dropping those
    /// nobody reads any more; `None` when the shard stops (closed).
    fn marked(&self) -> Option<Vec<(String, String)>> {
        if self.closed.load(Ordering::Relaxed) {
            self.end_everything(EndReason::Closed);
            return None;
        }
        let mut st = self.lock();
        let dirty = std::mem::take(&mut st.dirty);
        let mut out = Vec::with_capacity(dirty.len());
        for k in dirty {
            let Some(f) = st.streams.get_mut(&k) else {
                continue;
            };
            f.subs.retain(|s| !s.feed.is_closed());
            if f.subs.is_empty() {
                st.streams.remove(&k);
            } else {
                let from = f.layout.id(f.last + 1);
                out.push((k, from));
            }
        }
        Some(out)
    }
}
