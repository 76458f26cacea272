//! Session ends pushed to every instance's readers, so that no instance
//! asks Redis each second whether the sessions it follows still live.
//!
//! Ending a session adds its id to the stream `mcpr:endings` (on one server
//! inside the end script, atomically with the end; on a cluster, where the
//! stream is in another slot, by a command right after it). Each instance
//! reads that stream with one blocking `XREAD` on a connection of its own,
//! from the entry that was last when it began, and ends its readers of the
//! sessions named there at once (`SessionEnded`). An idle instance costs one
//! command per [`BLOCK_MS`], whatever the number of streams it follows.
//!
//! A lost notice (an instance that died between the end and the notice on a
//! cluster, a notice trimmed from the stream before a partitioned instance
//! read it) only delays the end of those readers until the tail's backstop
//! check ([`super::END_BACKSTOP`]); on one server, where the end script
//! writes the notice, the shards check their sessions once when the reader
//! reconnects or finds notices it had not read trimmed away, instead of
//! every [`super::END_BACKSTOP`]; an id that ended is never re-created
//! while its tombstone lives, so a late notice cannot end a newer session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::super::reply;
use super::blocking::{Blocking, Source};
use super::Shard;
use crate::subscription::EndReason;

/// The stream of ended session ids (field `s`).
pub(in crate::redis) const ENDINGS: &str = "mcpr:endings";
/// Notices the stream keeps: enough for a burst of ends between two reads.
const MAXLEN: usize = 10_000;
/// How long one blocking read waits; also the bound on noticing a close.
/// Under the cluster connection's response timeout (5 s), or every read
/// would time out and reconnect.
const BLOCK_MS: u64 = 4000;

/// The command that announces the end of session `id` (a cluster; the end
/// script does it on one server).
pub(in crate::redis) fn notice(id: &str) -> redis::Cmd {
    let mut c = redis::cmd("XADD");
    c.arg(ENDINGS)
        .arg("MAXLEN")
        .arg("~")
        .arg(MAXLEN)
        .arg("*")
        .arg("s")
        .arg(id);
    c
}

/// This instance's reader of notices: started with the first followed stream.
pub(super) struct Endings {
    source: Source,
    started: tokio::sync::OnceCell<()>,
    stopped: Arc<AtomicBool>,
    /// The handle's coalesced touches, which a notice makes ask Redis again.
    touched: Arc<crate::redis::touched::Touched>,
    /// Whether the end script writes the notice in the end's own step (one
    /// server without replicas): only then do the touches trust the reader.
    pushed: bool,
}

impl Endings {
    pub fn new(source: Source, touched: Arc<crate::redis::touched::Touched>, pushed: bool) -> Self {
        Self {
            source,
            started: tokio::sync::OnceCell::new(),
            stopped: Arc::new(AtomicBool::new(false)),
            touched,
            pushed,
        }
    }

    /// Starts reading notices if not yet; returns once the position to read
    /// from is fixed, so no end after this call is missed.
    pub async fn start(&self, shards: &[Arc<Shard>], closed: &Arc<AtomicBool>) {
        self.started
            .get_or_init(|| async {
                let mut conn = self.source.connect(BLOCK_MS).await.ok();
                let last = match conn.as_mut() {
                    Some(c) => newest(c).await,
                    None => None,
                };
                let reader = Reader {
                    source: self.source.clone(),
                    shards: shards.to_vec(),
                    closed: closed.clone(),
                    stopped: self.stopped.clone(),
                    touched: self.touched.clone(),
                    pushed: self.pushed,
                };
                tokio::spawn(reader.run(conn, last));
            })
            .await;
    }

    /// Ends the reading task (within one blocking read).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.touched.set_trusted(false);
    }
}

/// The reading task's parts.
struct Reader {
    source: Source,
    shards: Vec<Arc<Shard>>,
    closed: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
    touched: Arc<crate::redis::touched::Touched>,
    pushed: bool,
}

/// The id of the newest notice (`0-0` when there is none), or `None` when
/// Redis did not answer.
async fn newest(conn: &mut Blocking) -> Option<String> {
    let mut cmd = redis::cmd("XREVRANGE");
    cmd.arg(ENDINGS).arg("+").arg("-").arg("COUNT").arg(1);
    let v = conn.query(&cmd).await.ok()?;
    Some(reply::last_id(&v).unwrap_or_else(|| "0-0".to_owned()))
}

