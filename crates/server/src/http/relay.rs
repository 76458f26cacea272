//! A client's messages to its session's [`Backend`](crate::backend::Backend)
//! (POST, batch, WebSocket frame): every message goes to the backend through
//! the session's route (on this instance, or forwarded to the one that runs
//! it), and what comes back is answered as JSON or committed to a request
//! stream.
//!
//! - `initialize` is [`super::open`]'s: it creates the session;
//! - a `tools/call` from a client that accepts JSON and SSE is answered as
//!   JSON if it only answers; its first progress or request to the client
//!   opens a request stream `R` for it (the POST then streams `R` from its
//!   start), which carries everything after;
//! - any request from a client that accepts only SSE gets `R` at once, and
//!   so does a call the backend streams at once (a streaming tool);
//! - other requests are answered as JSON;
//! - a response to a server request is translated back to the backend's id
//!   and delivered; one nobody waits for is logged and dropped (202);
//! - `notifications/cancelled` ends the cancelled call's stream with an
//!   error (a request stream always ends with a response) before the
//!   backend stops the handler.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::{LogError, StreamKey};
use serde_json::Value;
use tokio::sync::oneshot;

use super::guard::Accepts;
use crate::backend::Message;
use crate::error::ApiError;
use crate::jsonrpc;
use crate::route::dispatch::{cancelled, deliver, deliver_answer, dispatch, spawn_work};
use crate::route::lease::Located;
use crate::route::state::AppState;
use crate::route::table::{Answer, Dest};
use crate::route::{self, SessionRoute};
use crate::sse;

