//! Wake-ups for the tail, so that an event costs its readers' instances a
//! read of the one stream it was appended to, whatever the number of
//! streams they follow, and an idle followed stream a safety read per
//! safety interval ([`super::poll`], 1 s growing to 30 s).
//!
//! Each instance has one wake stream, `mcpr:wake:{NONCE}`. Each new reader of
//! a stream registers its instance in the session's follower set
//! `mcpr:{SESSION}:f` (the session's slot; an `SADD` of a member already
//! there changes nothing), in the script that reads the reader's bounds
//! (`bounds.lua`: one round trip, and at one instant with the head, so the
//! stream is read on joining only when something may have passed the reader
//! by, [`super::join`]), as `WAKE|STREAM` or, while every live instance reads
//! it, in a compact form ([`super::members`]). Once an append is committed,
//! each follower's wake stream gets the stream's key (`XADD NOMKSTREAM`: a
//! wake stream that expired with its instance is not recreated, and its
//! registration is dropped): on one server without replicas inside the append
//! script itself, in the commit's own round trip (`append.lua`); on a
//! cluster, where the wake streams live in other slots, and after a `WAIT`
//! for replicas, by the appending instance right after ([`members::ring`]).
//! Either way the appending instance's own wake stream is left out: it
//! hands the commit to its own readers from the script's reply
//! ([`super::local`]). Each instance blocks on its own wake stream on a
//! connection of its own and marks the named streams for an immediate read.
//!
//! On one server without replicas a small commit (at most 1 KiB, 16
//! messages: a wake stream nobody reads any more, its instance gone,
//! holds at most 16,384 of them until it expires) carries its events in
//! the wake-up (`s` the first seq, `t` the time, one `m` per message): the
//! follower hands them on at once, with no read of the stream, when they
//! follow what it has read, and reads the stream from its last seq
//! otherwise ([`Shard::offer`]). So an event costs its readers' instance no
//! command beyond the blocking read of its wake stream, which brings many
//! events at a time under load.
//!
//! Wake-ups only shorten the wait: every read is from the stream's own last
//! seq, so a lost wake-up (an instance dying between its commit and the
//! `XADD`, a failover, a wake stream trimmed before it was read) delays
//! events, never skips them: until the next safety read on a cluster or with
//! replicas (sooner: a doubt has every followed stream read once); on one
//! server, where there are none, until this reader notices the doubt
//! (within [`CHECK_EVERY`] and one blocking read) and reads every stream it
//! follows or is joining ([`Bell::resync`]). A wake stream found gone is
//! resynced on every tail: the commits meanwhile dropped this instance's
//! registrations, which the resync makes again (on a cluster or with
//! replicas too, whose safety reads would otherwise be the only news of
//! those streams for as long as they are followed). Its periodic refresh
//! only pushes back the wake stream's expiry: made again there, the
//! dropped registrations would stay dropped and the check find nothing
//! amiss.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::super::conn::Conn;
use super::blocking::Source;
use super::members::{self, followers_key};
use super::Shard;

mod form;
mod upkeep;

use upkeep::Health;

