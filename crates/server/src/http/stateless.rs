//! `POST P` in MCP's stateless era (2026-07-28 on): no `initialize`, no
//! session; every request carries its protocol version, client capabilities
//! and client info in `params._meta`, and `server/discover` tells a client
//! which revisions the server speaks.
//!
//! One endpoint serves both eras. A request without `Mcp-Session-Id` that
//! is `server/discover`, carries the stateless `_meta`, or names a revision
//! the session era does not know in `MCP-Protocol-Version` is served here;
//! everything else keeps its session (docs/protocol.md 3.6).
//!
//! The request goes whole to the backend's
//! [`StatelessHttp`](crate::backend::StatelessHttp), with the body as parsed
//! here; it validates the `_meta` and the SEP-2243 headers and answers as
//! JSON or SSE (for an rmcp handler, see `crates/rmcp/src/stateless.rs`). The transport
//! answers what the stateless era removed and the backend may still accept:
//! `initialize` and `logging/setLevel` are 404 with -32601; with a durable
//! task store, `tasks/*` are answered from the log ([`crate::tasks`]). The
//! caller, as authenticated, rides the request's extensions
//! ([`Caller`]). A backend that
//! speaks only the session era answers -32022 with the revisions it does
//! speak, so a client that probes (the SDKs' "auto" mode) falls back to
//! `initialize` on the same URL.

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mcp_resume_proto::{headers as h, STATELESS_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS};
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::route::state::AppState;
use crate::tasks::{self, Caller};

use super::subs;

pub(crate) use mcp_resume_proto::meta::{
    CLIENT_CAPABILITIES as META_CAPABILITIES, PROTOCOL_VERSION as META_VERSION,
};

/// JSON-RPC: the requested protocol version is not supported (stateless era).
const UNSUPPORTED_VERSION: i64 = -32022;

/// Methods of the session era that the stateless era removed.
const REMOVED: &[&str] = &["initialize", "logging/setLevel"];

/// Whether a POST without `Mcp-Session-Id` belongs to the stateless era.
pub(super) fn is_stateless(headers: &HeaderMap, message: &Value) -> bool {
    let method = message.get("method").and_then(Value::as_str);
    if method == Some("server/discover") {
        return true;
    }
    let meta = message.get("params").and_then(|p| p.get("_meta"));
    if meta.is_some_and(|m| m.get(META_VERSION).is_some() || m.get(META_CAPABILITIES).is_some()) {
        return true;
    }
    // A revision the session era does not know, on anything but the
    // handshake: the backend's answer (-32022) tells the client what is.
    let version = headers
        .get(h::MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok());
    version.is_some_and(|v| !SUPPORTED_PROTOCOL_VERSIONS.contains(&v) && v != "2024-11-05")
        && method != Some("initialize")
}

/// Serves one stateless-era request.
pub(super) async fn serve(
    state: &AppState,
    caller: Caller,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    message: Value,
) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if message.get("id").is_none() {
        // A notification: nothing in the stateless era routes it (a request
        // is cancelled by closing its stream), and 2026-07-28 defines no
        // header rules for it. Accepted and dropped.
        return StatusCode::ACCEPTED.into_response();
    }
    if message.get("method").is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            jsonrpc::error(
                &id,
                jsonrpc::INVALID_REQUEST,
                "the stateless era has no server requests to answer",
            ),
        );
    }
    if REMOVED.contains(&method) {
        return error(
            StatusCode::NOT_FOUND,
            jsonrpc::error(
                &id,
                jsonrpc::METHOD_NOT_FOUND,
                format!("{method} does not exist in the stateless protocol revisions"),
            ),
        );
    }
    if let Some(store) = state
        .task_store
        .as_ref()
        .filter(|_| tasks::serve::is_task_method(method))
    {
        if method == "tasks/stream" {
            return task_stream(state, store, &caller, &headers, &message).await;
        }
        let (status, reply) = tasks::serve::serve(store, &caller, &headers, &message).await;
        return error(status, reply);
    }
    if subs::wants_resumable(&message) && state.backend.stateless().is_none_or(|s| s.listens()) {
        return subs::open(state, caller, &headers, message).await;
    }
    let Some(service) = state.backend.stateless() else {
        let requested = headers
            .get(h::MCP_PROTOCOL_VERSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .or_else(|| {
                message
                    .pointer("/params/_meta")
                    .and_then(|m| m.get(META_VERSION))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
        return error(
            StatusCode::BAD_REQUEST,
            jsonrpc::error_with_data(
                &id,
                UNSUPPORTED_VERSION,
                format!(
                    "this server speaks only the session revisions {SUPPORTED_PROTOCOL_VERSIONS:?} (initialize first), not {STATELESS_PROTOCOL_VERSIONS:?}"
                ),
                json!({"supported": SUPPORTED_PROTOCOL_VERSIONS, "requested": requested}),
            ),
        );
    };
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .body(Body::from(body))
        .unwrap_or_default();
    *request.headers_mut() = headers;
    request.extensions_mut().insert(caller);
    let discover = method == "server/discover";
    // A graceful stop waits for the answer to its end (an SSE answer is
    // streamed by the backend after this returns).
    let hold = state.drain.hold();
    let resp = service.serve(request, message).await;
    if discover && service.listens() {
        return offer_extensions(resp).await;
    }
    crate::route::drain::hold_body(resp, hold)
}

/// Adds the transport's own extensions (the resumable listen stream) to a
/// `server/discover` result's capabilities.
async fn offer_extensions(resp: Response) -> Response {
    let (mut parts, body) = resp.into_parts();
    let json = parts
        .headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let Ok(bytes) = axum::body::to_bytes(body, 4 << 20).await else {
        return (
            StatusCode::BAD_GATEWAY,
            "the backend's discover answer could not be read",
        )
            .into_response();
    };
    let mut v: Value = match serde_json::from_slice(&bytes) {
        Ok(v) if json => v,
        _ => return Response::from_parts(parts, Body::from(bytes)),
    };
    if let Some(caps) = v
        .pointer_mut("/result/capabilities")
        .and_then(Value::as_object_mut)
    {
        let ext = caps.entry("extensions").or_insert_with(|| json!({}));
        if let Some(ext) = ext.as_object_mut() {
            ext.insert(subs::EXTENSION.into(), json!({}));
        }
    }
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(v.to_string()))
}

/// `tasks/stream` (SEP-2694): the task's events as the POST's SSE
/// response ([`tasks::stream`]), or the refusal as JSON.
async fn task_stream(
    state: &AppState,
    store: &tasks::TaskStore,
    caller: &Caller,
    headers: &HeaderMap,
    message: &Value,
) -> Response {
    let opened = match tasks::stream::open(store, caller, headers, message).await {
        Ok(o) => o,
        Err((status, reply)) => return error(status, reply),
    };
    super::task_events::sse(state, store.clone(), opened)
}

fn error(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}
