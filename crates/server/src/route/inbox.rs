//! Client messages that reach an instance other than the one that must
//! handle them.
//!
//! Two cases, one mechanism. A client may POST its response to a server
//! request (an elicitation, a sampling call) to any instance, but the
//! handler that awaits it runs on one. And a session whose backend is
//! [exclusive](crate::backend::Backend::exclusive) (a gateway's child
//! process) runs on its owner only (the lease of
//! [`Leases::claim`](mcp_resume_log::Leases::claim)), so every other instance
//! forwards that session's requests and notifications too.
//!
//! The carrier is the log, the one thing every instance shares: the
//! receiving instance opens a request stream whose record carries the
//! message (`{"forward": MESSAGE, "owner": INSTANCE}`). A forwarded request
//! is answered on that very stream: its record also names the call (`id`)
//! and the owner, like any call's, so the orphan sweep ends it if the owner
//! dies; the client reads it from `R/0`. A forwarded notification or answer
//! has no `id`: nothing is ever appended to its stream, and the sweep leaves
//! it alone. Whoever opens a carrier then rings the receiver's bell
//! ([`super::bell`]); the instance that handles the session wakes and reads
//! the records of request streams opened since it last read, in order:
//! while a route awaits answers, or for as long as it owns an exclusive
//! session. Nothing is polled, and nothing forwarded is skipped: a record
//! that cannot be read is read again, from the same place, after a pause.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::{json, Value};

use super::SessionRoute;
use crate::route::state::AppState;

/// How often a waiting watcher checks, in memory, that its route and lease
/// still stand (no I/O).
const CHECK: Duration = Duration::from_secs(1);
/// The longest pause before a record that could not be read is read again.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The record of a request stream that carries `message` to instance
/// `owner` (any instance, for an answer: the route that asked knows it by
/// its id). With `call`, the stream is also where the call is answered.
pub(crate) fn carrier(message: &Value, owner: Option<&str>, call: Option<&Value>) -> Bytes {
    let mut meta = json!({"forward": message, "owner": owner.unwrap_or_default()});
    if let Some(id) = call {
        meta["id"] = id.clone();
    }
    Bytes::from(meta.to_string())
}

/// Forwards `message` (a client's response to a server request this
/// instance did not send) to instance `to` (the instance whose route sent
/// the request it answers), through the log, and rings its bell. An error:
/// the message may not arrive, and the client must be told (503), never
/// `202`.
pub(crate) async fn forward(
    state: &AppState,
    session: &str,
    message: &Value,
    to: &str,
) -> Result<(), LogError> {
    state
        .log
        .open_request_stream(
            session,
            carrier(message, Some(to), None),
            state.config.max_request_streams,
        )
        .await?;
    ring(state, session, to).await
}

/// [`forward`] to `owner`, the holder of the session's lease, only while it
/// holds it ([`Leases::open_carrier`](mcp_resume_log::Leases::open_carrier)):
/// `false` when it gave the lease up or lost it (nothing was forwarded, and
/// the owner it was known by is forgotten: the message is located again).
pub(crate) async fn forward_to_owner(
    state: &AppState,
    session: &str,
    message: &Value,
    owner: &str,
) -> Result<bool, LogError> {
    let opened = state
        .log
        .open_carrier(
            session,
            owner,
            carrier(message, Some(owner), None),
            state.config.max_request_streams,
        )
        .await?;
    if opened.is_none() {
        state.routes.forget_owner(session);
        return Ok(false);
    }
    ring(state, session, owner).await?;
    Ok(true)
}

