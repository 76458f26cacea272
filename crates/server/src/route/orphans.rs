//! Calls whose handler died with its process: a crash must not leave a
//! caller waiting forever.
//!
//! A request stream is opened with a small record (the JSON-RPC id of the call
//! and the instance that runs its handler). A stream whose last event is not a
//! response, and whose instance is no longer alive, is an orphan: it gets a
//! JSON-RPC error response for its call (the server restarted while the call
//! ran, so the client may retry), committed like any event. Where sessions
//! run under an owner lease (an exclusive backend on a shared log), a call
//! is an orphan once its instance no longer holds the session's lease, alive
//! or not (`lease-lost`): it can no longer answer it (its commits are
//! fenced), nor read one forwarded to it after the lease moved.
//!
//! Background work a built-in tool started for its call (`emit` sending
//! what it promised) is noted the same way (`route::work_note`); a note
//! left open by an instance that died is reported on the session stream
//! (`notifications/message`, `logger: mcp-resume`, `data.reason:
//! work-lost`), so a client knows the promise was broken instead of waiting
//! for what will never come. Orphans are ended
//! by the maintenance sweep (at start-up every stream of a disk log left from
//! before; on Redis the buckets an instance takes over) and lazily
//! when a client resumes one (an instance of a shared Redis log that died),
//! each under one key per call, so instances racing to end it commit one
//! error.

use bytes::Bytes;
use mcp_resume_log::{LogError, StreamKey};
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::route::reply::retrying;
use crate::route::state::{AppState, ORPHAN_SLOTS};

/// The record stored with a request stream.
pub(crate) fn record(rpc_id: &Value, instance: &str) -> Bytes {
    Bytes::from(json!({"id": rpc_id, "owner": instance}).to_string())
}

