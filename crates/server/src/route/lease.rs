//! Where a session's backend runs.
//!
//! An [exclusive](crate::backend::Backend::exclusive) backend (a gateway's
//! child process) runs on one instance at a time: the holder of the
//! session's owner lease ([`Leases::claim`](mcp_resume_log::Leases::claim)). An
//! instance that has the session's route is its owner; one that has not
//! claims the lease, and either wins it (and starts the backend, restored
//! from the stored `initialize` params) or learns the owner and forwards
//! the message there ([`inbox`](super::inbox)). The owner a claim names is
//! kept for [`RECHECK`], so a busy session costs one claim a second per
//! instance, not one per message; an owner that dies is replaced on the
//! first claim after its heartbeat expires (about 10 s on Redis).
//!
//! A route here is used only while the lease it was opened under is still
//! this instance's ([`SessionRoute::lease_lost`]): an instance frozen past
//! its lease (SIGSTOP, a stalled VM) finds, when it thaws, that another
//! instance may run the session now, stops its own backend (the child is
//! killed, its calls end with -32603 `lease-lost`) and claims again, so two
//! children never serve one session through this instance.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume_log::LogError;
use serde_json::json;

use super::{Routes, SessionRoute};
use crate::error::ApiError;
use crate::route::state::AppState;
use crate::session::ListenRecord;

/// How long a learnt owner is trusted before it is claimed again.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// Where a session's messages go.
pub(crate) enum Located {
    /// The backend runs here (started now if it was not running).
    Here(Arc<SessionRoute>),
    /// The backend runs on this instance, which holds the lease.
    There(String),
}

impl Routes {
    fn owner_seen(&self, session: &str) -> Option<String> {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        match owners.get(session) {
            Some((owner, at)) if at.elapsed() < RECHECK => Some(owner.clone()),
            Some(_) => {
                owners.remove(session);
                None
            }
            None => None,
        }
    }

    /// Forgets the owner `session` was last known by (it gave the lease up):
    /// the next message claims afresh.
    pub(crate) fn forget_owner(&self, session: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        owners.remove(session);
    }

    fn remember_owner(&self, session: &str, owner: String) {
        let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded by the sessions this instance forwards for within RECHECK.
        owners.retain(|_, (_, at)| at.elapsed() < RECHECK);
        owners.insert(session.to_owned(), (owner, Instant::now()));
    }
}

/// Where `session`'s messages go; a backend that starts here is restored
/// from the client's stored `initialize` params.
pub(crate) async fn locate(state: &AppState, session: &str) -> Result<Located, ApiError> {
    locate_read(state, session, None).await
}

/// [`locate`], with the session's record when the request's checks read it
/// already (`read`): a route opened here takes it instead of a second read.
pub(crate) async fn locate_read(
    state: &AppState,
    session: &str,
    read: Option<bytes::Bytes>,
) -> Result<Located, ApiError> {
    if let Some(r) = state.routes.get(session) {
        if !r.lease_lost(&*state.log) {
            return Ok(Located::Here(r));
        }
        tracing::warn!(%session, "this instance's lease on the session may have lapsed (its heartbeat went unrefreshed); its backend stops and the session is claimed again");
        // This route only: a newer one another request opened meanwhile
        // stays. A successor reads forwarded messages from where it stopped.
        let seen = r.inbox_seen.load(std::sync::atomic::Ordering::Acquire);
        state.routes.close_route(session, &r);
        let located = locate_from(state, session, Some(seen), None).await;
        if matches!(located, Ok(Located::There(_))) {
            // What was forwarded here and not read is another instance's
            // now: its forwarders end it as an orphan of the lost lease
            // (this instance writes nothing more for the session).
            let _ = state.routes.take_handover(session);
        }
        return located;
    }
    locate_from(state, session, None, read).await
}

