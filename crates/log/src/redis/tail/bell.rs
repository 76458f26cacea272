//! Wake-ups for the tail, so that an event costs its readers' instances a
//! read of the one stream it was appended to, whatever the number of
//! streams they follow, and an idle followed stream a safety read per
//! safety interval ([`super::poll`], 1 s growing to 30 s).
//!
//! Each instance has one wake stream, `mcpr:wake:{NONCE}`. A shard that
//! starts following a stream registers `WAKE|STREAM` in the session's
//! follower set `mcpr:{SESSION}:f` (the session's slot). Once an append is
//! committed, each follower's wake stream gets the stream's key (`XADD
//! NOMKSTREAM`: a wake stream that expired with its instance is not
//! recreated, and its registration is dropped): on one server without
//! replicas inside the append script itself, in the commit's own round trip
//! (`append.lua`); on a cluster, where the wake streams live in other
//! slots, and after a `WAIT` for replicas, by the appending instance right
//! after ([`ring`]). Each instance blocks on its own wake stream on a
//! connection of its own and marks the named streams for an immediate read.
//!
//! Wake-ups only shorten the wait: every read is from the stream's own last
//! seq, so a lost wake-up (an instance dying between its commit and the
//! `XADD`, a failover, a wake stream trimmed before it was read) delays
//! events until the next safety read, never skips them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::super::conn::Conn;
use super::blocking::Source;
use super::Shard;

/// How long a wake stream outlives its instance's last refresh.
const TTL_MS: u64 = 600_000;
/// How often the wake stream's expiry is pushed back.
const REFRESH: Duration = Duration::from_secs(60);
/// How long one blocking read of the wake stream waits.
const BLOCK_MS: u64 = 1000;
/// Entries a wake stream keeps (enough for a burst between two reads).
const MAXLEN: usize = 4096;

/// The follower set of the session whose keys start with `prefix` (`mcpr:{id}`).
pub(in crate::redis) fn followers_key(prefix: &str) -> String {
    format!("{prefix}:f")
}

/// This instance's wake stream and the task that reads it.
pub(super) struct Bell {
    /// `mcpr:wake:{NONCE}`.
    pub key: String,
    source: Source,
    /// Set once the wake stream exists and its reading task runs. A
    /// registration must never be visible before its wake stream exists: a
    /// commit in between would find no stream, take the instance for dead
    /// and drop the registration, leaving only the safety reads.
    started: tokio::sync::OnceCell<()>,
    /// Set when the log's tails are dropped: the reading task ends.
    stopped: AtomicBool,
}

impl Bell {
    pub fn new(source: Source, nonce: u64) -> Self {
        Self {
            key: format!("mcpr:wake:{{{nonce:016x}}}"),
            source,
            started: tokio::sync::OnceCell::new(),
            stopped: AtomicBool::new(false),
        }
    }

    /// Ends the reading task (within one blocking read).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    fn member(&self, stream: &str) -> String {
        format!("{}|{stream}", self.key)
    }

    /// Registers this instance as a follower of `stream`, and starts
    /// reading wake-ups if not yet.
    pub async fn follow(
        self: &Arc<Self>,
        conn: &Conn,
        stream: &str,
        shards: &[Arc<Shard>],
        closed: &Arc<AtomicBool>,
    ) {
        self.started
            .get_or_init(|| async {
                let last = self.create(conn).await.unwrap_or_else(|| "$".to_owned());
                tokio::spawn(
                    self.clone()
                        .run(conn.clone(), shards.to_vec(), closed.clone(), last),
                );
            })
            .await;
        let Some(prefix) = prefix_of(stream) else {
            return;
        };
        let _: Result<i64, _> = redis::cmd("SADD")
            .arg(followers_key(&prefix))
            .arg(self.member(stream))
            .query_async(&mut conn.clone())
            .await;
    }

    /// Drops this instance's registration for `stream` (best effort: a stale
    /// one costs a wasted wake-up, which drops it).
    pub async fn unfollow(&self, conn: &Conn, stream: &str) {
        let Some(prefix) = prefix_of(stream) else {
            return;
        };
        let _: Result<i64, _> = redis::cmd("SREM")
            .arg(followers_key(&prefix))
            .arg(self.member(stream))
            .query_async(&mut conn.clone())
            .await;
    }

    /// Creates (or refreshes) the wake stream and pushes back its expiry:
    /// the stream must exist for `NOMKSTREAM` wake-ups to land. Returns the
    /// id of the entry it added, from which a read misses no later wake-up.
    async fn create(&self, conn: &Conn) -> Option<String> {
        let (id, _): (String, i64) = redis::pipe()
            .cmd("XADD")
            .arg(&self.key)
            .arg("MAXLEN")
            .arg("~")
            .arg(MAXLEN)
            .arg("*")
            .arg("k")
            .arg("")
            .cmd("PEXPIRE")
            .arg(&self.key)
            .arg(TTL_MS)
            .query_async(&mut conn.clone())
            .await
            .ok()?;
        Some(id)
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
        let mut refreshed = (last != "$").then(Instant::now);
        let mut blocking = None;
        while !closed.load(Ordering::Relaxed) && !self.stopped.load(Ordering::Relaxed) {
            if refreshed.is_none_or(|t| t.elapsed() >= REFRESH) {
                if let Some(id) = self.create(&conn).await {
                    refreshed = Some(Instant::now());
                    if last == "$" {
                        last = id;
                    }
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
                    refreshed = None;
                    // Re-read from the new stream's first entry (the safety
                    // reads cover what a failover lost meanwhile).
                    last = "$".to_owned();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            for (_, entries) in super::reply::by_key(&reply) {
                if let Some(id) = super::reply::last_id(entries) {
                    last = id;
                }
                for stream in super::reply::field_values(entries, b"k") {
                    let Some(session) = session_of(&stream) else {
                        continue;
                    };
                    let shard = &shards[super::shard_index(session, shards.len())];
                    if !shard.mark(&stream) {
                        self.unfollow(&conn, &stream).await;
                    }
                }
            }
        }
    }
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

/// After a commit on `stream` (of the session whose keys start with
/// `prefix`): wakes every instance that follows it.
pub(in crate::redis) async fn ring(conn: Conn, prefix: String, stream: String) {
    let fkey = followers_key(&prefix);
    let Ok(members) = redis::cmd("SMEMBERS")
        .arg(&fkey)
        .query_async::<Vec<String>>(&mut conn.clone())
        .await
    else {
        return;
    };
    for m in members {
        let Some((wake, s)) = m.split_once('|') else {
            continue;
        };
        if s != stream {
            continue;
        }
        let added: Result<Option<String>, _> = redis::cmd("XADD")
            .arg(wake)
            .arg("NOMKSTREAM")
            .arg("MAXLEN")
            .arg("~")
            .arg(MAXLEN)
            .arg("*")
            .arg("k")
            .arg(s)
            .query_async(&mut conn.clone())
            .await;
        if let Ok(None) = added {
            // Its instance is gone: forget the registration.
            let _: Result<i64, _> = redis::cmd("SREM")
                .arg(&fkey)
                .arg(&m)
                .query_async(&mut conn.clone())
                .await;
        }
    }
}
