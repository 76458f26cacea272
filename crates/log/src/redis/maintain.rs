//! Housekeeping on Redis: age retention, idle expiry, and forgetting
//! tombstones once their TTL has passed, each instance in the buckets it
//! holds ([`super::buckets`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::buckets::{Mask, Share};
use super::live::ended_keys;
use super::{prefix, unavailable, RedisLog};
use crate::types::now_ms;
use crate::{LogError, StreamKey};

/// Tombstones listed per round trip.
const FORGET_BATCH: usize = 512;

/// Sessions whose state one round trip of a maintenance pass reads.
const WALK_BATCH: usize = 256;

/// When each session may next hold an event past the age limit (Unix ms):
/// the oldest event a walk of its streams left, plus the age limit (or the
/// walk's own time plus the age limit, when it left nothing: whatever comes
/// later is younger). A session is walked again only once that time has
/// come, so a session older than the age limit does not cost a walk every
/// pass. Kept in this process for the sessions of the buckets it holds;
/// not used with replicas (`--redis-replicas`), where events above the
/// committed head, which a walk does not see, may be older than what it saw.
#[derive(Default)]
pub(super) struct Due(Mutex<HashMap<String, u64>>);

impl Due {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether session `id` cannot hold an old event yet at `now`.
    fn not_yet(&self, id: &str, now: u64) -> bool {
        self.lock().get(id).is_some_and(|due| now < *due)
    }

    fn set(&self, id: &str, due: u64) {
        self.lock().insert(id.to_owned(), due);
    }

    /// Forgets the sessions no longer among `live` (ended, or in buckets
    /// another instance holds now).
    fn keep(&self, live: &[String]) {
        let live: HashSet<&str> = live.iter().map(String::as_str).collect();
        self.lock().retain(|id, _| live.contains(id.as_str()));
    }
}

/// When this handle last walked the sessions of its buckets (read each
/// one's state: one `HMGET` a session, 100,000 of them a pass at 100,000
/// sessions) and which buckets that walk covered. A pass walks again only
/// once [`RedisLog::set_walk_interval`] has passed, or when it holds a
/// bucket the last walk did not cover; every other pass does the rest of
/// maintenance (leases, tombstones, handovers) without reading a session.
#[derive(Default)]
pub(super) struct Walks(Mutex<WalkState>);

#[derive(Default)]
struct WalkState {
    every: Duration,
    last: Option<(Instant, Mask)>,
}

impl Walks {
    fn lock(&self) -> std::sync::MutexGuard<'_, WalkState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn set_every(&self, every: Duration) {
        self.lock().every = every;
    }

    /// Whether a pass holding the buckets of `held` walks now.
    fn due(&self, held: Mask) -> bool {
        let s = self.lock();
        match s.last {
            None => true,
            Some((at, covered)) => held & !covered != 0 || at.elapsed() >= s.every,
        }
    }

    /// A walk over the buckets of `held` was completed.
    fn walked(&self, held: Mask) {
        self.lock().last = Some((Instant::now(), held));
    }
}

/// Whether a session last active at `a` (Unix ms) is idle for longer than
/// `idle` at `now`.
fn idle_for(a: Option<u64>, now: u64, idle: Duration) -> bool {
    a.is_some_and(|a| now.saturating_sub(a) > idle.as_millis() as u64)
}

