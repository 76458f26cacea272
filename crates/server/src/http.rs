//! The Streamable HTTP endpoints of docs/protocol.md 3: POST, GET and DELETE on
//! `P`, and the session stream on `P/session/{id}/events`.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::{LogError, Seq, StreamKey};
use mcp_resume_proto::{headers as h, EventId, SUPPORTED_PROTOCOL_VERSIONS};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::jsonrpc::{self, Incoming};
use crate::session::{new_session_id, valid_session_id, SessionRecord};
use crate::state::AppState;
use crate::{mcp, sse, ws};

/// The `last_event_id` query parameter.
#[derive(Debug, Deserialize, Default)]
pub struct CursorQuery {
    last_event_id: Option<String>,
}

/// Credentials (bearer token or OAuth access token), then `Origin` and
/// `MCP-Protocol-Version`, before anything else; returns who is calling.
pub(crate) async fn guard(
    state: &AppState,
    headers: &HeaderMap,
    token_in_subprotocol: bool,
) -> Result<Principal, ApiError> {
    let principal = state
        .config
        .auth
        .authenticate(headers, token_in_subprotocol)
        .await?
        .map(|p| p.subject);
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !origin_allowed(&state.config, origin) {
            return Err(ApiError::Forbidden(origin.to_owned()));
        }
    }
    if let Some(v) = headers.get(h::MCP_PROTOCOL_VERSION) {
        let v = v.to_str().unwrap_or_default();
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&v) {
            return Err(ApiError::bad(
                "unsupported-protocol-version",
                format!("MCP-Protocol-Version {v:?} is not supported; use one of {SUPPORTED_PROTOCOL_VERSIONS:?}"),
            ));
        }
    }
    Ok(principal)
}

pub(crate) fn origin_allowed(config: &crate::ServerConfig, origin: &str) -> bool {
    if config
        .allowed_origins
        .iter()
        .any(|o| o == "*" || o == origin)
    {
        return true;
    }
    if !config.allow_loopback_origins {
        return false;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split_once(']')
            .map(|(h, _)| &h[1..])
            .unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}

/// What an `Accept` header allows.
struct Accepts {
    json: bool,
    sse: bool,
}

fn accepts(headers: &HeaderMap) -> Accepts {
    let Some(v) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Accepts {
            json: true,
            sse: true,
        };
    };
    let has = |t: &str| {
        v.split(',').any(|p| {
            p.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .eq_ignore_ascii_case(t)
        })
    };
    let any = has("*/*");
    Accepts {
        json: any || has("application/json") || has("application/*"),
        sse: any || has("text/event-stream") || has("text/*"),
    }
}

/// The session named by `Mcp-Session-Id`, which must exist.
fn session_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get(h::MCP_SESSION_ID) {
        None => Ok(None),
        Some(v) => {
            let id = v.to_str().map_err(|_| {
                ApiError::bad("invalid-session-id", "Mcp-Session-Id must be visible ASCII")
            })?;
            if !valid_session_id(id) {
                return Err(ApiError::NoSession(id.to_owned()));
            }
            Ok(Some(id.to_owned()))
        }
    }
}

/// Who is calling: the principal the guard authenticated (none when the
/// server asks for no credentials).
pub(crate) type Principal = Option<String>;

/// The session `id`, live, touched, and fit for this request: created by the
/// same principal (any other gets 404, as if it did not exist) and, when the
/// request names an `MCP-Protocol-Version`, on that revision (400 otherwise).
/// Reads the session's record only when something needs checking against it.
pub(crate) async fn live_session(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    principal: &Principal,
    need_record: bool,
) -> Result<Option<SessionRecord>, ApiError> {
    state.log.touch(id).await?;
    let version = headers
        .get(h::MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    if !need_record && version.is_none() && principal.is_none() {
        return Ok(None);
    }
    let rec = state.record(id).await?;
    if rec.principal != *principal {
        return Err(ApiError::NoSession(id.to_owned()));
    }
    if let Some(v) = version {
        if v != rec.protocol_version {
            return Err(ApiError::bad(
                "protocol-version-mismatch",
                format!(
                    "MCP-Protocol-Version {v:?} differs from the session's negotiated {:?}",
                    rec.protocol_version
                ),
            ));
        }
    }
    Ok(Some(rec))
}

/// The `last_event_id` query, parsed after the guard so that an anonymous
/// caller learns nothing, and refused with the JSON body of every other error.
pub(crate) fn query(
    q: Result<Query<CursorQuery>, QueryRejection>,
) -> Result<CursorQuery, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad("invalid-query", e.body_text()))
}