/// Ends request stream `r` of `session` with an error response if its handler
/// died; returns whether it did. A stream that has its response, or whose
/// handler's instance is alive, is left alone.
pub(crate) async fn end_if_orphaned(
    state: &AppState,
    session: &str,
    r: u64,
) -> Result<bool, LogError> {
    let stream = StreamKey::Request(r);
    // One at a time in this process per slot, so two resumes of one orphan
    // read and answer it in turn; other streams wait only on a shared slot.
    let slot = orphan_key(session, r) as usize % ORPHAN_SLOTS;
    let _guard = state.orphan_locks[slot].lock().await;
    let head = state.log.bounds(session, stream).await?.head;
    if head > 0 {
        let last = match state.log.read(session, stream, head - 1, 1).await {
            Ok(last) => last,
            // Damaged storage lost the last events: whether the response was
            // among them is unknown, so the call is treated as unanswered
            // (its owner's liveness decides below) and the stream ends.
            Err(LogError::DataLost { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        if last
            .first()
            .is_some_and(|e| jsonrpc::is_response(&e.message))
        {
            return Ok(false);
        }
    }
    let meta: Value =
        serde_json::from_slice(&state.log.request_meta(session, r).await?).unwrap_or(Value::Null);
    if meta.get("work").is_some() {
        return end_lost_work(
            state,
            session,
            r,
            meta["owner"].as_str().unwrap_or_default(),
        )
        .await;
    }
    if meta.get("id").is_none() {
        // A message forwarded to another instance (route::inbox), not a call.
        return Ok(false);
    }
    let owner = meta["owner"].as_str().unwrap_or_default();
    if leased(state) {
        return end_if_lease_lost(state, session, r, owner, &meta["id"]).await;
    }
    if owner == state.log.instance() || state.log.instance_alive(owner).await? {
        return Ok(false);
    }
    let reply = jsonrpc::error_with_data(
        &meta["id"],
        jsonrpc::INTERNAL_ERROR,
        "the server restarted while this call ran; it may be retried",
        json!({"reason": "server-restarted"}),
    );
    let reply = Bytes::from(serde_json::to_vec(&reply).unwrap_or_default());
    state
        .commit_once(session, stream, vec![reply], orphan_key(session, r), false)
        .await?;
    tracing::info!(
        session,
        stream = r,
        "ended a call whose handler died with its process"
    );
    Ok(true)
}

/// Background work noted on request stream `r` of `session`, run by
/// `owner`: if `owner` is dead, the session's client is told on its session
/// stream (once, under the stream's orphan key) and the note is retired.
async fn end_lost_work(
    state: &AppState,
    session: &str,
    r: u64,
    owner: &str,
) -> Result<bool, LogError> {
    if owner == state.log.instance() || state.log.instance_alive(owner).await? {
        return Ok(false);
    }
    state
        .commit_once(
            session,
            StreamKey::Session,
            vec![crate::route::work_note::lost_event(
                owner,
                crate::route::work_note::DIED,
            )],
            orphan_key(session, r),
            false,
        )
        .await?;
    state.log.retire_request_stream(session, r).await?;
    tracing::info!(
        session,
        stream = r,
        "told a session's client that background work it was promised died with its instance"
    );
    Ok(true)
}

/// Whether sessions' backends run under an owner lease here: an exclusive
/// backend on a log shared by instances.
fn leased(state: &AppState) -> bool {
    state.backend.exclusive() && state.log.shared()
}

/// [`end_if_orphaned`] for a session that runs under an owner lease: call
/// `id` on request stream `r`, run (or forwarded to be run) by `owner`, is
/// an orphan once `owner` no longer holds the lease, alive or not (it can
/// neither read what was forwarded after the lease moved nor commit an
/// answer: its commits are fenced). Only the holder ends it, fenced by its
/// own lease, so nothing is committed onto a live holder's session by
/// another instance: an instance that finds such an orphan asks the holder
/// to end it (a carrier, `route::inbox`). When nobody holds the lease, or
/// its holder died (the owner killed, its heartbeat expired, and no message
/// has claimed the session since), anyone ends it, fenced on that still
/// being so.
async fn end_if_lease_lost(
    state: &AppState,
    session: &str,
    r: u64,
    owner: &str,
    id: &Value,
) -> Result<bool, LogError> {
    let holder = state.log.lease_holder(session).await?;
    let me = state.log.instance();
    // The holder, if it lives: a dead one's lease goes to the next claim.
    let live_holder = match holder.as_deref() {
        Some(h) if h == me || state.log.instance_alive(h).await? => Some(h),
        _ => None,
    };
    if live_holder.is_some() && live_holder == Some(owner) {
        return Ok(false); // it still runs the call
    }
    // Its instance died (as without leases), or lives on without the lease.
    let reply = if owner != me && !state.log.instance_alive(owner).await? {
        jsonrpc::error_with_data(
            id,
            jsonrpc::INTERNAL_ERROR,
            "the server restarted while this call ran; it may be retried",
            json!({"reason": "server-restarted"}),
        )
    } else {
        jsonrpc::error_with_data(
            id,
            jsonrpc::INTERNAL_ERROR,
            "the instance that ran this call lost the session's lease (it stopped or stalled); it may be retried",
            json!({"reason": "lease-lost"}),
        )
    };
    let reply = vec![Bytes::from(serde_json::to_vec(&reply).unwrap_or_default())];
    let stream = StreamKey::Request(r);
    let key = orphan_key(session, r);
    let ended = match (live_holder, holder.as_deref()) {
        (Some(h), _) if h == me => state.commit_once(session, stream, reply, key, true).await,
        (Some(h), _) => {
            crate::route::inbox::ask_to_end(state, session, r, h).await?;
            return Ok(false);
        }
        // A dead holder (the owner itself, killed) or none: ended while
        // that is still so; a claim meanwhile leaves it to the new holder.
        (None, dead) => {
            state
                .log
                .append_if_held_by(session, stream, reply, key, dead)
                .await
        }
    };
    match ended {
        Ok(_) => {
            tracing::info!(%session, stream = r, "ended a call whose instance lost the session's lease");
            Ok(true)
        }
        // The lease moved meanwhile: its holder ends it.
        Err(LogError::LeaseLost(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key under which the error of orphaned call `r` of `session` is
/// committed: the same on every instance ([`mcp_resume_log::EventLog::append_once`]),
/// so instances (or a resume and the start-up sweep) that end one orphan at
/// once commit one error. FNV-1a, stable across processes and releases.
pub(crate) fn orphan_key(session: &str, r: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"orphan\0"
        .iter()
        .chain(session.as_bytes())
        .chain(&r.to_le_bytes())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Ends every orphaned call of `sessions`: those a maintenance pass handed
/// over (every live session at start-up on a log of one process; on Redis
/// the sessions of the buckets this instance maintains, when it takes them
/// or another instance went away). It visits the request streams that hold
/// something ([`mcp_resume_log::EventLog::live_request_streams`]), not every
/// stream a session ever opened, and holds no lock but one stream's slot at
/// a time. While the log is unavailable it waits and goes on from the
/// session it was at (until the server stops); a session it cannot read
/// for another reason is logged and passed over.
pub(crate) async fn sweep(state: &AppState, sessions: &[String]) -> Result<usize, LogError> {
    let mut ended = 0;
    for session in sessions {
        match retrying(state, None, || sweep_session(state, session)).await {
            Ok(n) => ended += n,
            Err(e) if crate::route::reply::retryable(&e) => return Err(e), // stopping
            Err(e) => {
                tracing::warn!(%session, error = %e, "the orphan sweep passed over a session it could not read")
            }
        }
    }
    Ok(ended)
}

/// Ends the orphaned calls of one session; how many. Run too when a route
/// opens under a lease here: the calls of the instance it took the session
/// from end at once.
pub(crate) async fn sweep_session(state: &AppState, session: &str) -> Result<usize, LogError> {
    let streams = match state.log.live_request_streams(session).await {
        Ok(live) => live,
        Err(LogError::NoSession(_) | LogError::SessionEnded) => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut ended = 0;
    for r in streams {
        match end_if_orphaned(state, session, r).await {
            Ok(true) => ended += 1,
            Ok(false) => {}
            // Trimmed away or ended meanwhile: nothing left to answer.
            Err(
                LogError::NoSession(_)
                | LogError::SessionEnded
                | LogError::NoStream { .. }
                | LogError::Truncated { .. }
                | LogError::DataLost { .. },
            ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(ended)
}
