//! Handing a client's message to a route on this instance: a request
//! (registered to be answered at its destination, then delivered to the
//! backend), a notification (a cancel ends its call first), or an answer to
//! a server request (translated back to the backend's id). For POSTs, for
//! WebSocket messages and for messages forwarded from other instances.

use mcp_resume_log::StreamKey;
use serde_json::{json, Value};

use super::table::Dest;
use super::SessionRoute;
use crate::backend::{DeliverError, Work};
use crate::jsonrpc;
use crate::route::state::AppState;

/// Hands the client's answer to a server request to the backend of `route`,
/// translated back to the backend's id; false when that route awaits no
/// such answer.
pub(crate) fn deliver_answer(session: &str, route: &SessionRoute, message: Value) -> bool {
    let Some(m) = route.client_response(message) else {
        return false;
    };
    if let Err(e) = route.deliver(m) {
        tracing::warn!(%session, error = %e, "a response to a server request was not delivered");
    }
    true
}

/// The client cancelled a call: its answer is an error now (a request
/// stream must end with a response), and the backend's late one is dropped.
pub(crate) async fn cancelled(
    state: &AppState,
    session: &str,
    route: &SessionRoute,
    message: &Value,
) {
    let Some(id) = message.get("params").and_then(|p| p.get("requestId")) else {
        return;
    };
    if let Some(dest) = route.forget(id) {
        let reply = jsonrpc::error_with_data(
            id,
            jsonrpc::INTERNAL_ERROR,
            "the client cancelled this call",
            json!({"reason": "cancelled"}),
        );
        super::answer(state, session, dest, reply, route.fenced()).await;
    }
}

/// Hands a client message to a route on this instance: a request (answered
/// on `answer_on`), a notification, or an answer to a server request. For
/// WebSocket messages and messages forwarded from other instances. The work
/// that answers a request, if the backend handed it back: the caller runs it
/// (or spawns it, [`spawn_work`]).
pub(crate) async fn dispatch(
    state: &AppState,
    session: &str,
    route: &SessionRoute,
    answer_on: StreamKey,
    message: Value,
) -> Option<Work> {
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned);
    match (method, message.get("id").cloned()) {
        (Some(_), Some(id)) => {
            let params = message.get("params").cloned().unwrap_or(Value::Null);
            if let Err(why) = route.register(&id, &params, Dest::Stream(answer_on)) {
                let reply = why.reply(&id);
                crate::route::reply::commit_response(
                    state,
                    session,
                    answer_on,
                    &reply,
                    route.fenced(),
                )
                .await;
                return None;
            }
            deliver(state, session, route, message, &id).await
        }
        (Some(method), None) => {
            if method == "notifications/cancelled" {
                cancelled(state, session, route, &message).await;
            }
            let _ = route.deliver(message);
            None
        }
        (None, _) => {
            if !deliver_answer(session, route, message) {
                tracing::debug!(%session, "a forwarded answer this route does not await")
            }
            None
        }
    }
}

/// Runs `work` in a task of its own, which the server's shutdown waits for.
pub(crate) fn spawn_work(state: &AppState, work: Option<Work>) {
    if let Some(work) = work {
        state.spawn(work);
    }
}

/// Hands a registered request to the backend; one it refuses is answered
/// with an error where the call is answered. The work that answers it, if
/// the backend handed it back to run.
pub(crate) async fn deliver(
    state: &AppState,
    session: &str,
    route: &SessionRoute,
    message: Value,
    id: &Value,
) -> Option<Work> {
    let reply = match route.deliver_request(message) {
        Ok(work) => return work,
        Err(DeliverError::Invalid(why)) => jsonrpc::error(id, jsonrpc::INVALID_PARAMS, why),
        Err(e) => jsonrpc::error_with_data(
            id,
            jsonrpc::INTERNAL_ERROR,
            format!("{e}; it may be retried"),
            json!({"reason": "backend-stopped"}),
        ),
    };
    if let Some(dest) = route.forget(id) {
        // Boxed: committing the refusal is a large future, and a call's
        // future (moved into a box per request) would be as large.
        Box::pin(super::answer(state, session, dest, reply, route.fenced())).await;
    }
    None
}
