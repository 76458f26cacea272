//! The resumable listen stream: an extension of MCP 2026-07-28 that gives
//! `subscriptions/listen` the guarantees of a 2025 session stream
//! (docs/protocol.md 3.7).
//!
//! In the stateless era a listen stream is the body of one POST, and a
//! broken connection loses whatever was sent meanwhile. A client that
//! declares the extension (`clientCapabilities.extensions` has
//! [`EXTENSION`], which `server/discover` offers) gets instead a stream `L`
//! that is a log session of its own: the backend's acknowledgement and every
//! notification it sends for the subscription are committed to `L`'s
//! session stream before any client sees them, with contiguous ids. The POST
//! streams `L` from its start and names it in [`LISTEN_HEADER`]; after a
//! disconnect the client reads `L` again from its cursor as it would a
//! session stream (`GET P` with `Mcp-Session-Id: L` and `Last-Event-ID`,
//! `GET P/session/L/events`, or the cursor-safe WebSocket upgrade), with the
//! same 409 for a cursor that cannot be honoured.
//!
//! The backend that feeds `L` runs on the instance that opened it (unless
//! it [listens anywhere](crate::backend::Backend::listen_anywhere), as the
//! built-in tools do: any instance's `emit` called on `L` writes to it). If
//! that instance dies, nothing feeds `L` any more: the next reader to open it
//! ends it ([`end_if_orphaned`]), and gets 404, so the client listens again
//! (and re-lists what it follows) instead of waiting on a silent stream.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::{LogError, StreamKey};
use mcp_resume_proto::headers as h;
use serde_json::Value;

use crate::error::ApiError;
use crate::route::state::AppState;
use crate::session::{new_session_id, ListenRecord, SessionRecord};
use crate::tasks::Caller;
use crate::{jsonrpc, sse};

/// The extension's identifier, in capabilities.
pub const EXTENSION: &str = mcp_resume_proto::RESUMABLE_LISTEN_EXTENSION;

/// The response header that names a resumable listen stream `L`.
pub const LISTEN_HEADER: &str = h::RESUME_LISTEN;

/// Whether `message` is a `subscriptions/listen` whose client declared the
/// extension.
pub(super) fn wants_resumable(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some("subscriptions/listen")
        && message
            .pointer("/params/_meta")
            .and_then(|m| m.get(super::META_CAPABILITIES))
            .and_then(|c| c.get("extensions"))
            .and_then(|e| e.get(EXTENSION))
            .is_some()
}

/// Opens a resumable listen stream for `message` and answers the POST with it.
pub(super) async fn open(
    state: &AppState,
    caller: Caller,
    headers: &HeaderMap,
    message: Value,
) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if headers
        .get(h::MCP_METHOD)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|m| m.trim() != "subscriptions/listen")
    {
        let reply = jsonrpc::error(&id, -32020, "Mcp-Method differs from the body's method");
        return (StatusCode::BAD_REQUEST, axum::Json(reply)).into_response();
    }
    match open_stream(state, caller, message, &id).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn open_stream(
    state: &AppState,
    caller: Caller,
    message: Value,
    id: &Value,
) -> Result<Response, ApiError> {
    if state.log.live_sessions().await >= state.config.max_sessions {
        return Err(ApiError::TooMany(format!(
            "the server holds its maximum of {} sessions and listen streams; retry later",
            state.config.max_sessions
        )));
    }
    let listen = new_session_id();
    let record = SessionRecord {
        protocol_version: mcp_resume_proto::STATELESS_PROTOCOL_VERSIONS[0].to_owned(),
        principal: caller.0,
        listen: Some(ListenRecord {
            owner: (!state.backend.listen_anywhere()).then(|| state.log.instance().to_owned()),
        }),
        ..SessionRecord::default()
    };
    state.log.create_session(&listen, record.encode()).await?;
    let (bounds, sub) = state.log.subscribe(&listen, StreamKey::Session).await?;
    state.routes.follow_bell(state).await?;
    let route = match state.routes.open(state, &listen, None, None) {
        Ok(r) => r,
        Err(e) => {
            let _ = state.log.end_session(&listen).await;
            return Err(ApiError::Internal(e.to_string()));
        }
    };
    // Everything the backend sends for it (the acknowledgement, the
    // notifications, a final result) is committed to L's session stream.
    let work =
        crate::route::dispatch::dispatch(state, &listen, &route, StreamKey::Session, message).await;
    crate::route::dispatch::spawn_work(state, work);
    tracing::debug!(listen = %listen, id = %id, "resumable listen stream opened");
    let mut resp = sse::respond(
        state.clone(),
        listen.clone(),
        StreamKey::Session,
        0,
        bounds.head,
        sub,
    );
    resp.headers_mut().insert(
        LISTEN_HEADER,
        HeaderValue::from_str(&listen).map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    Ok(resp)
}

/// Ends listen stream `session` if the instance that fed it is gone, so its
/// reader gets 404 instead of a stream nothing will ever add to; a no-op for
/// anything else.
pub(crate) async fn end_if_orphaned(state: &AppState, session: &str) -> Result<(), ApiError> {
    let rec = match state.record(session).await {
        Ok(r) => r,
        Err(LogError::NoSession(_) | LogError::SessionEnded) => {
            return Err(ApiError::NoSession(session.to_owned()))
        }
        Err(e) => return Err(e.into()),
    };
    let Some(owner) = rec.listen.and_then(|l| l.owner) else {
        return Ok(());
    };
    if owner == state.log.instance() || state.log.instance_alive(&owner).await? {
        return Ok(());
    }
    tracing::info!(
        listen = session,
        "ended a listen stream whose instance is gone"
    );
    match state.log.end_session(session).await {
        Ok(()) | Err(LogError::NoSession(_)) => {}
        Err(e) => return Err(e.into()),
    }
    Err(ApiError::NoSession(session.to_owned()))
}
