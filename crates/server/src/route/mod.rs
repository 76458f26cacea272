//! The transport's half of the [`backend`](crate::backend) seam: one route
//! per session live on this instance, holding the session's backend, its
//! routing table and its commit queue.
//!
//! What the backend sends is committed in the order it was sent, by one
//! task per session that takes everything queued, routes it
//! ([`table::Table::route`]) and commits runs of messages bound for one
//! stream in one append; the backend's sends resolved when they were queued
//! ([`Outbox`]). When the backend stops, every call still in flight is
//! answered with an error: a caller never waits forever.

pub(crate) mod bell;
mod call_key;
mod commit;
pub(crate) mod dispatch;
pub(crate) mod drain;
mod hand;
pub(crate) mod heads;
pub(crate) mod inbox;
pub(crate) mod lease;
pub(crate) mod orphans;
pub(crate) mod reply;
mod session_route;
pub(crate) mod state;
pub(crate) mod streams;
pub(crate) mod table;
pub(crate) mod work_note;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use mcp_resume_log::LogError;
use serde_json::Value;

use crate::backend::{BackendError, Outbox, Shortcut};
use crate::route::state::AppState;
use commit::{commit_loop, Committer};
pub(crate) use hand::answer;
pub(crate) use session_route::SessionRoute;
use table::Table;

/// How the wire ids of server requests start (then the instance of the
/// route that sent it, a per-route nonce and a counter): an answer with such
/// an id that no route here sent is forwarded to that instance.
pub(crate) const WIRE_PREFIX: &str = "mr.";

/// The instance whose route sent the server request with wire id `wire`.
pub(crate) fn asker(wire: &str) -> Option<&str> {
    let instance = wire.strip_prefix(WIRE_PREFIX)?.split('.').next()?;
    (instance.len() == 32 && instance.bytes().all(|b| b.is_ascii_hexdigit())).then_some(instance)
}
/// The maps keyed by ids this server makes (sessions, its own requests),
/// looked up several times a request: hashed with foldhash (randomly
/// seeded) rather than SipHash, which took about 320 instructions for each
/// lookup of a 64-byte session id. foldhash claims no resistance to a client
/// that chooses its keys and watches timing or order, so maps keyed by ids
/// clients choose (a session's calls) keep SipHash.
pub(crate) type Map<K, V> = foldhash::HashMap<K, V>;

/// Most queued messages committed in one pass.
const BATCH: usize = 256;

/// The routes of the sessions live on this instance.
#[derive(Default)]
pub(crate) struct Routes {
    map: Mutex<Map<String, Arc<SessionRoute>>>,
    /// Sessions whose exclusive backend runs on another instance, and when
    /// that was last checked ([`lease`]).
    owners: Mutex<Map<String, (String, Instant)>>,
    /// This instance's inbox bell: what wakes the watchers of forwarded
    /// messages ([`bell`]).
    pub(crate) bells: Arc<bell::Bells>,
    /// How far the inbox of a lease route that closed had read forwarded
    /// messages, for the next route of its session here to go on from
    /// ([`Routes::take_handover`]): a route closed by its own commit loop
    /// (its lease lapsed) must not make its successor count afresh, or the
    /// messages forwarded to it and not yet read would be skipped.
    handover: Mutex<Map<String, (mcp_resume_log::Seq, Instant)>>,
}

/// How long a handover waits for the session's next route here.
const HANDOVER_TTL: std::time::Duration = std::time::Duration::from_secs(600);