/// How long a wake stream outlives its instance's last refresh.
const TTL_MS: u64 = 600_000;
/// How often the wake stream's expiry is pushed back.
const REFRESH: Duration = Duration::from_secs(60);
/// How long one blocking read of the wake stream waits.
const BLOCK_MS: u64 = 1000;
/// Entries a wake stream keeps at most (the commits' `XADD`s cap it at about
/// this; its reader trims what it has read): past it, unread wake-ups would
/// be lost, which the reader notices ([`Bell::sound`]).
pub(in crate::redis) const MAXLEN: usize = 16_384;
/// How often a reader makes sure no wake-up was lost (on one server,
/// where the commit's own script rings, they are its only news) and no
/// registration with them:
/// its wake stream still exists and nothing unread was trimmed from it.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// This instance's wake stream and the task that reads it.
pub(super) struct Bell {
    /// `mcpr:wake:{NONCE}`.
    pub key: String,
    /// The 12 digits of the wake stream's name, which compact follower
    /// members carry.
    nonce: u64,
    /// Every live instance reads compact follower members: registrations
    /// take that form ([`members::fleet_generation`]).
    compact: AtomicBool,
    /// Every live instance reads sessions of the seq-id layout
    /// (`layout.rs`), as last checked: new sessions may take it.
    pub seq_ids: AtomicBool,
    /// Counts the changes of `compact`: a registration made under an older
    /// count may be in the old form and missed by the [`Bell::reform`] of
    /// the change (its stream joined its shard after the reform listed
    /// them), so it asks for another ([`Bell::registered_under`]).
    form: AtomicU64,
    /// The form changed: what this instance follows is registered again in
    /// the new form (and, if that is the named form, read once).
    reform: AtomicBool,
    source: Source,
    /// Set once the wake stream exists and its reading task runs. A
    /// registration must never be visible before its wake stream exists: a
    /// commit in between would find no stream, take the instance for dead
    /// and drop the registration, leaving only the safety reads.
    started: tokio::sync::OnceCell<()>,
    /// Set when the log's tails are dropped: the reading task ends.
    stopped: AtomicBool,
    /// Wake-ups are this instance's only news of commits (one server
    /// without replicas: no safety reads), so a wake-up naming a stream
    /// not followed here keeps its registration (see [`Bell::run`]).
    pushed: bool,
    /// A doubt to resolve ([`Bell::resync`]): the wake stream was
    /// unreadable, gone, or trimmed past what was read.
    resync: AtomicBool,
    /// Ms between pushes of the expiry ([`REFRESH`]); tests steer it
    /// ([`Bell::pace`]).
    refresh_ms: AtomicU64,
    /// Ms between checks of the wake stream ([`CHECK_EVERY`]); tests steer
    /// it ([`Bell::pace`]).
    check_ms: AtomicU64,
}

/// A follower registration for a new reader's stream, made by the script
/// that reads its bounds ([`Bell::registration`]).
pub struct Registration {
    /// The session's follower set, `mcpr:{SESSION}:f`.
    pub followers: String,
    /// This instance's member for the stream.
    pub member: String,
    /// The form count it was taken under.
    pub form: u64,
}

impl Bell {
    /// `pushed`: wake-ups are the only news of commits (no safety reads).
    pub fn new(source: Source, nonce: u64, pushed: bool) -> Self {
        Self {
            key: members::wake_key(nonce),
            nonce,
            compact: AtomicBool::new(false),
            seq_ids: AtomicBool::new(false),
            form: AtomicU64::new(0),
            reform: AtomicBool::new(false),
            source,
            started: tokio::sync::OnceCell::new(),
            stopped: AtomicBool::new(false),
            pushed,
            resync: AtomicBool::new(false),
            refresh_ms: AtomicU64::new(REFRESH.as_millis() as u64),
            check_ms: AtomicU64::new(CHECK_EVERY.as_millis() as u64),
        }
    }

    /// For tests: the expiry pushed back every `refresh`, the wake stream
    /// checked every `check`, so a refresh can fall between its loss and
    /// the check.
    pub fn pace(&self, refresh: Duration, check: Duration) {
        self.refresh_ms
            .store(refresh.as_millis() as u64, Ordering::Relaxed);
        self.check_ms
            .store(check.as_millis() as u64, Ordering::Relaxed);
    }

    /// Ends the reading task (within one blocking read).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// This instance's member for `stream` in the form given: compact when
    /// `compact` and the stream's number fits, else named.
    fn member(&self, stream: &str, compact: bool) -> String {
        compact
            .then(|| members::compact(self.nonce, stream))
            .flatten()
            .unwrap_or_else(|| members::named(self.nonce, stream))
    }

    /// What registers this instance again as a follower of `stream`, while
    /// its session is live: a resync or reform may list a stream whose
    /// session ended a moment ago, and its follower set, made again after
    /// the end deleted it, would stay for good. `None` for a key that is
    /// not a session's stream.
    fn register(&self, stream: &str) -> Option<redis::Cmd> {
        let prefix = prefix_of(stream)?;
        // Sent whole (about 400 bytes) rather than loaded: a resync or a
        // reform is rare, and comes when Redis may have lost its scripts.
        let mut c = redis::cmd("EVAL");
        c.arg(crate::redis::scripts::SADD_IF_LIVE)
            .arg(2)
            .arg(format!("{prefix}:s"))
            .arg(followers_key(&prefix))
            .arg(self.member(stream, self.compact.load(Ordering::SeqCst)));
        Some(c)
    }

