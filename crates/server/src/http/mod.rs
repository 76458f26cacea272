//! The Streamable HTTP endpoints of docs/protocol.md 3: POST, GET and DELETE on
//! `P`, and the session stream on `P/session/{id}/events`.

mod forward;
mod guard;
mod open;
pub(crate) mod ops;
mod pin_guard;
mod post;
pub(crate) mod relay;
mod stateless;
mod task_events;
pub(crate) use crate::route::streams::{open_call_stream, open_carrier};
pub(crate) mod subs;
mod ws;
mod ws_mcp;
pub(crate) use stateless::META_CAPABILITIES;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::{LogError, Seq, StreamKey};
use mcp_resume_proto::EventId;

use crate::error::ApiError;
use crate::route::state::AppState;
use crate::session::valid_session_id;
use crate::sse;

pub use guard::CursorQuery;
use guard::{accepts, session_header};
pub(crate) use guard::{cursor, guard, live_session, query, Principal, Want};
pub(crate) use post::PostService;
pub use task_events::task_events;

/// `GET P`: the session stream over SSE, or a request stream with `Last-Event-ID: R/n`.
pub async fn get(
    State(state): State<AppState>,
    q: Result<Query<CursorQuery>, QueryRejection>,
    headers: HeaderMap,
    ws: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Result<Response, ApiError> {
    let principal = guard(&state, &headers, false).await?;
    if let (Ok(ws), true) = (ws, ws_mcp::offered(&headers)) {
        // MCP over a plain WebSocket (subprotocol `mcp`): the socket is the
        // session (`ws_mcp`).
        if !state.config.websocket {
            return Err(ApiError::UpgradeRequired);
        }
        return Ok(ws_mcp::accept(state, principal, ws));
    }
    guard::refuse_stateless(&headers)?;
    let q = query(q)?;
    if !accepts(&headers).sse {
        return Err(ApiError::NotAcceptable(
            "GET needs Accept: text/event-stream".into(),
        ));
    }
    let Some(session) = session_header(&headers)? else {
        return Err(ApiError::bad(
            "missing-session-id",
            "GET needs Mcp-Session-Id",
        ));
    };
    let live = live_session(&state, &session, &headers, &principal, Want::Check).await?;
    let at = cursor(&headers, &q)?;
    if !live.plain && !matches!(at, Some(EventId::Request { .. })) {
        subs::end_if_orphaned(&state, &session).await?;
    }
    match at {
        Some(EventId::Request { stream, seq }) => {
            open_reader(state, session, StreamKey::Request(stream), Some(seq)).await
        }
        Some(EventId::Session(seq)) => {
            open_reader(state, session, StreamKey::Session, Some(seq)).await
        }
        None => open_reader(state, session, StreamKey::Session, None).await,
    }
}

/// Opens an SSE reader at the commit point, refusing cursors it cannot honour.
async fn open_reader(
    state: AppState,
    session: String,
    stream: StreamKey,
    cursor: Option<Seq>,
) -> Result<Response, ApiError> {
    if let StreamKey::Request(r) = stream {
        // A call whose handler died with its process gets its error response
        // now, so this reader sees the call end instead of waiting forever.
        match crate::route::orphans::end_if_orphaned(&state, &session, r).await {
            Ok(_) | Err(LogError::NoStream { .. } | LogError::Truncated { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (bounds, sub) = state.log.subscribe(&session, stream).await?;
    let cursor = cursor.unwrap_or(bounds.floor - 1);
    bounds.admit(cursor).map_err(ApiError::Discontinuity)?;
    Ok(sse::respond(
        state,
        session,
        stream,
        cursor,
        bounds.head,
        sub,
    ))
}

/// `DELETE P`: ends the session.
pub async fn delete(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let principal = guard(&state, &headers, false).await?;
    guard::refuse_stateless(&headers)?;
    let Some(session) = session_header(&headers)? else {
        return Err(ApiError::bad(
            "missing-session-id",
            "DELETE needs Mcp-Session-Id",
        ));
    };
    live_session(&state, &session, &headers, &principal, Want::Check).await?;
    let ended = state.log.end_session(&session).await;
    state.routes.close(&session);
    state.heads.forget(&session);
    match ended {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(LogError::NoSession(id)) => Err(ApiError::NoSession(id)),
        Err(e) => Err(e.into()),
    }
}

/// `GET P/session/{id}/events`: SSE, or the WebSocket upgrade of docs/protocol.md 5.
pub async fn session_events(
    State(state): State<AppState>,
    Path(id): Path<String>,
    q: Result<Query<CursorQuery>, QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    let (mut parts, _) = req.into_parts();
    let upgrade = parts.headers.contains_key(header::UPGRADE);
    let principal = guard(&state, &parts.headers, upgrade).await?;
    let q = query(q)?;
    if !valid_session_id(&id) {
        return Err(ApiError::NoSession(id));
    }
    if let Some(hdr) = session_header(&parts.headers)? {
        if hdr != id {
            return Err(ApiError::bad(
                "session-mismatch",
                "the {id} in the path differs from Mcp-Session-Id",
            ));
        }
    }
    if upgrade {
        return ws::upgrade(state, id, &q, principal, &mut parts).await;
    }
    if !accepts(&parts.headers).sse {
        return Err(ApiError::NotAcceptable(
            "the session stream needs Accept: text/event-stream".into(),
        ));
    }
    let prior = session_cursor(&parts.headers, &q)?;
    if !live_session(&state, &id, &parts.headers, &principal, Want::Check)
        .await?
        .plain
    {
        subs::end_if_orphaned(&state, &id).await?;
    }
    open_reader(state, id, StreamKey::Session, prior).await
}

/// A session-stream cursor; `R/n` is refused here.
pub(crate) fn session_cursor(
    headers: &HeaderMap,
    q: &CursorQuery,
) -> Result<Option<Seq>, ApiError> {
    match cursor(headers, q)? {
        None => Ok(None),
        Some(EventId::Session(s)) => Ok(Some(s)),
        Some(id @ EventId::Request { .. }) => Err(ApiError::invalid_cursor(format!(
            "{id} names a request stream; this endpoint serves the session stream"
        ))),
    }
}