impl Routes {
    fn lock(&self) -> MutexGuard<'_, Map<String, Arc<SessionRoute>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates and follows this instance's inbox bell, once ([`bell`]):
    /// before a route opens here, so before this instance can be named as
    /// a session's owner or send a server request, and no ring goes unheard.
    pub(crate) async fn follow_bell(&self, state: &AppState) -> Result<(), LogError> {
        // Touched well within the session TTL, so it never expires idle.
        let touch = (state.config.session_ttl / 3).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        );
        self.bells.open(&state.log, touch).await
    }

    /// The route of `session` on this instance, if it has one.
    ///
    /// Marked used under the map's lock, so that maintenance, which parks a
    /// route under the same lock only when it is still unused
    /// ([`Routes::park_if_unused`]), never parks one a request just took.
    pub(crate) fn get(&self, session: &str) -> Option<Arc<SessionRoute>> {
        let map = self.lock();
        let r = map.get(session)?;
        r.mark_used();
        Some(r.clone())
    }

    /// The route of `session` on this instance, without counting it as used.
    pub(crate) fn peek(&self, session: &str) -> Option<Arc<SessionRoute>> {
        self.lock().get(session).cloned()
    }

    /// The route of `session`, starting its backend if this instance has
    /// none; `restore` holds the client's `initialize` params when the
    /// session was initialized before (on another instance, by an earlier
    /// process, or before it was parked). With `lease` (a request stream
    /// count and a lease epoch), this instance holds the session's owner
    /// lease: the route takes the messages other instances forward to it
    /// through request streams after that count ([`inbox`]) for as long as
    /// it lives, and only while the lease epoch holds. The caller has
    /// followed the inbox bell ([`Routes::follow_bell`]).
    pub(crate) fn open(
        &self,
        state: &AppState,
        session: &str,
        restore: Option<Value>,
        lease: Option<(mcp_resume_log::Seq, u64)>,
    ) -> Result<Arc<SessionRoute>, BackendError> {
        let mut map = self.lock();
        if let Some(r) = map.get(session) {
            r.mark_used();
            return Ok(r.clone());
        }
        if lease.is_some() {
            // This route goes on from where it was told: an older handover
            // is stale now.
            self.handover
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(session);
        }
        let prefix = format!(
            "{WIRE_PREFIX}{}.{}.",
            state.log.instance(),
            crate::session::random_hex::<4>()
        );
        let mut table = Table::new(prefix);
        // The owner's inbox also takes forwarded answers: the watch that
        // runs only while answers are awaited is not needed.
        table.watching = lease.is_some();
        let table = Arc::new(Mutex::new(table));
        // A route under a lease hands nothing over unchecked: its commit
        // loop checks the lease first.
        let shortcut = match lease {
            None => Some(Arc::new(JsonAnswers(table.clone())) as Arc<dyn Shortcut>),
            Some(_) => None,
        };
        let (outbox, pending) = Outbox::new(shortcut);
        let session_backend = state.backend.open(session, outbox, restore)?;
        let route = Arc::new(SessionRoute {
            backend: session_backend,
            table: table.clone(),
            used: AtomicBool::new(false),
            quiet_since: Mutex::new(Instant::now()),
            epoch: lease.map(|(_, epoch)| epoch),
            inbox_seen: std::sync::atomic::AtomicU64::new(lease.map_or(0, |(seen, _)| seen)),
            inbox: tokio::sync::Mutex::new(()),
            pending: pending.clone(),
            head: std::sync::OnceLock::new(),
        });
        map.insert(session.to_owned(), route.clone());
        let committer = Committer {
            state: state.clone(),
            session: session.to_owned(),
            table,
            pending,
            epoch: route.epoch,
        };
        tokio::spawn(commit_loop(committer));
        if let Some((seen, _)) = lease {
            tokio::spawn(inbox::watch(
                state.clone(),
                session.to_owned(),
                seen,
                true,
                Some(Arc::downgrade(&route)),
            ));
            // The calls of the instance the lease was taken from (it stalled
            // or stopped) end now, under this lease, not at a reader's
            // next look.
            let (state, session) = (state.clone(), session.to_owned());
            tokio::spawn(async move {
                if let Err(e) = orphans::sweep_session(&state, &session).await {
                    tracing::debug!(%session, error = %e, "could not sweep the calls of the lease's last holder");
                }
            });
        }
        Ok(route)
    }

    /// Closes the route of `session` (it ended, or it is parked).
    pub(crate) fn close(&self, session: &str) {
        if let Some(r) = self.lock().remove(session) {
            r.backend.close();
        }
    }

    /// Closes `route` if it is still the route of `session`.
    pub(crate) fn close_route(&self, session: &str, route: &Arc<SessionRoute>) {
        self.close_if(session, &route.table);
    }

    /// Closes the route of `session` if it is still the one with `table`
    /// (not a newer one opened since); a lease route leaves how far its
    /// inbox read for its successor.
    fn close_if(&self, session: &str, table: &Arc<Mutex<Table>>) {
        let mut map = self.lock();
        if map
            .get(session)
            .is_some_and(|r| Arc::ptr_eq(&r.table, table))
        {
            if let Some(r) = map.remove(session) {
                if r.epoch.is_some() {
                    let seen = r.inbox_seen.load(Ordering::Acquire);
                    let mut h = self.handover.lock().unwrap_or_else(|e| e.into_inner());
                    h.retain(|_, (_, at)| at.elapsed() < HANDOVER_TTL);
                    h.insert(session.to_owned(), (seen, Instant::now()));
                }
                r.backend.close();
            }
        }
    }

    /// Puts back a handover [`Routes::take_handover`] took, for a claim that
    /// failed: the next try goes on from it.
    pub(crate) fn restore_handover(&self, session: &str, seen: mcp_resume_log::Seq) {
        let mut h = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        h.entry(session.to_owned())
            .or_insert((seen, Instant::now()));
    }

    /// How far the inbox of `session`'s last lease route here read, if one
    /// closed and left it (taken: one successor goes on from it).
    pub(crate) fn take_handover(&self, session: &str) -> Option<mcp_resume_log::Seq> {
        let mut h = self.handover.lock().unwrap_or_else(|e| e.into_inner());
        h.remove(session)
            .filter(|(_, at)| at.elapsed() < HANDOVER_TTL)
            .map(|(seen, _)| seen)
    }

    /// Run by a graceful stop ([`drain`]): counts the routes still
    /// running something, and gives up the lease of each route under one
    /// that has settled, closing it (its child stops), so the next message of
    /// its session starts a backend where it is claimed at once.
    pub(crate) async fn settle(&self, state: &AppState) -> usize {
        let routes: Vec<(String, Arc<SessionRoute>)> = self
            .lock()
            .iter()
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect();
        let mut running = 0;
        for (id, r) in routes {
            if !r.settled() {
                running += 1;
                continue;
            }
            if r.epoch.is_none() {
                continue;
            }
            // No forwarded message is taken between the look and the release.
            let _inbox = r.inbox.lock().await;
            if !r.settled() {
                running += 1;
                continue;
            }
            let seen = r.inbox_seen.load(Ordering::Acquire);
            match state.log.release(&id, Some(seen)).await {
                Ok(true) => {
                    tracing::debug!(session = %id, "settled: its lease is given up and its backend stops");
                    self.close_route(&id, &r);
                }
                // Forwarded to it since its inbox last read: read first.
                Ok(false) => running += 1,
                Err(e) => {
                    tracing::debug!(session = %id, error = %e, "could not give the lease up yet");
                    running += 1;
                }
            }
        }
        running
    }

    /// The sessions whose routes here run under an owner lease.
    pub(crate) fn leased(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, r)| r.epoch.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Closes every route (the server stops).
    pub(crate) fn close_all(&self) {
        for (_, r) in self.lock().drain() {
            r.backend.close();
        }
    }

    /// Run by maintenance: closes the routes of the sessions it just ended
    /// (`ended`), parks routes with nothing in flight for the backend's
    /// [`park_after`](crate::backend::Backend::park_after), and closes those
    /// whose session ended elsewhere (a `DELETE` or an expiry on another
    /// instance). The log is asked only about a route unused for a session
    /// TTL (its session may have expired by then; a route in use has a live
    /// session), so an instance with thousands of idle routes does not read
    /// thousands of records every pass. Returns how many routes it parked or
    /// closed.
    pub(crate) async fn sweep(&self, state: &AppState, ended: &[String]) -> usize {
        let mut released = ended.len();
        for id in ended {
            self.close(id);
        }
        let park_after = state.park_after();
        let stale_after = state.config.session_ttl;
        let routes: Vec<(String, std::time::Duration)> = self
            .lock()
            .iter()
            .map(|(id, r)| (id.clone(), r.unused()))
            .collect();
        for (id, unused) in routes {
            if park_after.is_some_and(|after| unused >= after && self.park_if_unused(&id, after)) {
                state.metrics.handlers_parked.inc();
                released += 1;
                continue;
            }
            let ended = unused >= stale_after
                && matches!(
                    state.log.session(&id).await,
                    Err(LogError::NoSession(_) | LogError::SessionEnded)
                );
            if ended {
                self.close(&id);
                released += 1;
            }
        }
        released
    }

    /// Run by maintenance before each pass: touches every session with a
    /// call or a server request in flight here, so that it does not expire
    /// idle under them (on this instance's pass or another's). A request
    /// touches its session when it arrives, not while it runs: a call that
    /// outlasts the session TTL, or a child slower than the TTL to answer
    /// `initialize`, lost its session meanwhile. One touch per busy session
    /// per pass: calls in flight at a given moment are few.
    ///
    /// Bounded, so that an abandoned session still expires: a call keeps
    /// its session alive for at most two session TTLs from its arrival,
    /// and a call answered as JSON only while its POST waits
    /// ([`table::Table::keeps_alive`]).
    pub(crate) async fn keep_busy_alive(&self, state: &AppState) {
        let within = state.config.session_ttl * 2;
        let busy: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, r)| r.lock_table().keeps_alive(within))
            .map(|(id, _)| id.clone())
            .collect();
        for id in busy {
            if let Err(e) = state.log.touch(&id).await {
                tracing::debug!(session = %id, error = %e, "could not keep a busy session alive");
            }
        }
    }

    /// Parks (closes) the route of `session` if it is still unused for
    /// `after` and has nothing in flight, checked under the map's lock: a
    /// request that took the route since the sweep looked marked it used
    /// under that lock ([`Routes::get`]), and a call it delivers to a closed
    /// backend would be cancelled with nothing left to answer it. Whether
    /// it parked it.
    fn park_if_unused(&self, session: &str, after: std::time::Duration) -> bool {
        let mut map = self.lock();
        let Some(r) = map.get(session) else {
            return false;
        };
        // A route under a lease is not parked: forwarded calls reach it
        // through its inbox, which takes it without marking it used.
        if r.unused() < after || r.epoch.is_some() || !r.lock_table().idle() || r.backend.busy() {
            return false;
        }
        if let Some(r) = map.remove(session) {
            r.backend.close();
        }
        true
    }
}

/// The route's way around its commit queue: a response a POST awaits as
/// JSON, sent while nothing is queued, is handed over at once.
struct JsonAnswers(Arc<Mutex<Table>>);

impl Shortcut for JsonAnswers {
    fn try_hand(
        &self,
        id: &Value,
        message: crate::backend::Message,
    ) -> Result<(), crate::backend::Message> {
        let mut table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        table.answer_json(id, message)
    }
}

/// Whether a route opened under lease epoch `epoch` may no longer act for
/// its session: this handle's leases lapsed since (another instance may run
/// the session now).
fn lapsed(epoch: Option<u64>, log: &dyn mcp_resume_log::Log) -> bool {
    epoch.is_some_and(|e| log.lease_epoch() != e || !log.leases_fresh())
}