    /// Starts reading wake-ups if not yet: the wake stream exists before
    /// any registration is made (a commit finding no wake stream takes the
    /// instance for dead and drops its registration).
    pub async fn start(
        self: &Arc<Self>,
        conn: &Conn,
        shards: &[Arc<Shard>],
        closed: &Arc<AtomicBool>,
    ) {
        self.started
            .get_or_init(|| async {
                self.check_fleet(conn).await;
                self.reform.store(false, Ordering::SeqCst);
                let last = self.create(conn).await.unwrap_or_else(|| "$".to_owned());
                tokio::spawn(
                    self.clone()
                        .run(conn.clone(), shards.to_vec(), closed.clone(), last),
                );
            })
            .await;
    }

    /// What registers this instance as a follower of `stream`, for the
    /// script that reads a new reader's bounds (`bounds.lua`, in the same
    /// step): the session's follower set and this instance's member, in the
    /// form now in use, with the form count it was taken under (for
    /// [`Bell::registered_under`] once the stream is in its shard). `None`
    /// for a key that is not a session's stream. After [`Bell::start`].
    pub fn registration(&self, stream: &str) -> Option<Registration> {
        // Read before the form is: a change in between shows as a new count.
        let form = self.form.load(Ordering::SeqCst);
        Some(Registration {
            followers: followers_key(&prefix_of(stream)?),
            member: self.member(stream, self.compact.load(Ordering::SeqCst)),
            form,
        })
    }

    /// Drops this instance's registration for `stream` (best effort: a stale
    /// one costs another instance's commit a wasted wake-up, which drops it
    /// on a polled tail; this instance's own commits skip it).
    pub async fn unfollow(&self, conn: &Conn, stream: &str) {
        let Some(prefix) = prefix_of(stream) else {
            return;
        };
        // Either form: it may have been registered before the form changed.
        // Loaded once (`EVALSHA`): a polled tail drops a registration for
        // each stray wake-up.
        static SCRIPT: std::sync::LazyLock<redis::Script> =
            std::sync::LazyLock::new(|| redis::Script::new(crate::redis::scripts::UNFOLLOW));
        let _: Result<i64, _> = SCRIPT
            .key(format!("{prefix}:s"))
            .key(followers_key(&prefix))
            .arg(self.member(stream, true))
            .arg(self.member(stream, false))
            .invoke_async(&mut conn.clone())
            .await;
    }

