//! Client messages for a session whose exclusive backend runs on another
//! instance (its owner, [`lease`](crate::route::lease)): forwarded through
//! the log ([`inbox`](crate::route::inbox)).
//!
//! A request gets a request stream of its own whose record carries it to the
//! owner and names the owner as the instance that runs its handler: the owner
//! commits everything the call sends there, and the client reads it from
//! `R/0` on this instance, resumable like any request stream. If the owner
//! dies first, the orphan sweep ends the call with an error (checked at each
//! keepalive of the stream, and here while a JSON answer is awaited). A
//! notification is forwarded and answered 202.
//!
//! A carrier is opened only while the owner it names holds the lease
//! ([`Leases::open_carrier`](mcp_resume_log::Leases::open_carrier)): an owner
//! that gave the lease up at its graceful stop is never sent what it will
//! not read; the message is then located again (`None` here).

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use mcp_resume_log::{LogError, StreamKey, Subscription};
use serde_json::Value;

use super::guard::Accepts;
use crate::backend::Message;
use crate::error::ApiError;
use crate::route::inbox;
use crate::route::orphans;
use crate::route::state::AppState;
use crate::{jsonrpc, sse};

/// How often a JSON answer awaited from another instance checks that the
/// instance still lives.
const ORPHAN_CHECK: Duration = Duration::from_secs(5);

/// A request or notification POSTed for a session owned by `owner`; `None`
/// when `owner` no longer holds the lease (nothing was forwarded).
pub(super) async fn message(
    state: &AppState,
    session: &str,
    owner: &str,
    acc: Accepts,
    message: &Value,
) -> Result<Option<Response>, ApiError> {
    let Some(id) = message.get("id") else {
        if !inbox::forward_to_owner(state, session, message, owner).await? {
            return Ok(None);
        }
        return Ok(Some(axum::http::StatusCode::ACCEPTED.into_response()));
    };
    let Some((stream, head, sub)) = request(state, session, owner, message, id).await? else {
        return Ok(None);
    };
    if acc.sse {
        let session = session.to_owned();
        return Ok(Some(sse::respond(
            state.clone(),
            session,
            stream,
            0,
            head,
            sub,
        )));
    }
    let reply = answer(state, session, stream, sub, id).await;
    Ok(Some(super::relay::json_reply(reply)))
}

/// Forwards request `message` (id `id`) to `owner` on a request stream of
/// its own, subscribed from its start; `None` when `owner` no longer holds
/// the lease.
pub(super) async fn request(
    state: &AppState,
    session: &str,
    owner: &str,
    message: &Value,
    id: &Value,
) -> Result<Option<(StreamKey, u64, Subscription)>, ApiError> {
    let opened = super::open_carrier(
        state,
        session,
        owner,
        inbox::carrier(message, Some(owner), Some(id)),
        // One attempt: nothing runs yet, and a 503 tells the client to retry.
        std::time::Instant::now(),
    )
    .await?;
    match opened {
        Some(_) => inbox::ring(state, session, owner).await?,
        None => state.routes.forget_owner(session),
    }
    Ok(opened)
}

/// Awaits the response on a forwarded call's stream, for a client that reads
/// JSON: the owner's, or the error the orphan sweep commits if it died.
pub(super) async fn answer(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    mut sub: Subscription,
    id: &Value,
) -> Message {
    let StreamKey::Request(r) = stream else {
        return Message::Value(unanswered(id, "not a request stream"));
    };
    loop {
        match tokio::time::timeout(ORPHAN_CHECK, sub.next()).await {
            // The answer as the log holds it: passed on as its backend wrote it.
            Ok(Ok(ev)) => {
                if jsonrpc::answer_id(&ev.message).as_ref() == Some(id) {
                    return Message::Text(ev.message);
                }
            }
            Ok(Err(e)) => return Message::Value(unanswered(id, &e.to_string())),
            Err(_) => {
                if let Err(e) = orphans::end_if_orphaned(state, session, r).await {
                    if !matches!(e, LogError::Unavailable(_)) {
                        return Message::Value(unanswered(id, &e.to_string()));
                    }
                }
            }
        }
    }
}

/// The answer of a forwarded call whose stream ended without one.
fn unanswered(id: &Value, why: &str) -> Value {
    jsonrpc::error(
        id,
        jsonrpc::INTERNAL_ERROR,
        format!("the call's answer could not be read: {why}"),
    )
}