/// Any message but `initialize` on a live session.
///
/// `taken`: the session's route here, if the request's checks took it
/// already (`guard::live_session`); used while its lease holds. `read`:
/// the session's record, if the checks read it (a route opened here for
/// the message takes it instead of a second read). The state
/// is taken, not borrowed, so that a POST's checks can hand theirs on
/// (`post::post`). An `async fn`, so its arguments are kept twice (about
/// 110 bytes): the POST's boxed future (648 bytes at 1d32b7d, about 64
/// more since `read`, not measured again) is well under the allocator's
/// 1,032-byte thread cache with them.
pub(super) async fn message(
    state: AppState,
    session: String,
    acc: Accepts,
    message: Value,
    taken: Option<Arc<SessionRoute>>,
    mut read: Option<bytes::Bytes>,
) -> Result<Response, ApiError> {
    let state = &state;
    // The paths other than a call answered here are boxed: this future is
    // as large as the largest it awaits, and is moved for every request.
    if message.get("method").and_then(Value::as_str).is_none() {
        // An answer to a server request (a POST refuses a `method` that is
        // not a string): no backend needs starting for it.
        Box::pin(client_answer(state, &session, message)).await?;
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let mut taken = taken.filter(|r| !r.lease_lost(&*state.log));
    let mut moves = 0;
    let route = loop {
        let located = match taken.take() {
            Some(r) => Located::Here(r),
            None => Box::pin(route::lease::locate_read(state, &session, read.take())).await?,
        };
        match located {
            Located::Here(r) => break r,
            Located::There(owner) => {
                let forwarded = Box::pin(super::forward::message(
                    state, &session, &owner, acc, &message,
                ))
                .await?;
                if let Some(response) = forwarded {
                    return Ok(response);
                }
                moves += 1;
                if moves >= RELOCATE {
                    return Err(owner_moving());
                }
            }
        }
    };
    // Decided from the message as it is (its method borrowed, not copied;
    // a string, checked above) before it moves on.
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = if message.get("id").is_none() {
        Kind::Notification {
            cancel: method == "notifications/cancelled",
        }
    } else if acc.sse && (!acc.json || state.backend.streams_at_once(method, params_of(&message))) {
        Kind::Stream
    } else if acc.sse && method == "tools/call" {
        Kind::Lazy
    } else {
        Kind::Json
    };
    match kind {
        Kind::Stream => Box::pin(call_stream(state, session, &route, message)).await,
        Kind::Lazy => call_lazy(state, session, &route, message).await,
        Kind::Json => {
            let reply = call_json(state, &session, &route, message).await;
            Ok(json_reply(reply))
        }
        Kind::Notification { cancel } => {
            if cancel {
                Box::pin(cancelled(state, &session, &route, &message)).await;
            }
            // A notification the backend cannot read is dropped: nobody
            // waits for an answer to it.
            if let Err(e) = route.deliver(message) {
                tracing::debug!(%session, error = %e, "a notification was not delivered");
            }
            Ok(StatusCode::ACCEPTED.into_response())
        }
    }
}

/// How many times a message is located again when the owner it was to be
/// forwarded to gave the session's lease up meanwhile (its graceful stop).
const RELOCATE: usize = 3;

/// The refusal of a message whose session's owner kept changing while it
/// was forwarded: nothing was delivered, and it may be sent again.
fn owner_moving() -> ApiError {
    ApiError::Unavailable(
        "the session's backend is moving between instances; nothing was delivered, retry".into(),
    )
}

/// How a client's message on a live session is answered.
enum Kind {
    /// A request answered on a request stream of its own ([`call_stream`]).
    Stream,
    /// A `tools/call` answered as JSON unless it streams ([`call_lazy`]).
    Lazy,
    /// A request answered as JSON ([`call_json`]).
    Json,
    /// A notification (`cancel`: `notifications/cancelled`, which ends its
    /// call first).
    Notification { cancel: bool },
}

/// The client's response to a server request: delivered to the route that
/// sent the request if it is on this instance, else forwarded through the
/// log to the instance that did (route::inbox; an error if it could not be,
/// so the client is told and may send it again). One that nobody awaits is
/// logged and dropped.
async fn client_answer(state: &AppState, session: &str, message: Value) -> Result<(), LogError> {
    let wire = message
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let wire = wire.as_str();
    let local = state.routes.peek(session).filter(|r| r.owns(wire));
    match local {
        Some(route) => {
            if !deliver_answer(session, &route, message) {
                tracing::warn!(%session, id = wire, "a response to a server request answered already is dropped")
            }
        }
        None => match crate::route::asker(wire) {
            Some(asker) => {
                if let Err(e) = crate::route::inbox::forward(state, session, &message, asker).await
                {
                    tracing::warn!(%session, id = wire, error = %e, "could not forward a response to the instance that asked");
                    return Err(e);
                }
            }
            None => {
                tracing::warn!(%session, id = %message["id"], "a response to a request this server never sent is dropped")
            }
        },
    }
    Ok(())
}

/// A message's `params` (`null` when it has none).
fn params_of(message: &Value) -> &Value {
    const NULL: Value = Value::Null;
    message.get("params").unwrap_or(&NULL)
}

/// A request answered as JSON: registered, delivered, awaited.
pub(super) async fn call_json(
    state: &AppState,
    session: &str,
    route: &SessionRoute,
    message: Value,
) -> Message {
    let id = message["id"].clone();
    let (tx, rx) = oneshot::channel();
    if let Err(why) = route.register(&id, params_of(&message), Dest::Json(tx)) {
        return Message::Value(why.reply(&id));
    }
    let work = deliver(state, session, route, message, &id).await;
    answered(state, route, &id, work, rx)
        .await
        .unwrap_or_else(|| Message::Value(unanswered(&id)))
}

/// A call's answer as the `200` JSON body of its POST: a backend's own
/// encoding as it is, a value encoded here.
pub(super) fn json_reply(reply: Message) -> Response {
    match reply {
        Message::Value(v) => axum::Json(v).into_response(),
        Message::Text(text) => {
            // One header written, not `Bytes`'s own content type replaced.
            let mut resp = Response::new(axum::body::Body::from(text));
            resp.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
    }
}

/// Runs the `work` that answers call `id` (if the backend handed it back)
/// in this task until the call's answer comes on `rx`; work that goes on
/// after it (a lazy call whose stream opened) continues in a task of its
/// own. If this task is dropped first (the client hung up), the call is
/// forgotten, so that nothing waits for it.
async fn answered<T>(
    state: &AppState,
    route: &SessionRoute,
    id: &Value,
    work: Option<crate::backend::Work>,
    mut rx: oneshot::Receiver<T>,
) -> Option<T> {
    let Some(mut work) = work else {
        return rx.await.ok();
    };
    struct Forget<'a>(Option<(&'a SessionRoute, &'a Value)>);
    impl Drop for Forget<'_> {
        fn drop(&mut self) {
            if let Some((route, id)) = self.0 {
                route.forget(id);
            }
        }
    }
    let mut guard = Forget(Some((route, id)));
    let answer = tokio::select! {
        biased;
        r = &mut rx => {
            state.spawn(work);
            r.ok()
        }
        () = &mut work => rx.await.ok(),
    };
    guard.0 = None;
    answer
}

/// A `tools/call` answered as JSON if it only answers, or as a request
/// stream opened at its first progress or request to the client.
async fn call_lazy(
    state: &AppState,
    session: String,
    route: &SessionRoute,
    message: Value,
) -> Result<Response, ApiError> {
    let id = message["id"].clone();
    let (tx, rx) = oneshot::channel();
    if let Err(why) = route.register(&id, params_of(&message), Dest::Lazy(tx)) {
        return Ok(axum::Json(why.reply(&id)).into_response());
    }
    let work = deliver(state, &session, route, message, &id).await;
    Ok(match answered(state, route, &id, work, rx).await {
        Some(Answer::Json(reply)) => json_reply(reply),
        Some(Answer::Stream { stream, head, sub }) => {
            sse::respond(state.clone(), session, stream, 0, head, sub)
        }
        None => axum::Json(unanswered(&id)).into_response(),
    })
}

/// A request answered on a request stream of its own.
async fn call_stream(
    state: &AppState,
    session: String,
    route: &SessionRoute,
    message: Value,
) -> Result<Response, ApiError> {
    let id = message["id"].clone();
    // One attempt: nothing runs yet, and a 503 tells the client to retry.
    let now = std::time::Instant::now();
    let (stream, head, sub) = super::open_call_stream(state, &session, &id, now).await?;
    match route.register(&id, params_of(&message), Dest::Stream(stream)) {
        Err(why) => {
            let reply = why.reply(&id);
            let fenced = route.fenced();
            crate::route::reply::commit_response(state, &session, stream, &reply, fenced).await;
        }
        Ok(()) => {
            let work = deliver(state, &session, route, message, &id).await;
            spawn_work(state, work);
        }
    }
    Ok(sse::respond(state.clone(), session, stream, 0, head, sub))
}

/// A message that arrived over a WebSocket: a request is answered on the
/// session stream (docs/protocol.md 5.3).
pub(crate) async fn socket_message(state: &AppState, session: &str, message: Value) {
    if message.get("method").is_none() {
        if let Err(e) = client_answer(state, session, message).await {
            tracing::warn!(%session, error = %e, "a WebSocket client's answer to a server request could not be forwarded");
        }
        return;
    }
    for _ in 0..RELOCATE {
        match route::lease::locate(state, session).await {
            Ok(Located::Here(route)) => {
                // Run here: this task is the WebSocket frame's (bounded per socket).
                if let Some(work) =
                    dispatch(state, session, &route, StreamKey::Session, message).await
                {
                    work.await;
                }
                return;
            }
            Ok(Located::There(owner)) => {
                // Its request is answered on the session stream, as here.
                match route::inbox::forward_to_owner(state, session, &message, &owner).await {
                    Ok(true) => return,
                    Ok(false) => continue,
                    Err(e) => {
                        tracing::warn!(%session, error = %e, "a WebSocket message could not be forwarded to the session's owner");
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(%session, error = %e, "a WebSocket message has no backend");
                return;
            }
        }
    }
    tracing::warn!(%session, "a WebSocket message was not delivered: the session's owner kept changing");
}

/// A 2025-03-26 batch through the backend: every request answered as JSON.
pub(super) async fn batch(
    state: &AppState,
    session: &str,
    items: &[Value],
) -> Result<Vec<Value>, ApiError> {
    let route = match route::lease::locate(state, session).await? {
        Located::Here(r) => r,
        Located::There(owner) => return forwarded_batch(state, session, &owner, items).await,
    };
    let mut waiting = Vec::new();
    let mut replies = Vec::new();
    for item in items {
        match jsonrpc::Incoming::classify(item) {
            Ok(jsonrpc::Incoming::Request { id, params, .. }) => {
                let (tx, rx) = oneshot::channel();
                if let Err(why) = route.register(id, params, Dest::Json(tx)) {
                    replies.push(why.reply(id));
                    continue;
                }
                let work = deliver(state, session, &route, item.clone(), id).await;
                spawn_work(state, work);
                waiting.push((id.clone(), rx));
            }
            Ok(jsonrpc::Incoming::Response) => client_answer(state, session, item.clone()).await?,
            Ok(jsonrpc::Incoming::Notification) => {
                let _ = route.deliver(item.clone());
            }
            Err(why) => replies.push(jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, why)),
        }
    }
    for (id, rx) in waiting {
        replies.push(
            rx.await
                .map_or_else(|_| unanswered(&id), |m| m.into_value(&id)),
        );
    }
    Ok(replies)
}

/// A batch for a session owned by another instance: each request forwarded
/// on a stream of its own and its answer awaited there.
async fn forwarded_batch(
    state: &AppState,
    session: &str,
    owner: &str,
    items: &[Value],
) -> Result<Vec<Value>, ApiError> {
    let mut waiting = Vec::new();
    let mut replies = Vec::new();
    for item in items {
        match jsonrpc::Incoming::classify(item) {
            // An owner that gives the lease up halfway through is told as
            // a retryable refusal: a batch is not located again piecemeal.
            Ok(jsonrpc::Incoming::Request { id, .. }) => {
                let (stream, _, sub) = super::forward::request(state, session, owner, item, id)
                    .await?
                    .ok_or_else(owner_moving)?;
                waiting.push((id.clone(), stream, sub));
            }
            Ok(jsonrpc::Incoming::Response) => client_answer(state, session, item.clone()).await?,
            Ok(jsonrpc::Incoming::Notification) => {
                if !route::inbox::forward_to_owner(state, session, item, owner).await? {
                    return Err(owner_moving());
                }
            }
            Err(why) => replies.push(jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, why)),
        }
    }
    for (id, stream, sub) in waiting {
        let reply = super::forward::answer(state, session, stream, sub, &id).await;
        replies.push(reply.into_value(&id));
    }
    Ok(replies)
}

/// The answer of a call whose answer was lost (the route dropped it without
/// a word: never expected, but never a hang either).
fn unanswered(id: &Value) -> Value {
    jsonrpc::error(
        id,
        jsonrpc::INTERNAL_ERROR,
        "the call ended without an answer",
    )
}