    /// Reads wake-ups after `last` until the log closes, marking the named
    /// streams.
    async fn run(
        self: Arc<Self>,
        conn: Conn,
        shards: Vec<Arc<Shard>>,
        closed: Arc<AtomicBool>,
        mut last: String,
    ) {
        // When the expiry was last pushed back (or the stream made).
        let mut refreshed = Instant::now();
        // Not made at the start (Redis did not answer): readers may register
        // meanwhile and commits drop their registrations, finding no wake
        // stream; a resync makes it and registers them again. Every path
        // that leaves the stream in doubt goes through a resync, so the
        // refresh below only pushes back the expiry.
        if last == "$" {
            self.resync.store(true, Ordering::Relaxed);
        }
        let mut blocking = None;
        let mut checked = Instant::now();
        // Between tries of a resync Redis refused (in part: on a cluster one
        // master may refuse while the others answer).
        let mut backoff = Duration::from_millis(200);
        let mut fleet_checked = Instant::now();
        while !closed.load(Ordering::Relaxed) && !self.stopped.load(Ordering::Relaxed) {
            if fleet_checked.elapsed() >= members::CHECK_EVERY {
                fleet_checked = Instant::now();
                self.check_fleet(&conn).await;
            }
            // Not taken: tried again next time round, after this round's
            // wake-ups are read (the followed streams' other members still
            // bring them).
            if self.reform.swap(false, Ordering::SeqCst) && !self.reform(&conn, &shards).await {
                self.reform.store(true, Ordering::SeqCst);
            }
            let every = |ms: &AtomicU64| Duration::from_millis(ms.load(Ordering::Relaxed));
            if self.resync.load(Ordering::Relaxed) || checked.elapsed() >= every(&self.check_ms) {
                checked = Instant::now();
                let doubt = self.resync.swap(false, Ordering::Relaxed)
                    || match self.sound(&conn, &last).await {
                        Health::Sound => false,
                        Health::Gone => true,
                        Health::Unsure if self.pushed => true,
                        // The safety reads bring what lost wake-ups did not;
                        // a read of every followed stream brings it sooner.
                        Health::Unsure => {
                            shards.iter().for_each(|s| s.mark_all());
                            false
                        }
                    };
                if doubt && !self.resync(&conn, &shards, &mut last).await {
                    self.resync.store(true, Ordering::Relaxed);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
                if doubt {
                    refreshed = Instant::now();
                    backoff = Duration::from_millis(200);
                }
            }
            if refreshed.elapsed() >= every(&self.refresh_ms) {
                // A wake stream found gone is a doubt, resolved before the
                // next read.
                match self.extend(&conn).await {
                    Some(true) => refreshed = Instant::now(),
                    Some(false) => {
                        self.resync.store(true, Ordering::Relaxed);
                        continue;
                    }
                    None => {}
                }
            }
            if blocking.is_none() {
                blocking = self.source.connect(BLOCK_MS).await.ok();
            }
            let Some(c) = blocking.as_mut() else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut read = redis::cmd("XREAD");
            read.arg("COUNT")
                .arg(MAXLEN)
                .arg("BLOCK")
                .arg(BLOCK_MS)
                .arg("STREAMS")
                .arg(&self.key)
                .arg(&last);
            let reply: Result<Value, _> = c.query(&read).await;
            let reply = match reply {
                Ok(v) => v,
                Err(e) => {
                    // Redis restarted or stalled, or the wake stream's master
                    // failed over: wake-ups may be lost meanwhile, so every
                    // followed stream is read once now (from its own last
                    // seq), and the safety reads carry on.
                    tracing::debug!(error = %e, "wake stream unreadable");
                    for shard in &shards {
                        shard.mark_all();
                    }
                    blocking = None;
                    if self.pushed {
                        // Wake-ups are the only news here: resynced at
                        // once, then read from the new stream's first entry.
                        last = "$".to_owned();
                        self.resync.store(true, Ordering::Relaxed);
                    }
                    // A polled tail reads on from `last`; a stream lost
                    // with its registrations is the check's to find.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            for (_, entries) in super::reply::by_key(&reply) {
                if let Some(id) = super::reply::last_id(entries) {
                    last = id;
                }
                let mut unfollowed = std::collections::HashSet::new();
                for wake in super::reply::wakes(entries) {
                    let Some(session) = session_of(&wake.stream) else {
                        continue;
                    };
                    let shard = &shards[super::shard_index(session, shards.len())];
                    // A commit that carried its events is handed on from
                    // here, without a read of its stream (one server);
                    // otherwise the stream is marked for a read.
                    let followed = match wake.first {
                        Some(first) if !wake.messages.is_empty() => {
                            shard.offer(&wake.stream, first, wake.at_ms, wake.messages)
                        }
                        _ => shard.mark(&wake.stream),
                    };
                    // A stream neither followed nor joined here: on a polled
                    // tail its registration is dropped. On a pushed tail it
                    // is kept (it goes with the stream's retirement or the
                    // session's end): with no safety read behind it, a
                    // reader whose script registered just before the drop
                    // would wait for wake-ups that never come.
                    if !followed && !self.pushed && unfollowed.insert(wake.stream.clone()) {
                        self.unfollow(&conn, &wake.stream).await;
                        // A reader began to join meanwhile (its script's
                        // SADD before the SREM): registered again, after it.
                        if shard.follows(&wake.stream) {
                            if let Some(register) = self.register(&wake.stream) {
                                let _: Result<i64, _> =
                                    register.query_async(&mut conn.clone()).await;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What drops `members` from the followers of the session whose keys
/// start with `prefix`: its follower set and, in the seq-id layout, field
/// `w` of its hash (`lua/unfollow.lua`; sent whole: a reform is rare).
fn unfollow(prefix: &str, members: &[String]) -> redis::Cmd {
    let mut c = redis::cmd("EVAL");
    c.arg(crate::redis::scripts::UNFOLLOW)
        .arg(2)
        .arg(format!("{prefix}:s"))
        .arg(followers_key(prefix))
        .arg(members);
    c
}

/// `mcpr:{SESSION}` of a stream key `mcpr:{SESSION}:ev:N`.
fn prefix_of(stream: &str) -> Option<String> {
    stream.split_once("}:").map(|(p, _)| format!("{p}}}"))
}

/// `SESSION` of a stream key `mcpr:{SESSION}:ev:N`.
fn session_of(stream: &str) -> Option<&str> {
    stream
        .strip_prefix("mcpr:{")?
        .split_once("}:")
        .map(|(s, _)| s)
}