/// Whether notices after `from` (not read yet) were trimmed from the stream.
async fn trimmed_past(conn: &mut Blocking, from: &str) -> bool {
    let mut info = redis::cmd("XINFO");
    info.arg("STREAM").arg(ENDINGS);
    let Ok(v) = conn.query(&info).await else {
        return false; // no end yet (no stream), or Redis away: the reconnect doubts
    };
    reply::trimmed_past(&v, from) == Some(true)
}

impl Reader {
    /// Notices may have been missed: the shards check their sessions, and
    /// every session's next touch asks Redis.
    fn doubt(&self) {
        self.touched.doubt();
        for s in &self.shards {
            s.doubt_ends();
        }
    }

    /// Connected and reading, or not: touches trust the notices only while this
    /// reads them (and only on a pushed tail).
    fn reading(&self, connected: bool) {
        self.touched.set_trusted(self.pushed && connected);
    }

    async fn run(self, mut conn: Option<Blocking>, mut last: Option<String>) {
        let mut checked = std::time::Instant::now();
        while !self.closed.load(Ordering::Relaxed) && !self.stopped.load(Ordering::Relaxed) {
            if conn.is_none() {
                conn = self.source.connect(BLOCK_MS).await.ok();
                if conn.is_some() {
                    // Notices may have been trimmed away while this was cut off.
                    self.doubt();
                }
            }
            let Some(c) = conn.as_mut() else {
                self.reading(false);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let Some(from) = last.clone() else {
                // Redis was away when this began: from what is newest now (the
                // backstop check finds the ends in between).
                last = newest(c).await;
                if last.is_none() {
                    conn = None;
                    self.reading(false);
                } else {
                    self.doubt();
                }
                continue;
            };
            if checked.elapsed() >= Duration::from_millis(BLOCK_MS) {
                checked = std::time::Instant::now();
                if trimmed_past(c, &from).await {
                    // Ends this reader never saw were trimmed (more than the
                    // stream keeps came while it was slow): check them all.
                    self.doubt();
                }
            }
            // Every notice after `from` comes with this read: touches may
            // trust them from here.
            self.reading(true);
            let mut cmd = super::xread_blocking(BLOCK_MS);
            cmd.arg(ENDINGS).arg(&from);
            let reply = match c.query(&cmd).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(error = %e, "session end notices unreadable; reconnecting");
                    conn = None;
                    self.reading(false);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            for (_, entries) in reply::by_key(&reply) {
                if let Some(id) = reply::last_id(entries) {
                    last = Some(id);
                }
                for session in reply::field_values(entries, b"s") {
                    self.touched.forget(&session);
                    let shard = super::shard_index(&session, self.shards.len());
                    self.shards[shard].end_session(&session);
                }
            }
        }
        self.touched.set_trusted(false);
    }
}

/// What the shards do with end notices, and with a doubt about them.
impl Shard {
    /// End notices may have been missed: the shard checks its sessions at
    /// its next round. Only where that is the sole check (a pushed tail): a
    /// polled one checks every [`super::END_BACKSTOP`] anyway, and on a cluster
    /// the notice reader's connection comes and goes with its blocking
    /// reads, which made every reconnect a check of every session (0.071
    /// to 0.238 commands/s per idle followed stream, idle_followed).
    fn doubt_ends(&self) {
        if !self.pushed {
            return;
        }
        self.ends_doubt.store(true, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Ends the readers of sessions that ended (on any instance).
    pub(super) async fn end_ended_sessions(&self) {
        let sessions: Vec<String> = {
            let st = self.lock();
            let mut s: Vec<String> = st
                .streams
                .values()
                .map(|f| f.session.clone())
                .chain(st.joining.values().map(|j| j.session.clone()))
                .collect();
            s.sort();
            s.dedup();
            s
        };
        let cmds = sessions
            .iter()
            .map(|id| {
                let mut c = redis::Cmd::new();
                c.arg("HGET")
                    .arg(format!("{}:s", super::super::prefix(id)))
                    .arg("e");
                c
            })
            .collect();
        let Ok(flags) = self.conn.each::<Option<String>>(cmds).await else {
            return; // Redis trouble shows in the blocking read.
        };
        let ended: Vec<&String> = sessions
            .iter()
            .zip(flags)
            .filter(|(_, e)| e.as_deref() != Some("0"))
            .map(|(id, _)| id)
            .collect();
        if ended.is_empty() {
            return;
        }
        let mut st = self.lock();
        for j in st.joining.values_mut() {
            if ended.contains(&&j.session) {
                j.ended = true;
            }
        }
        st.streams.retain(|_, f| {
            if ended.contains(&&f.session) {
                f.end_all(EndReason::SessionEnded);
                false
            } else {
                true
            }
        });
    }
}