/// Rings instance `to`'s bell for `session` after a carrier was opened for
/// it; tried three times over about 300 ms, as a log that just opened the
/// carrier is most likely there again at once.
pub(crate) async fn ring(state: &AppState, session: &str, to: &str) -> Result<(), LogError> {
    let mut tries = 0;
    loop {
        match super::bell::ring(&state.routes.bells, &*state.log, to, session).await {
            Ok(()) => return Ok(()),
            Err(e) if tries < 2 && crate::route::reply::retryable(&e) => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100 * tries)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A message forwarded in a request stream's record, and where the route
/// answers it if it is a request (its own stream, or the session stream
/// for one that came over a WebSocket).
struct Forwarded {
    message: Value,
    owner: String,
    answer_on: StreamKey,
}

fn forwarded(meta: &[u8], r: Seq) -> Option<Forwarded> {
    let v: Value = serde_json::from_slice(meta).ok()?;
    let message = v.get("forward")?.clone();
    Some(Forwarded {
        message,
        owner: v["owner"].as_str().unwrap_or_default().to_owned(),
        answer_on: if v.get("id").is_some() {
            StreamKey::Request(r)
        } else {
            StreamKey::Session
        },
    })
}

/// Hands `session`'s route the messages forwarded to it, from request
/// stream `seen + 1` on, each time its bell rings, until the route goes or,
/// unless `always`, until it awaits no answer. With `owner`, this watch
/// belongs to that route (the lease holder's): it stops when another route
/// replaces it, and records how far it read ([`SessionRoute::inbox_seen`])
/// so a successor goes on from there.
pub(crate) async fn watch(
    state: AppState,
    session: String,
    mut seen: Seq,
    always: bool,
    owner: Option<std::sync::Weak<SessionRoute>>,
) {
    let waker = state.routes.bells.waker(&session);
    // Read at once: what was forwarded before this watch began.
    let mut read = true;
    let mut backoff = Duration::from_millis(100);
    loop {
        if !read {
            tokio::select! {
                _ = waker.notified() => read = true,
                _ = tokio::time::sleep(CHECK) => {}
            }
        }
        let Some(route) = state.routes.peek(&session) else {
            break;
        };
        if let Some(owner) = &owner {
            if !owner.upgrade().is_some_and(|o| Arc::ptr_eq(&o, &route)) {
                break;
            }
        }
        if route.lease_lost(&*state.log) {
            if always {
                // Claimed again at once, not at the next message that
                // happens to reach this instance directly, and until that
                // settles.
                super::lease::reclaim(&state, &session).await;
            }
            break;
        }
        if !always {
            let mut t = route.lock_table();
            if !t.asking() {
                t.watching = false;
                break;
            }
        }
        if !read {
            continue;
        }
        let taken = {
            // A graceful stop gives the lease up only between two readings.
            let _inbox = route.inbox.lock().await;
            take(&state, &session, &route, seen, always).await
        };
        match taken {
            Taken::All(n) => {
                seen = n;
                read = false;
                backoff = Duration::from_millis(100);
            }
            Taken::Until(n, e) => {
                seen = n;
                tracing::debug!(%session, error = %e, "reading forwarded messages again after a pause");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Taken::Gone => break,
        }
        route
            .inbox_seen
            .store(seen, std::sync::atomic::Ordering::Release);
    }
    state.routes.bells.forget(&session, &waker);
}

/// How far one reading of the inbox got.
enum Taken {
    /// Every record up to this request stream was read.
    All(Seq),
    /// Records up to this one were read; the next could not be, for this
    /// reason: read again from there.
    Until(Seq, LogError),
    /// The session is gone.
    Gone,
}

/// Hands `route` the messages forwarded in the records of request streams
/// after `seen`, in order.
async fn take(
    state: &AppState,
    session: &str,
    route: &Arc<SessionRoute>,
    seen: Seq,
    always: bool,
) -> Taken {
    let n = match state.log.request_streams(session).await {
        Ok(n) => n,
        Err(LogError::NoSession(_) | LogError::SessionEnded) => return Taken::Gone,
        Err(e) => return Taken::Until(seen, e),
    };
    for r in seen + 1..=n {
        let meta = match state.log.request_meta(session, r).await {
            Ok(meta) => meta,
            // Gone (retention took a call's stream): not a message to read.
            Err(LogError::NoStream { .. } | LogError::Truncated { .. }) => continue,
            Err(LogError::NoSession(_) | LogError::SessionEnded) => return Taken::Gone,
            Err(e) => return Taken::Until(r - 1, e),
        };
        if always {
            if let Some(call) = end_asked_for(&meta, state.log.instance()) {
                // A call of an instance that lost the lease: ended here,
                // under this route's lease.
                if let Err(e) = crate::route::orphans::end_if_orphaned(state, session, call).await {
                    tracing::debug!(%session, stream = call, error = %e, "could not end a call of an instance that lost the lease");
                }
                if let Err(e) = state.log.retire_request_stream(session, r).await {
                    tracing::debug!(%session, stream = r, error = %e, "could not retire a carrier");
                }
                continue;
            }
            if let Some(ids) = abandoned_for(&meta, state.log.instance()) {
                // Calls an instance that lost the lease was answering on the
                // session stream: answered here, under this route's lease.
                answer_abandoned(state, session, &ids, true).await;
                if let Err(e) = state.log.retire_request_stream(session, r).await {
                    tracing::debug!(%session, stream = r, error = %e, "could not retire a carrier of abandoned calls");
                }
                continue;
            }
        }
        let Some(f) = forwarded(&meta, r) else {
            continue; // a call's own stream
        };
        let answer = f.message.get("method").is_none();
        let mine = f.owner == state.log.instance();
        if answer || (always && mine) {
            // Each forwarded call runs on its own: the watch reads on.
            let work =
                super::dispatch::dispatch(state, session, route, f.answer_on, f.message).await;
            super::dispatch::spawn_work(state, work);
        }
        // A call is answered on its carrier; anything else is read once.
        let call = matches!(f.answer_on, StreamKey::Request(_));
        if mine && !call {
            // Read by the instance it was for, and never again: retired, so
            // forwarded messages do not pile up in the session's streams (a
            // failure leaves it to the session's end).
            if let Err(e) = state.log.retire_request_stream(session, r).await {
                tracing::debug!(%session, stream = r, error = %e, "could not retire a forwarded message's carrier");
            }
        }
    }
    Taken::All(n)
}

/// The record of a carrier of calls an instance that lost the session's
/// lease was answering on the session stream, for the holder `owner` to
/// answer ([`hand_abandoned`]).
fn abandoned_carrier(ids: &[Value], owner: &str) -> Bytes {
    Bytes::from(json!({"abandoned": ids, "owner": owner}).to_string())
}

/// The calls of such a carrier, if it is one and is for `me`.
fn abandoned_for(meta: &[u8], me: &str) -> Option<Vec<Value>> {
    let v: Value = serde_json::from_slice(meta).ok()?;
    let ids = v.get("abandoned")?.as_array()?.clone();
    (v["owner"].as_str() == Some(me)).then_some(ids)
}

/// Commits the `lease-lost` error of each call in `ids` to the session
/// stream, fenced by this instance's lease when `fenced`.
async fn answer_abandoned(state: &AppState, session: &str, ids: &[Value], fenced: bool) {
    let errors: Vec<Bytes> = ids
        .iter()
        .map(|id| {
            let error = crate::jsonrpc::error_with_data(
                id,
                crate::jsonrpc::INTERNAL_ERROR,
                "the instance that ran this call lost the session's lease (it stopped or stalled); it may be retried",
                json!({"reason": "lease-lost"}),
            );
            Bytes::from(error.to_string())
        })
        .collect();
    if let Err(e) =
        crate::route::reply::commit(state, session, StreamKey::Session, errors, fenced).await
    {
        tracing::warn!(%session, error = %e, "could not answer the calls an instance that lost the lease abandoned");
    }
}

/// Calls `ids` of `session` this instance was answering on the session
/// stream when it lost the session's lease. It commits nothing more for the
/// session (the stream is its successor's now), so the lease holder
/// answers them: they are forwarded to it like a message
/// ([`Leases::open_carrier`](mcp_resume_log::Leases::open_carrier)); if this
/// instance holds the lease again (it claimed it back), it answers them
/// itself, under its new lease. Tried until the reply deadline.
pub(crate) async fn hand_abandoned(state: AppState, session: String, ids: Vec<Value>) {
    let deadline = std::time::Instant::now() + state.config.reply_deadline;
    let me = state.log.instance().to_owned();
    loop {
        match state.log.lease_holder(&session).await {
            Ok(Some(holder)) if holder != me => {
                let opened = state
                    .log
                    // The transport's own answers: never refused by the
                    // client's limit on the streams it opens.
                    .open_carrier(
                        &session,
                        &holder,
                        abandoned_carrier(&ids, &holder),
                        u64::MAX,
                    )
                    .await;
                if let Ok(Some(_)) = opened {
                    if ring(&state, &session, &holder).await.is_ok() {
                        return;
                    }
                }
            }
            Ok(Some(_)) => {
                answer_abandoned(&state, &session, &ids, true).await;
                return;
            }
            Err(LogError::NoSession(_) | LogError::SessionEnded) => return,
            // Nobody holds it yet (this instance claims it again), or the log
            // cannot tell now.
            Ok(None) | Err(_) => {}
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(%session, calls = ids.len(), "calls this instance was answering when it lost the session's lease could not be handed to its holder; they stay unanswered");
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asks `holder`, the holder of `session`'s lease, to end the call on
/// request stream `r`, whose instance lost the lease (`route::orphans`):
/// only the holder commits onto the session. A carrier like a forwarded
/// message's; nothing when `holder` gave the lease up meanwhile (whoever
/// looks next asks the next holder).
pub(crate) async fn ask_to_end(
    state: &AppState,
    session: &str,
    r: Seq,
    holder: &str,
) -> Result<(), LogError> {
    let meta = Bytes::from(json!({"end": r, "owner": holder}).to_string());
    if state
        .log
        // The transport's own request: never refused by the client's limit.
        .open_carrier(session, holder, meta, u64::MAX)
        .await?
        .is_some()
    {
        ring(state, session, holder).await?;
    }
    Ok(())
}

/// The request stream whose call such a carrier asks `me` to end.
fn end_asked_for(meta: &[u8], me: &str) -> Option<Seq> {
    let v: Value = serde_json::from_slice(meta).ok()?;
    let r = v.get("end")?.as_u64()?;
    (v["owner"].as_str() == Some(me)).then_some(r)
}
