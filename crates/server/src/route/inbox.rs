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

/// Forwards `message` (a notification, or a client's response to a server
/// request this instance did not send) to instance `to` (the session's
/// owner, or the instance whose route sent the request it answers),
/// through the log, and rings its bell. An error: the message may not
/// arrive, and the client must be told (503), never `202`.
pub(crate) async fn forward(
    state: &AppState,
    session: &str,
    message: &Value,
    to: &str,
) -> Result<(), LogError> {
    state
        .log
        .open_request_stream(session, carrier(message, Some(to), None))
        .await?;
    ring(state, session, to).await
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
                // happens to reach this instance directly.
                let _ = super::lease::locate(&state, &session).await;
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
        match take(&state, &session, &route, seen, always).await {
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

/// Another instance took the lease of `session` while requests forwarded to
/// this one after `seen` were not read yet: they end with -32603
/// `lease-lost` instead of waiting forever.
pub(crate) async fn end_forwarded(state: &AppState, session: &str, seen: Seq) {
    let Ok(n) = state.log.request_streams(session).await else {
        return;
    };
    for r in seen + 1..=n {
        let Some(f) = state
            .log
            .request_meta(session, r)
            .await
            .ok()
            .and_then(|meta| forwarded(&meta, r))
        else {
            continue;
        };
        let Some(id) = f
            .message
            .get("id")
            .filter(|_| f.message.get("method").is_some())
        else {
            continue;
        };
        if f.owner != state.log.instance() {
            continue;
        }
        let reply = crate::jsonrpc::error_with_data(
            id,
            crate::jsonrpc::INTERNAL_ERROR,
            "this instance lost the session's lease before it read this call; it may be retried",
            json!({"reason": "lease-lost"}),
        );
        crate::route::reply::commit_response(state, session, f.answer_on, &reply).await;
    }
}
