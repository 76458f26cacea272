//! MCP's stateless era (2026-07-28) for an rmcp handler: each request served
//! by a handler of its own, through rmcp's one-request service
//! (`serve_directly` over a `OneshotTransport`), as rmcp's stateless
//! Streamable HTTP service does, without what that service spends before it.
//!
//! rmcp's `StreamableHttpService` parses the body a second time (its
//! `ClientJsonRpcMessage` through serde's buffered untagged visitors), and
//! writes the typed request back to a `Value` to check the SEP-2243 headers
//! against it (benches/results/stateless.md has what each cost). The
//! transport has parsed the body once already, so a request
//! whose every check is plainly met is typed from that parse
//! ([`crate::inbound`]) and served here; every other request (a header to
//! refuse, a `Mcp-Param-*` header to check against a tool's schema, an
//! `Accept` with parameters, a `Host` rmcp would refuse, a body rmcp's types
//! refuse) goes to rmcp's service as it is, so every refusal, its status and
//! its error code stay rmcp's own. [`checks`] says which, and errs toward
//! rmcp, with one exception the session path shares: a body that repeats a
//! key is read as the transport's parse reads it (the last value counts),
//! where rmcp's types refuse it.
//!
//! What a request served here gets is what rmcp's service gives it: a
//! handler from the factory, rmcp's peer info for a stateless request (the
//! protocol version of the request, default capabilities and client info),
//! the request's HTTP parts in its extensions, a terminal first answer as
//! JSON with rmcp's status for its error code, anything else as an SSE
//! stream that ends with the answer, and the handler cancelled when its
//! client goes away before it answers. Two things differ: a handler that
//! panics answers with a JSON-RPC error (-32603), as in a session, where
//! rmcp's service would leave the call without an answer; and a handler
//! that ends without answering (which that makes all but impossible) gets
//! a 500 whose body is a JSON-RPC error, where rmcp's is text.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use mcp_resume_server::backend::{
    sse_response, Body, Request, Response, StatelessFuture, StatelessHttp,
};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, GetExtensions,
    InitializeRequestParams, JsonRpcError, JsonRpcMessage, JsonRpcRequest, ProtocolVersion,
    RequestId, ServerJsonRpcMessage,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::OneshotTransport;
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::mpsc::Receiver;

use crate::backend::Guarded;

mod checks;

/// How often an SSE answer that is still running carries a comment (rmcp's
/// default keep-alive).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Stateless-era requests of one rmcp handler type: served here when
/// [`checks`] allow, by rmcp's stateless service otherwise.
pub(crate) struct Stateless<F, S: ServerHandler> {
    /// Makes the handler of one request.
    pub(crate) factory: Arc<F>,
    /// rmcp's stateless Streamable HTTP service (JSON answers, no session).
    pub(crate) rmcp: StreamableHttpService<S, NeverSessionManager>,
}

impl<F, S> StatelessHttp for Stateless<F, S>
where
    F: Fn() -> S + Send + Sync + 'static,
    S: ServerHandler + Send + 'static,
{
    fn serve(&self, request: Request<Body>, message: Value) -> StatelessFuture {
        if let Some((typed, version)) = checks::served_directly(&request, message) {
            let service = (self.factory)();
            if !checks::carries_param_headers(&service, &typed) {
                let (parts, _) = request.into_parts();
                return Box::pin(answer(Guarded(service), typed, version, parts));
            }
        }
        let rmcp = self.rmcp.clone();
        Box::pin(async move { rmcp.handle(request).await.map(Body::new) })
    }
}