/// [`locate`]; a route opened here under the lease reads forwarded messages
/// after `seen_from` when given (a route whose lease lapsed hands over what
/// it had not read yet), else after the count at the claim; `read`: the
/// session's record, if read already.
pub(crate) async fn locate_from(
    state: &AppState,
    session: &str,
    seen_from: Option<mcp_resume_log::Seq>,
    read: Option<bytes::Bytes>,
) -> Result<Located, ApiError> {
    if let Some(r) = state.routes.get(session) {
        if !r.lease_lost(&*state.log) {
            return Ok(Located::Here(r));
        }
    }
    let exclusive = state.backend.exclusive();
    let mut lease = None;
    if exclusive {
        if let Some(owner) = state.routes.owner_seen(session) {
            return Ok(Located::There(owner));
        }
        // Followed before the claim: once it wins, others ring it.
        state.routes.follow_bell(state).await?;
        if let Some(owner) = state.routes.owner_seen(session) {
            return Ok(Located::There(owner));
        }
        // Counted before the claim: a message forwarded to this instance as
        // soon as it holds the lease opens a later stream.
        // A route of this session closed here under a lapsed lease hands
        // over what it had not read.
        let handed = state.routes.take_handover(session);
        // Kept for the next try when this one fails: what was forwarded here
        // and not read is read by the next route, never skipped.
        let keep = |e| {
            if let Some(seen) = handed {
                state.routes.restore_handover(session, seen);
            }
            e
        };
        let seen = match seen_from.or(handed) {
            Some(seen) => seen,
            None => state
                .log
                .request_streams(session)
                .await
                .map_err(|e| keep(ApiError::from(e)))?,
        };
        // Taken before the claim: a lapse after it makes the route stale.
        let epoch = state.log.lease_epoch();
        let claimed = state
            .log
            .claim(session)
            .await
            .map_err(|e| keep(ApiError::from(e)))?;
        match claimed {
            Some(owner) if owner != state.log.instance() => {
                state.routes.remember_owner(session, owner.clone());
                return Ok(Located::There(owner));
            }
            Some(_) => lease = Some((seen, epoch)),
            None => {} // one process: every session is this instance's
        }
    }
    let opened = open_here(state, session, lease, read).await;
    if let (Err(_), Some(_)) = (&opened, lease) {
        // Won, but nothing runs here to hold it: given up, so that another
        // instance can claim it, and what was forwarded here meanwhile ends
        // loudly as an orphan (its instance no longer holds the lease)
        // instead of waiting for a route here. The next claim here counts
        // afresh: those orphans are not read again.
        if let Err(e) = state.log.release(session, None).await {
            tracing::warn!(%session, error = %e, "could not give up a lease whose backend did not start; it lapses with this instance");
        }
    }
    opened
}

/// Starts `session`'s backend here, restored from its record, under `lease`.
/// `read`: the record as the request's checks read it, just after their
/// touch found the session live; only what `initialize` wrote once is
/// taken from it. A session ended in the instant since fares as one ended
/// just after a read here: the window is the same, only earlier.
async fn open_here(
    state: &AppState,
    session: &str,
    lease: Option<(mcp_resume_log::Seq, u64)>,
    read: Option<bytes::Bytes>,
) -> Result<Located, ApiError> {
    let rec = match read {
        Some(meta) => crate::session::SessionRecord::decode(&meta),
        None => state.record(session).await?,
    };
    let init = match (rec.init, &rec.listen, &rec.task) {
        (Some(init), ..) => init,
        // A listen stream any instance's backend may feed, or a session a
        // release before the single route created without its params:
        // restored as initialized, with nothing known of its client.
        (None, Some(ListenRecord { owner: None }), _) | (None, None, None) => json!({}),
        // A listen stream fed on its own instance, or a task: read, never
        // sent to.
        (None, ..) => return Err(ApiError::NoSession(session.to_owned())),
    };
    state.routes.follow_bell(state).await?;
    Ok(Located::Here(state.routes.open(
        state,
        session,
        Some(init),
        lease,
    )?))
}

/// After `session`'s route here lost its lease (its heartbeat lapsed): the
/// session is claimed again until that settles where it runs: here (a new
/// route, which reads what was forwarded from where the old one stopped)
/// or on another instance (what was forwarded here and not read ends
/// loudly). A failure (the log still unavailable, the backend busy) is
/// tried again with a backoff, never given up while this instance is the
/// one the lease names: calls forwarded to it would wait on no route.
/// Ends when the session does or the server stops.
pub(crate) async fn reclaim(state: &AppState, session: &str) {
    let mut pause = std::time::Duration::from_millis(100);
    let mut shutdown = state.shutdown.clone();
    loop {
        match locate(state, session).await {
            Ok(_) => return,
            Err(ApiError::NoSession(_)) => return,
            Err(e) => {
                tracing::warn!(%session, error = %e, "could not claim the session again after its lease lapsed; trying again");
                // A lease given up (the backend could not start here) is not
                // this instance's to settle any more.
                if matches!(state.log.holds(session).await, Ok(false)) {
                    return;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = crate::route::state::stopped(&mut shutdown) => return,
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(2));
    }
}

/// The lease of a session this instance just created, for its route: the
/// count to read forwarded messages from and the lease epoch, if the log is
/// shared.
pub(crate) async fn claim_new(
    state: &AppState,
    session: &str,
) -> Result<Option<(u64, u64)>, LogError> {
    if !state.backend.exclusive() {
        return Ok(None);
    }
    let epoch = state.log.lease_epoch();
    // Nobody else knows the id yet: the claim is this instance's.
    Ok(state.log.claim(session).await?.map(|_| (0, epoch)))
}
