//! `POST P`: one JSON-RPC message (or a 2025-03-26 batch), checked here and
//! handed to the session's backend through its route (`relay`): `initialize`,
//! requests answered as JSON or as a resumable request stream, notifications
//! and responses.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use futures_util::FutureExt;
use serde_json::Value;

use super::guard::{
    accepts, check_version, credentials, jsonrpc_error, live_session, media_type, session_header,
    Accepts, Principal, Want,
};
use crate::error::ApiError;
use crate::jsonrpc::{self, Incoming};
use crate::route::state::AppState;
use crate::route::SessionRoute;

/// `POST P`: one JSON-RPC message (or a 2025-03-26 batch).
///
/// Takes the request whole rather than axum's `HeaderMap` and `Uri`
/// extractors, which clone them from the request (the header map's clone
/// is a few allocations and a reference count per header, every request).
///
/// Two futures, one after the other ([`checks`], then the session's
/// message): the second takes the place of the first, where one `async`
/// function would keep room for what the checks held (the headers, the
/// URI, the body's bytes) beside the message's own future. This future is
/// moved into a box per request ([`PostService`]), and one over 1,032
/// bytes misses glibc's thread cache: 1,464 bytes as one function, 648 as
/// two (1d32b7d, 2026-12-05, `benches/results/echo-ceiling.md`).
fn post(
    state: AppState,
    request: Request,
) -> impl std::future::Future<Output = Result<Response, ApiError>> + Send {
    let (parts, body) = request.into_parts();
    checks(state, parts.uri, parts.headers, body).then(|checked| match checked {
        Ok(Checked::Message {
            state,
            session,
            acc,
            value,
            route,
            read,
        }) => Either::Left(super::relay::message(
            state, session, acc, value, route, read,
        )),
        Ok(Checked::Done(response)) => Either::Right(std::future::ready(Ok(response))),
        Err(e) => Either::Right(std::future::ready(Err(e))),
    })
}

/// What the checks of a POST decided.
enum Checked {
    /// Answered already: refused, or served on a path of its own
    /// (`initialize`, a batch, the stateless era).
    Done(Response),
    /// A message for a live session, for [`super::relay::message`].
    Message {
        /// The server's state, handed on rather than cloned.
        state: AppState,
        /// The session's id, from `Mcp-Session-Id`.
        session: String,
        /// What the client's `Accept` allows.
        acc: Accepts,
        /// The message, parsed once.
        value: Value,
        /// The session's route, if `live_session` took it (then counted as
        /// used); `None` has the message locate it.
        route: Option<Arc<SessionRoute>>,
        /// The session's record, if `live_session` read it: a route opened
        /// here takes it instead of reading it again.
        read: Option<bytes::Bytes>,
    },
}

/// [`post`] as a service of its own (the router's route for it, and the
/// endpoint a connection of [`crate::McpServer::serve`] calls directly,
/// `accept::App`): one boxed future a request, the handler's.
#[derive(Clone)]
pub(crate) struct PostService(pub(crate) AppState);

impl tower_service::Service<Request> for PostService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Mapped, not awaited in an `async` block: such a block holds the
        // handler's future twice (as the value it captured and as the one
        // it awaits): 2,936 bytes a request with the former one-function
        // `post`, where one copy is enough.
        // A graceful stop waits for the POST until its answer is handed over
        // (and a request stream it answers with, to its end: `sse::respond`).
        let hold = self.0.drain.hold();
        Box::pin(post(self.0.clone(), request).map(move |answer| {
            drop(hold);
            Ok(answer.into_response())
        }))
    }
}

/// The checks of a POST, and the paths that answer it without a session's
/// route: a plain `fn` returning an `async` block, which keeps its
/// arguments once (an `async fn` keeps them twice: as it was called, and
/// as its locals).
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn would keep its arguments twice, see above"
)]
fn checks(
    state: AppState,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Body,
) -> impl std::future::Future<Output = Result<Checked, ApiError>> + Send {
    async move {
        let principal = credentials(&state, &headers, false).await?;
        let ct = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::as_bytes)
            .unwrap_or_default();
        if !media_type(ct).eq_ignore_ascii_case(b"application/json") {
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
                return Ok(Checked::Done(jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::PARSE_ERROR,
                    format!("parse error: {e}"),
                )))
            }
        };
        let session = session_header(&headers)?;
        if session.is_none() && super::stateless::is_stateless(&headers, &value) {
            let caller = crate::tasks::Caller(principal);
            // Boxed, as every path here: the POST's future is as large as
            // the larger of these checks and the session's message, and it
            // is moved into a box per request.
            let serve = super::stateless::serve(&state, caller, uri, headers, bytes, value);
            return Ok(Checked::Done(Box::pin(serve).await));
        }
        check_version(&headers)?;
        if let Value::Array(items) = &value {
            let batch = batch(&state, session, &headers, &principal, items);
            return Box::pin(batch).await.map(Checked::Done);
        }
        let msg = match Incoming::classify(&value) {
            Ok(m) => m,
            Err(why) => {
                return Ok(Checked::Done(jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    why,
                )))
            }
        };
        if let Incoming::Request {
            method: "initialize",
            ..
        } = msg
        {
            if session.is_some() {
                return Ok(Checked::Done(jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    jsonrpc::INVALID_REQUEST,
                    "initialize must not carry Mcp-Session-Id",
                )));
            }
            let initialize = super::open::initialize(&state, principal, acc.json, value);
            return Box::pin(initialize).await.map(Checked::Done);
        }
        let Some(session) = session else {
            return Err(ApiError::bad(
                "missing-session-id",
                "Mcp-Session-Id is required for every request but initialize",
            ));
        };
        let live = live_session(&state, &session, &headers, &principal, Want::Route).await?;
        Ok(Checked::Message {
            state,
            session,
            acc,
            value,
            route: live.route,
            read: live.read,
        })
    }
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
    let rec = live_session(state, &session, headers, principal, Want::Record)
        .await?
        .record;
    let version = rec.map(|r| r.protocol_version).unwrap_or_default();
    if version != crate::session::BATCH_REVISION {
        return Ok(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            jsonrpc::INVALID_REQUEST,
            format!("JSON-RPC batches were removed in MCP 2025-06-18; this session speaks {version}: send one message per POST"),
        ));
    }
    let replies = super::relay::batch(state, &session, items).await?;
    Ok(if replies.is_empty() {
        StatusCode::ACCEPTED.into_response()
    } else {
        answer(accepts(headers).json, &replies)
    })
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
