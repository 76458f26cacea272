//! `POST P`: one JSON-RPC message (or a 2025-03-26 batch): `initialize`,
//! requests answered as JSON or as a resumable request stream, notifications
//! and responses.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::StreamKey;
use mcp_resume_proto::headers as h;
use serde_json::Value;

use super::guard::{
    accepts, check_version, credentials, jsonrpc_error, live_session, session_header, Principal,
};
use crate::error::ApiError;
use crate::jsonrpc::{self, Incoming};
use crate::session::{new_session_id, SessionRecord};
use crate::state::AppState;
use crate::{mcp, sse};

/// `POST P`: one JSON-RPC message (or a 2025-03-26 batch).
pub async fn post(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let principal = credentials(&state, &headers, false).await?;
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
    if session.is_none() && super::stateless::is_stateless(&headers, &value) {
        let caller = crate::tasks::Caller(principal);
        return Ok(super::stateless::serve(&state, caller, uri, headers, bytes, &value).await);
    }
    check_version(&headers)?;
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
            if state.backend.is_some() {
                if session.is_some() {
                    return Ok(jsonrpc_error(
                        StatusCode::BAD_REQUEST,
                        jsonrpc::INVALID_REQUEST,
                        "initialize must not carry Mcp-Session-Id",
                    ));
                }
                return super::relay::initialize(&state, principal, acc.json, value).await;
            }
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
    if state.backend.is_some() {
        return super::relay::message(&state, session, acc, value).await;
    }
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
        init: None,
        task: None,
        listen: None,
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
    let (stream, head, sub) = super::open_call_stream(&state, &session, &id).await?;
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
                tracing::error!(session = %sid, stream = ?stream, error = %e, "a handler failed without answering");
                jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, "the handler of this call failed without answering; it may be retried")
            }
        };
        crate::reply::commit_response(&worker, &sid, stream, &reply).await;
    });
    Ok(sse::respond(state, session, stream, 0, head, sub))
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
    if state.backend.is_some() {
        let replies = super::relay::batch(state, &session, items).await?;
        return Ok(if replies.is_empty() {
            StatusCode::ACCEPTED.into_response()
        } else {
            answer(accepts(headers).json, &replies)
        });
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
pub(super) fn answer(json: bool, replies: &[Value]) -> Response {
    if json {
        return match replies {
            [one] => axum::Json(one).into_response(),
            many => axum::Json(many).into_response(),
        };
    }
    let mut body = Vec::new();
    for r in replies {
        let data = serde_json::to_vec(r).unwrap_or_default();
        mcp_resume_proto::sse::encode(&mut body, None, Some("message"), &data);
    }
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}