/// The cursor from `Last-Event-ID` or `last_event_id`, parsed once.
pub(crate) fn cursor(
    headers: &HeaderMap,
    query: &CursorQuery,
) -> Result<Option<EventId>, ApiError> {
    let raw = match headers.get(h::LAST_EVENT_ID) {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::invalid_cursor("Last-Event-ID is not ASCII"))?,
        ),
        None => query.last_event_id.as_deref(),
    };
    raw.map(|s| s.parse::<EventId>().map_err(ApiError::invalid_cursor))
        .transpose()
}

fn jsonrpc_error(status: StatusCode, code: i64, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(jsonrpc::error(&Value::Null, code, message)),
    )
        .into_response()
}

/// `POST P`: one JSON-RPC message (or a 2025-03-26 batch).
pub async fn post(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let principal = guard(&state, &headers, false).await?;
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .eq_ignore_ascii_case("application/json")
    {
        return Err(ApiError::UnsupportedMediaType);
    }
    let acc = accepts(&headers);
    if !acc.json && !acc.sse {
        return Err(ApiError::NotAcceptable(
            "Accept must allow application/json or text/event-stream".into(),
        ));
    }
    let limit = state.config.max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::TooLarge(limit))?;
    let value: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return Ok(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                jsonrpc::PARSE_ERROR,
                format!("parse error: {e}"),
            ))
        }
    };
    let session = session_header(&headers)?;
    if let Value::Array(items) = &value {
        return batch(&state, session, &headers, &principal, items).await;
    }
    let msg = match Incoming::classify(&value) {
        Ok(m) => m,
        Err(why) => {
            return Ok(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                jsonrpc::INVALID_REQUEST,
                why,
            ))
        }
    };
    if let Incoming::Request { id, method, params } = &msg {
        if method == "initialize" {
            return initialize(&state, session, principal, acc.json, id, params).await;
        }
    }
    let Some(session) = session else {
        return Err(ApiError::bad(
            "missing-session-id",
            "Mcp-Session-Id is required for every request but initialize",
        ));
    };
    live_session(&state, &session, &headers, &principal, false).await?;
    match msg {
        Incoming::Request { id, method, params } => {
            let streaming = method == "tools/call"
                && params
                    .get("name")
                    .and_then(Value::as_str)
                    .and_then(|n| state.tools.get(n))
                    .is_some_and(|t| t.streaming);
            if acc.sse && (streaming || !acc.json) {
                request_stream(state, session, id, method, params).await
            } else {
                let reply = mcp::handle_request(
                    &state,
                    &session,
                    StreamKey::Session,
                    &id,
                    &method,
                    &params,
                )
                .await;
                Ok(axum::Json(reply).into_response())
            }
        }
        Incoming::Notification | Incoming::Response => Ok(StatusCode::ACCEPTED.into_response()),
    }
}

async fn initialize(
    state: &AppState,
    session: Option<String>,
    principal: Principal,
    json: bool,
    id: &Value,
    params: &Value,
) -> Result<Response, ApiError> {
    if session.is_some() {
        return Ok(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            "initialize must not carry Mcp-Session-Id",
        ));
    }
    if state.log.live_sessions().await >= state.config.max_sessions {
        return Err(ApiError::TooMany(format!(
            "the server holds its maximum of {} sessions; end one (DELETE) or retry later",
            state.config.max_sessions
        )));
    }
    let version = mcp::negotiate(params);
    let sid = new_session_id();
    let record = SessionRecord {
        protocol_version: version.to_owned(),
        dynamic_tools: Vec::new(),
        principal,
    };
    state.log.create_session(&sid, record.encode()).await?;
    let mut resp = answer(
        json,
        &[jsonrpc::result(id, mcp::initialize_result(version))],
    );
    resp.headers_mut().insert(
        h::MCP_SESSION_ID,
        HeaderValue::from_str(&sid).map_err(|e| ApiError::Internal(e.to_string()))?,
    );
    tracing::debug!(session = %sid, version, "session initialized");
    Ok(resp)
}

