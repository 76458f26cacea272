//! This handle's liveness in Redis, so that other instances can tell whether
//! the owner of a call is still running: a key `mcpr:instance:ID` that
//! expires [`TTL`] after its last refresh, refreshed every [`REFRESH`] by a
//! task of its own, deleted on close. Its value is the instance's
//! [`GENERATION`].
//!
//! The same heartbeat fences this handle's leases ([`crate::Leases::claim`]):
//! another instance may take a lease once the key has expired, so this one
//! stops trusting its leases [`FRESH`] after its last refresh that Redis
//! acknowledged, [`TTL`] - [`FRESH`] before anyone else can take them, and
//! counts a lapse in its lease epoch, so that what it opened under an older
//! epoch is never used again (a process frozen past its lease, then thawed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::Conn;
use tokio::task::JoinHandle;

use super::unavailable;
use crate::LogError;

/// How long a heartbeat outlives its last refresh: how soon a crashed
/// instance counts as dead.
pub(super) const TTL: Duration = Duration::from_secs(10);
/// How often the heartbeat is refreshed: three misses in a row before it expires.
const REFRESH: Duration = Duration::from_secs(3);
/// How long after its last acknowledged refresh this handle still trusts its
/// leases: 3 s before the key can expire and another instance claim them.
pub(super) const FRESH: Duration = Duration::from_secs(7);

/// When the heartbeat was last acknowledged, and how many times it lapsed.
pub(super) struct Liveness {
    start: Instant,
    last_ok_ms: AtomicU64,
    epoch: AtomicU64,
}

impl Liveness {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ok_ms: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Redis acknowledged a refresh sent at `sent_ms`, which found the key
    /// still there unless `was_gone`: a refresh after a lapse, or one that
    /// had to set the key again (evicted, or expired while this process was
    /// stalled), starts a new epoch, as another instance may have taken
    /// the leases meanwhile.
    fn refreshed(&self, sent_ms: u64, was_gone: bool) {
        let last = self.last_ok_ms.swap(sent_ms, Ordering::AcqRel);
        if was_gone || sent_ms.saturating_sub(last) > FRESH.as_millis() as u64 {
            self.epoch.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Whether the last acknowledged refresh is recent enough that nobody
    /// else can have taken this handle's leases.
    pub(super) fn fresh(&self) -> bool {
        self.now_ms()
            .saturating_sub(self.last_ok_ms.load(Ordering::Acquire))
            <= FRESH.as_millis() as u64
    }

    /// Grows with every lapse ([`Liveness::fresh`] false at some point).
    pub(super) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
}

/// What this release reads of the keys instances share, written as the value
/// of its heartbeat key so that the others know (releases before the
/// generations wrote `1`).
pub(super) const GENERATION: u32 = 3;

/// The first generation that reads compact follower members
/// ([`super::tail`]'s `members`): others register them only while every live
/// instance is at least this.
pub(super) const COMPACT_FOLLOWERS: u32 = 2;

/// The first generation that reads sessions of the seq-id layout
/// (`layout.rs`): others create them only while every live instance is at
/// least this.
pub(super) const SEQ_IDS: u32 = 3;

/// The key that says `instance` is alive, and its [`GENERATION`].
pub(super) fn key(instance: &str) -> String {
    format!("mcpr:instance:{instance}")
}

/// The heartbeat of one handle; the refreshing task stops on drop.
pub(super) struct Heartbeat {
    /// This handle's instance id.
    pub id: String,
    /// Whether its leases are still its own.
    pub liveness: Arc<Liveness>,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Sets the key once (so the handle is alive as soon as it is open) and
    /// starts refreshing it.
    pub async fn start(conn: Conn) -> Result<Self, LogError> {
        let id = crate::types::new_instance_id();
        let liveness = Arc::new(Liveness::new());
        let sent = liveness.now_ms();
        beat(&mut conn.clone(), &id, false)
            .await
            .map_err(unavailable)?;
        liveness.refreshed(sent, false);
        let task = {
            let (mut conn, id, liveness) = (conn, id.clone(), liveness.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(REFRESH).await;
                    // The time it was sent: Redis's expiry counts from later.
                    let sent = liveness.now_ms();
                    match beat(&mut conn, &id, true).await {
                        Ok(was_gone) => {
                            if was_gone {
                                tracing::warn!("this instance's heartbeat key was gone (evicted, or expired during a stall): its leases may have been taken, and what runs under them stops");
                            }
                            liveness.refreshed(sent, was_gone)
                        }
                        Err(e) => tracing::warn!(error = %e, "instance heartbeat not refreshed"),
                    }
                }
            })
        };
        Ok(Self { id, liveness, task })
    }

    /// Stops refreshing and deletes the key: this instance is dead at once,
    /// and its maintenance buckets go to the others at their next pass.
    pub async fn stop(&self, conn: &mut Conn) -> Result<(), LogError> {
        self.task.abort();
        redis::cmd("DEL")
            .arg(key(&self.id))
            .query_async::<()>(conn)
            .await
            .map_err(unavailable)?;
        redis::cmd("SREM")
            .arg(super::buckets::INSTANCES)
            .arg(&self.id)
            .query_async::<()>(conn)
            .await
            .map_err(unavailable)
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Sets (or, with `refresh`, refreshes) the heartbeat key with its TTL,
/// and registers the instance among those that divide maintenance
/// ([`super::buckets`]; again each time, as another instance unregisters
/// one it saw dead). Whether a refresh found the key gone (and set it again).
async fn beat(conn: &mut Conn, id: &str, refresh: bool) -> redis::RedisResult<bool> {
    let mut was_gone = false;
    if refresh {
        let kept: Option<String> = redis::cmd("SET")
            .arg(key(id))
            .arg(GENERATION)
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .arg("XX")
            .query_async(conn)
            .await?;
        was_gone = kept.is_none();
    }
    if !refresh || was_gone {
        redis::cmd("SET")
            .arg(key(id))
            .arg(GENERATION)
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async::<()>(conn)
            .await?;
    }
    redis::cmd("SADD")
        .arg(super::buckets::INSTANCES)
        .arg(id)
        .query_async::<()>(conn)
        .await?;
    Ok(was_gone)
}

/// Whether `instance`'s heartbeat is still there.
pub(super) async fn alive(conn: &mut Conn, instance: &str) -> Result<bool, LogError> {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key(instance))
        .query_async(conn)
        .await
        .map_err(unavailable)?;
    Ok(n > 0)
}