impl RedisLog {
    /// Age retention on the streams of the live sessions in the buckets of
    /// `share`, and the end of the idle ones; it stops where the leases
    /// stop being certainly this handle's.
    ///
    /// The state of [`WALK_BATCH`] sessions is read in one round trip, and
    /// the streams of a session are read only when it was created before the
    /// age cutoff (a younger session holds nothing old enough to trim) and
    /// its [`Due`] time has come. At
    /// 100,000 sessions a pass was one round trip after another per session
    /// (about 2 ms each on a busy machine: 107 s a pass over 50,000,
    /// benches/results/scale.md).
    pub(super) async fn trim_and_end_idle(
        &self,
        share: &Share,
        idle: Duration,
    ) -> Result<Vec<String>, LogError> {
        if !self.walks.due(share.held) {
            return Ok(Vec::new());
        }
        let ids = self.live_ids_in(share.held).await?;
        let now = now_ms();
        let cutoff = now.saturating_sub(self.retention.max_age.as_millis() as u64);
        let mut ended = Vec::new();
        let mut complete = true;
        'pass: for chunk in ids.chunks(WALK_BATCH) {
            let cmds = chunk
                .iter()
                .map(|id| {
                    let mut c = redis::cmd("HMGET");
                    c.arg(format!("{}:s", prefix(id)))
                        .arg("a")
                        .arg("e")
                        .arg("c");
                    c
                })
                .collect();
            let states: Vec<(Option<u64>, Option<String>, Option<u64>)> =
                self.conn.each(cmds).await.map_err(unavailable)?;
            for (id, (a, e, created)) in chunk.iter().zip(states) {
                if !self.still_holds(share) {
                    tracing::warn!("maintenance pass stopped: this instance's leases are in doubt");
                    complete = false;
                    break 'pass;
                }
                if self.cluster() && e.as_deref() != Some("0") {
                    self.reconcile(id, e.as_deref()).await?;
                    continue;
                }
                if idle_for(a, now, idle) {
                    // Ended only if it is still idle when the end runs: a
                    // client that came back since the batch read keeps it.
                    let used_after = now_ms().saturating_sub(idle.as_millis() as u64);
                    if let Ok(true) = self.end_unless_used_since(id, Some(used_after)).await {
                        ended.push(id.clone());
                    }
                    continue;
                }
                // Every event of a session came after its creation.
                if created.is_some_and(|c| c >= cutoff)
                    || (self.replicas == 0 && self.due.not_yet(id, now))
                {
                    continue;
                }
                match self.trim_old(id, now, cutoff).await {
                    Ok(due) => self.due.set(id, due),
                    Err(LogError::NoSession(_)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.due.keep(&ids);
        if complete {
            self.walks.walked(share.held);
        }
        Ok(ended)
    }

    /// Age retention on each stream of session `id` that holds something:
    /// its floor moves past the events committed before `cutoff`. Returns
    /// when the session may next hold an event past the age limit ([`Due`]):
    /// `now` again (the next pass) for a stream it could not read.
    async fn trim_old(&self, id: &str, now: u64, cutoff: u64) -> Result<u64, LogError> {
        let max_age = self.retention.max_age.as_millis() as u64;
        let mut due = now.saturating_add(max_age);
        // The streams that hold something, not every one ever opened.
        let requests = self.indexed_request_streams(id).await?;
        for n in std::iter::once(0).chain(requests) {
            let stream = StreamKey::from_number(n);
            let b = match self.bounds_of(id, stream).await {
                Ok(b) => b,
                Err(LogError::NoSession(_) | LogError::NoStream { .. }) => continue,
                Err(_) => {
                    due = now;
                    continue;
                }
            };
            let (floor, at) =
                match crate::retention::first_young_at(self, id, stream, b, cutoff).await {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!(session = %id, stream = n, error = %e,
                            "age retention skipped a stream it could not read");
                        due = now;
                        continue;
                    }
                };
            // A pin held the floor back: what it keeps may go once it is
            // removed, which the next pass looks for.
            if floor > b.floor && !self.trim_to(id, stream, floor).await? {
                due = now;
            }
            match at {
                Some(at) => due = due.min(at.saturating_add(max_age)),
                // Young events it did not read the time of (a lost range
                // comes first): looked at again next pass.
                None if floor <= b.head => due = now,
                None => {}
            }
        }
        Ok(due)
    }

    /// Deletes the tombstones of sessions that ended at least `ttl` ago;
    /// their ids become unknown. Tombstones of older versions, which have no
    /// end time, are given one first ([`super::adopt`]). On a cluster each
    /// instance forgets in the ended indexes of its buckets; on one server,
    /// where there is one ended index, the holder of bucket 0 does it.
    pub(super) async fn forget_tombstones(
        &self,
        share: &Share,
        ttl: Duration,
    ) -> Result<(), LogError> {
        let cluster = self.cluster();
        if !cluster && !Share::has(share.held, 0) {
            return Ok(());
        }
        self.adopt_unlisted_tombstones().await?;
        let cutoff = now_ms().saturating_sub(ttl.as_millis() as u64);
        for (b, ended) in ended_keys(cluster).into_iter().enumerate() {
            if cluster && !Share::has(share.held, b as u16) {
                continue;
            }
            if !self.still_holds(share) {
                break;
            }
            self.forget_in(&ended, cutoff).await?;
        }
        Ok(())
    }

    /// Forgets the tombstones listed in one ended index that ended by `cutoff`.
    async fn forget_in(&self, ended: &str, cutoff: u64) -> Result<(), LogError> {
        let mut conn = self.conn.clone();
        let cluster = self.cluster();
        loop {
            let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
                .arg(ended)
                .arg("-inf")
                .arg(cutoff)
                .arg("LIMIT")
                .arg(0)
                .arg(FORGET_BATCH)
                .query_async(&mut conn)
                .await
                .map_err(unavailable)?;
            for id in &ids {
                let mut inv = self.scripts.forget.key(format!("{}:s", prefix(id)));
                if !cluster {
                    inv.key(ended);
                }
                // On a cluster the index is in another slot: the listing
                // above is the check (an id ended again since would have to
                // be forgotten and re-created in between), the ZREM after.
                let _: i64 = inv
                    .arg(id)
                    .arg(cutoff)
                    .invoke_async(&mut conn)
                    .await
                    .map_err(unavailable)?;
                if cluster {
                    let _: i64 = redis::cmd("ZREM")
                        .arg(ended)
                        .arg(id)
                        .query_async(&mut conn)
                        .await
                        .map_err(unavailable)?;
                }
            }
            if ids.len() < FORGET_BATCH {
                return Ok(());
            }
        }
    }

    /// For tests and measurements: how many ended sessions Redis still remembers.
    #[doc(hidden)]
    pub async fn tombstones(&self) -> Result<usize, LogError> {
        let cmds = ended_keys(self.cluster())
            .into_iter()
            .map(|k| {
                let mut c = redis::Cmd::new();
                c.arg("ZCARD").arg(k);
                c
            })
            .collect();
        let n: Vec<usize> = self.conn.each(cmds).await.map_err(unavailable)?;
        Ok(n.into_iter().sum())
    }
}