/// A request answered as SSE: request stream `R`, read from the log like any
/// other stream, while the work goes on even if the client disconnects.
async fn request_stream(
    state: AppState,
    session: String,
    id: Value,
    method: String,
    params: Value,
) -> Result<Response, ApiError> {
    let r = state
        .log
        .open_request_stream(&session, crate::orphans::record(&id, state.log.instance()))
        .await?;
    if r > state.config.max_request_streams {
        return Err(ApiError::TooMany(format!(
            "this session opened its maximum of {} request streams; start a new session",
            state.config.max_request_streams
        )));
    }
    let stream = StreamKey::Request(r);
    let (bounds, sub) = state.log.subscribe(&session, stream).await?;
    let worker = state.clone();
    let sid = session.clone();
    state.spawn(async move {
        // The handler runs in a task of its own so that a panic in it still
        // ends the call with an error response instead of leaving the stream open.
        let handler = {
            let (worker, sid, id, method, params) =
                (worker.clone(), sid.clone(), id.clone(), method, params);
            tokio::spawn(async move {
                mcp::handle_request(&worker, &sid, stream, &id, &method, &params).await
            })
        };
        let reply = match handler.await {
            Ok(reply) => reply,
            Err(e) => {
                tracing::error!(session = %sid, stream = r, error = %e, "a handler failed without answering");
                jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, "the handler of this call failed without answering; it may be retried")
            }
        };
        if let Err(e) = worker.append(&sid, stream, &reply).await {
            tracing::warn!(session = %sid, stream = r, error = %e, "could not commit a response");
        }
    });
    Ok(sse::respond(state, session, stream, 0, bounds.head, sub))
}

async fn batch(
    state: &AppState,
    session: Option<String>,
    headers: &HeaderMap,
    principal: &Principal,
    items: &[Value],
) -> Result<Response, ApiError> {
    if items.is_empty() {
        return Ok(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            "an empty batch",
        ));
    }
    let Some(session) = session else {
        return Err(ApiError::bad(
            "missing-session-id",
            "Mcp-Session-Id is required for every request but initialize",
        ));
    };
    let rec = live_session(state, &session, headers, principal, true).await?;
    let version = rec.map(|r| r.protocol_version).unwrap_or_default();
    if version != crate::session::BATCH_REVISION {
        return Ok(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            format!("JSON-RPC batches were removed in MCP 2025-06-18; this session speaks {version}: send one message per POST"),
        ));
    }
    let mut replies = Vec::new();
    for item in items {
        match Incoming::classify(item) {
            Ok(Incoming::Request { id, method, params }) => replies.push(
                mcp::handle_request(state, &session, StreamKey::Session, &id, &method, &params)
                    .await,
            ),
            Ok(_) => {}
            Err(why) => replies.push(jsonrpc::error(&Value::Null, jsonrpc::INVALID_REQUEST, why)),
        }
    }
    if replies.is_empty() {
        Ok(StatusCode::ACCEPTED.into_response())
    } else if accepts(headers).json {
        Ok(axum::Json(Value::Array(replies)).into_response())
    } else {
        Ok(answer(false, &replies))
    }
}

/// Responses that need no log (answered at once, nothing to resume): as
/// `application/json` when the client accepts it (`json`), else as an SSE body
/// of one event per response, for a client whose `Accept` allows only
/// `text/event-stream`.
fn answer(json: bool, replies: &[Value]) -> Response {
    if json {
        return match replies {
            [one] => axum::Json(one).into_response(),
            many => axum::Json(many).into_response(),
        };
    }
    let mut body = bytes::BytesMut::new();
    for r in replies {
        sse::encode_unnumbered(&mut body, &serde_json::to_vec(r).unwrap_or_default());
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body.freeze(),
    )
        .into_response()
}

/// `GET P`: the session stream over SSE, or a request stream with `Last-Event-ID: R/n`.
pub async fn get(
    State(state): State<AppState>,
    q: Result<Query<CursorQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let principal = guard(&state, &headers, false).await?;
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
    live_session(&state, &session, &headers, &principal, false).await?;
    match cursor(&headers, &q)? {
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
        match crate::orphans::end_if_orphaned(&state, &session, r).await {
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
    let Some(session) = session_header(&headers)? else {
        return Err(ApiError::bad(
            "missing-session-id",
            "DELETE needs Mcp-Session-Id",
        ));
    };
    live_session(&state, &session, &headers, &principal, false).await?;
    match state.log.end_session(&session).await {
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
    live_session(&state, &id, &parts.headers, &principal, false).await?;
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