/// Serves `request` with `service`, as rmcp's service serves a request that
/// carries its protocol version: the first message decides JSON (a terminal
/// answer) or SSE (anything before the answer).
///
/// The running service is held by the answer, not by a task of its own:
/// dropping it cancels the handler, which is what should happen when the
/// client goes away before its answer (this future or the SSE body is
/// dropped) and once a JSON answer is written (nothing sent after it could
/// reach the client).
async fn answer<S>(
    service: Guarded<S>,
    mut request: JsonRpcRequest<ClientRequest>,
    version: ProtocolVersion,
    parts: axum::http::request::Parts,
) -> Response<Body>
where
    S: ServerHandler + Send + 'static,
{
    let id = request.id.clone();
    // rmcp's peer info for a stateless request: its version, the rest default.
    let mut peer_info = InitializeRequestParams::default();
    peer_info.protocol_version = version;
    request.request.extensions_mut().insert(parts);
    let (transport, mut receiver) =
        OneshotTransport::<RoleServer>::new(ClientJsonRpcMessage::Request(request));
    let running = rmcp::service::serve_directly(service, transport, Some(peer_info));
    let Some(first) = receiver.recv().await else {
        let error = ErrorData::internal_error("the handler ended without answering", None);
        return json(
            StatusCode::INTERNAL_SERVER_ERROR,
            &JsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
        );
    };
    if matches!(
        first,
        JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)
    ) {
        running.cancellation_token().cancel();
        return json(status(&first), &first);
    }
    sse(
        first,
        receiver,
        Running {
            service: running,
            id,
        },
    )
}

/// A request's service while its SSE answer runs: dropped with the answer.
struct Running<S: ServerHandler> {
    service: RunningService<RoleServer, Guarded<S>>,
    /// The request's id, for an error of the transport's own.
    id: RequestId,
}

impl<S: ServerHandler> Drop for Running<S> {
    fn drop(&mut self) {
        // Ended or abandoned: either way the handler has nothing left to
        // send anyone. Cancelled here, before the service's own drop (which
        // would cancel it too), so that rmcp does not log a service dropped
        // without being closed.
        self.service.cancellation_token().cancel();
    }
}

/// rmcp's HTTP status for a request's answer: the stateless era's refusals
/// are 400, an unknown method 404, everything else 200. (rmcp also makes
/// -32602 a 400 for a request whose `_meta` is incomplete; none is served
/// here.)
fn status(message: &ServerJsonRpcMessage) -> StatusCode {
    let JsonRpcMessage::Error(error) = message else {
        return StatusCode::OK;
    };
    match error.error.code {
        ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
        | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
        ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// `message` as a JSON answer with `status` (500, as rmcp answers it, if it
/// cannot be written).
fn json(status: StatusCode, message: &ServerJsonRpcMessage) -> Response<Body> {
    let (status, body) = match crate::outbound::to_vec(message) {
        Ok(body) => (status, body),
        Err(e) => {
            tracing::error!(error = %e, "a stateless answer could not be written");
            let why = "Internal server error: the answer could not be written";
            let mut response = Response::new(Body::from(why));
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            return response;
        }
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `first`, then the rest of a request's messages, as SSE events; the
/// stream ends after the answer, when rmcp's service closes the channel.
/// Dropping it before then (the client went away) cancels the handler.
fn sse<S: ServerHandler + Send + 'static>(
    first: ServerJsonRpcMessage,
    receiver: Receiver<ServerJsonRpcMessage>,
    running: Running<S>,
) -> Response<Body> {
    let events = stream::unfold(
        (Some(first), Some(receiver), running),
        |(first, mut receiver, running)| async move {
            let message = match first {
                Some(m) => m,
                None => match tokio::time::timeout(KEEP_ALIVE, receiver.as_mut()?.recv()).await {
                    Ok(m) => m?,
                    Err(_) => {
                        let ping = Bytes::from_static(mcp_resume_proto::sse::KEEPALIVE);
                        return Some((ping, (None, receiver, running)));
                    }
                },
            };
            let data = crate::outbound::to_vec(&message).unwrap_or_else(|e| {
                // Loud, and the last event: the call's answer may be what
                // could not be written.
                tracing::error!(error = %e, "a stateless call's message could not be written");
                receiver = None;
                let error =
                    ErrorData::internal_error("a message of this call could not be written", None);
                let failed =
                    JsonRpcMessage::Error(JsonRpcError::new(Some(running.id.clone()), error));
                crate::outbound::to_vec(&failed).unwrap_or_default()
            });
            let mut frame = Vec::new();
            mcp_resume_proto::sse::encode(&mut frame, None, None, &data);
            Some((Bytes::from(frame), (None, receiver, running)))
        },
    );
    sse_response(Body::from_stream(
        events.map(Ok::<_, std::convert::Infallible>),
    ))
}
