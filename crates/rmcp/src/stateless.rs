//! MCP's stateless era (2026-07-28) for an rmcp handler: each request served
//! by a handler of its own, through rmcp's one-request service
//! (`serve_directly` over a `OneshotTransport`), as rmcp's stateless
//! Streamable HTTP service does, without what that service spends before it.
//!
//! rmcp's `StreamableHttpService` parses the body a second time (its
//! `ClientJsonRpcMessage` through serde's buffered untagged visitors, 42,500
//! instructions of a 190,100-instruction call under callgrind), and writes
//! the typed request back to a `Value` to check the SEP-2243 headers against
//! it (22,000). The transport has parsed the body once already, so a request
//! whose every check is plainly met is typed from that parse
//! ([`crate::inbound`]) and served here; every other request (a header to
//! refuse, a `Mcp-Param-*` header to check against a tool's schema, an
//! `Accept` with parameters, a body rmcp's types refuse) goes to rmcp's
//! service as it is, so every refusal, its status and its error code stay
//! rmcp's own. [`direct`] says which, and errs only toward rmcp.
//!
//! What a request served here gets is what rmcp's service gives it: a
//! handler from the factory, rmcp's peer info for a stateless request (the
//! protocol version of the request, default capabilities and client info),
//! the request's HTTP parts in its extensions, a terminal first answer as
//! JSON with rmcp's status for its error code, anything else as an SSE
//! stream that ends with the answer, and the handler cancelled when its
//! client goes away before it answers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::HttpBody;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use mcp_resume_server::backend::{Body, Request, Response, StatelessFuture, StatelessHttp};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, GetExtensions, GetMeta,
    InitializeRequestParams, JsonObject, JsonRpcError, JsonRpcMessage, JsonRpcRequest,
    ProtocolVersion, ServerJsonRpcMessage,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::OneshotTransport;
use rmcp::{RoleServer, ServerHandler};
use serde_json::Value;
use tokio::sync::mpsc::Receiver;
use tokio_util::sync::CancellationToken;

use crate::backend::Guarded;

/// The largest body rmcp's service reads (its default); a larger one goes
/// to rmcp to be refused there.
const RMCP_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// How often an SSE answer that is still running carries a comment (rmcp's
/// default keep-alive).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The headers a stateless request's protocol version, method and name
/// travel in (SEP-2243).
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
const METHOD: HeaderName = HeaderName::from_static("mcp-method");
const NAME: HeaderName = HeaderName::from_static("mcp-name");

/// Stateless-era requests of one rmcp handler type: served here when
/// [`direct`] allows, by rmcp's stateless service otherwise.
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
        let small = HttpBody::size_hint(request.body())
            .upper()
            .is_some_and(|n| n <= RMCP_BODY_LIMIT as u64);
        if let Some(typed) = direct(request.headers(), message).filter(|_| small) {
            let service = (self.factory)();
            if !carries_param_headers(&service, &typed) {
                let (parts, _) = request.into_parts();
                return Box::pin(answer(Guarded(service), typed, parts));
            }
        }
        let mut rmcp = self.rmcp.clone();
        Box::pin(async move {
            match tower_service::Service::call(&mut rmcp, request).await {
                Ok(response) => response.map(Body::new),
                Err(never) => match never {},
            }
        })
    }
}

/// `message` typed, when every check rmcp's stateless service makes before
/// serving it plainly passes: an `Accept` of both media types without
/// parameters, a JSON `Content-Type`, a body within rmcp's limit, a request
/// (not `initialize`) whose `_meta` has every field 2026-07-28 requires,
/// its protocol version the same in `MCP-Protocol-Version` and at least
/// the revision of SEP-2243's headers, and `Mcp-Method` (and `Mcp-Name`,
/// for a method that names something) given once and equal to the body's,
/// not Base64-wrapped. `None` sends the request to rmcp, which answers it
/// (or refuses it) itself.
fn direct(headers: &HeaderMap, message: Value) -> Option<JsonRpcRequest<ClientRequest>> {
    if !accepts_both(headers) || !json_content(headers) {
        return None;
    }
    let version = single(headers, &PROTOCOL_VERSION)?;
    if version < ProtocolVersion::STANDARD_HEADERS.as_str() {
        return None;
    }
    let method = message.get("method")?.as_str()?;
    if single(headers, &METHOD)? != method {
        return None;
    }
    let params = message.get("params");
    if let Some(expected) = named(method, params) {
        let name = single(headers, &NAME)?;
        if name.starts_with("=?base64?") || name != expected.as_str()? {
            return None;
        }
    }
    let JsonRpcMessage::Request(request) = crate::inbound::typed(message).ok()? else {
        return None;
    };
    if matches!(request.request, ClientRequest::InitializeRequest(_)) {
        return None;
    }
    let meta = request.request.get_meta();
    let stated = meta.protocol_version()?;
    let complete = meta
        .missing_required_keys(&ProtocolVersion::V_2026_07_28)
        .is_empty();
    (complete && stated.as_str() == version).then_some(request)
}

/// The one value of header `name`, if it has exactly one and it is text.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    match values.next() {
        None => first.to_str().ok(),
        Some(_) => None,
    }
}

/// The body value SEP-2243's `Mcp-Name` must equal for `method`, if the
/// method names something (rmcp's table).
fn named<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a Value> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params?.get(key).filter(|v| v.is_string())
}

/// Whether `Accept` lists `application/json` and `text/event-stream`, each
/// bare (an entry with parameters, a weight among them, sends the request
/// to rmcp to be judged).
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',').map(str::trim) {
            if entry.contains([';', '"']) {
                return false;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// rmcp's `Content-Type` rule: the media type, before any parameter, is
/// `application/json`.
fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// Whether the called tool's input schema annotates an argument with
/// `x-mcp-header`, whose `Mcp-Param-*` header rmcp checks against the
/// body: such a call goes to rmcp.
fn carries_param_headers<S: ServerHandler>(
    service: &S,
    request: &JsonRpcRequest<ClientRequest>,
) -> bool {
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return false;
    };
    service
        .get_tool(&call.params.name)
        .is_some_and(|tool| names_header(&tool.input_schema))
}

/// Whether `x-mcp-header` is a key anywhere in `schema`.
fn names_header(schema: &JsonObject) -> bool {
    schema.contains_key("x-mcp-header") || schema.values().any(mentions_header)
}

/// [`names_header`] for any JSON value.
fn mentions_header(value: &Value) -> bool {
    match value {
        Value::Object(map) => names_header(map),
        Value::Array(items) => items.iter().any(mentions_header),
        _ => false,
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
    parts: axum::http::request::Parts,
) -> Response<Body>
where
    S: ServerHandler + Send + 'static,
{
    let id = request.id.clone();
    let mut peer_info = InitializeRequestParams::default();
    if let Some(version) = request.request.get_meta().protocol_version() {
        peer_info.protocol_version = version;
    }
    request.request.extensions_mut().insert(parts);
    let (transport, mut receiver) =
        OneshotTransport::<RoleServer>::new(ClientJsonRpcMessage::Request(request));
    let ct = CancellationToken::new();
    let running =
        rmcp::service::serve_directly_with_ct(service, transport, Some(peer_info), ct.clone());
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
        ct.cancel();
        drop(running);
        return json(status(&first), &first);
    }
    sse(
        first,
        receiver,
        Running {
            _service: running,
            ct,
        },
    )
}

/// A request's service while its SSE answer runs: dropped with the answer.
struct Running<S: ServerHandler> {
    /// Held for its drop, which ends the service.
    _service: RunningService<RoleServer, Guarded<S>>,
    ct: CancellationToken,
}

impl<S: ServerHandler> Drop for Running<S> {
    fn drop(&mut self) {
        // Ended or abandoned: either way the handler has nothing left to
        // send anyone (said before the service's own drop, so that it does
        // not log a service dropped unclosed).
        self.ct.cancel();
    }
}

/// rmcp's HTTP status for a request's answer: the stateless era's refusals
/// are 400, an unknown method 404, everything else 200.
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

/// `message` as a JSON answer with `status`.
fn json(status: StatusCode, message: &ServerJsonRpcMessage) -> Response<Body> {
    let body = crate::outbound::to_vec(message).unwrap_or_default();
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// What is left of a request's messages after `first`, as SSE events; the
/// stream ends after the answer, when rmcp's service closes the channel.
/// Dropping it before then (the client went away) cancels the handler.
fn sse<S: ServerHandler + Send + 'static>(
    first: ServerJsonRpcMessage,
    receiver: Receiver<ServerJsonRpcMessage>,
    running: Running<S>,
) -> Response<Body> {
    let events = stream::unfold(
        (Some(first), receiver, running),
        |(first, mut receiver, running)| async move {
            let message = match first {
                Some(m) => m,
                None => match tokio::time::timeout(KEEP_ALIVE, receiver.recv()).await {
                    Ok(m) => m?,
                    Err(_) => {
                        let ping = Bytes::from_static(mcp_resume_proto::sse::KEEPALIVE);
                        return Some((ping, (None, receiver, running)));
                    }
                },
            };
            let mut frame = Vec::new();
            let data = crate::outbound::to_vec(&message).unwrap_or_default();
            mcp_resume_proto::sse::encode(&mut frame, None, None, &data);
            Some((Bytes::from(frame), (None, receiver, running)))
        },
    );
    let body = Body::from_stream(events.map(Ok::<_, std::convert::Infallible>));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stateless `tools/call` as the SDK clients send it.
    fn call() -> (HeaderMap, Value) {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
            }
        }});
        (headers, body)
    }

    #[test]
    fn a_request_that_meets_every_check_is_served_directly_with_its_meta() {
        let (headers, body) = call();
        let request = direct(&headers, body).expect("served directly");
        assert_eq!(request.id, rmcp::model::RequestId::Number(7));
        let meta = request.request.get_meta();
        assert_eq!(meta.protocol_version(), Some(ProtocolVersion::V_2026_07_28));
    }

    /// Every way a request can fall short of one of rmcp's checks sends it
    /// to rmcp, to be answered (or refused) there.
    #[test]
    fn anything_rmcp_might_refuse_goes_to_rmcp() {
        type Change = fn(&mut HeaderMap, &mut Value);
        let cases: &[(&str, Change)] = &[
            ("a weighted Accept", |h, _| {
                h.insert(
                    "accept",
                    HeaderValue::from_static("application/json;q=0, text/event-stream"),
                );
            }),
            ("no event stream accepted", |h, _| {
                h.insert("accept", HeaderValue::from_static("application/json"));
            }),
            ("a text body", |h, _| {
                h.insert("content-type", HeaderValue::from_static("text/plain"));
            }),
            ("no Mcp-Method", |h, _| {
                h.remove("mcp-method");
            }),
            ("a second Mcp-Method", |h, _| {
                h.append("mcp-method", HeaderValue::from_static("tools/call"));
            }),
            ("another method in Mcp-Method", |h, _| {
                h.insert("mcp-method", HeaderValue::from_static("tools/list"));
            }),
            ("another name", |h, _| {
                h.insert("mcp-name", HeaderValue::from_static("echo2"));
            }),
            ("a Base64 name", |h, _| {
                h.insert("mcp-name", HeaderValue::from_static("=?base64?ZWNobw==?="));
            }),
            ("no Mcp-Name", |h, _| {
                h.remove("mcp-name");
            }),
            ("no version header", |h, _| {
                h.remove("mcp-protocol-version");
            }),
            ("a version header that is not the body's", |h, _| {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static("2026-08-01"),
                );
            }),
            ("a revision before SEP-2243's headers", |h, b| {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static("2025-11-25"),
                );
                b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
                    json!("2025-11-25");
            }),
            ("no client capabilities in _meta", |_, b| {
                let meta = b["params"]["_meta"].as_object_mut().unwrap();
                meta.remove("io.modelcontextprotocol/clientCapabilities");
            }),
            ("no _meta", |_, b| {
                b["params"].as_object_mut().unwrap().remove("_meta");
            }),
            ("a notification", |_, b| {
                b.as_object_mut().unwrap().remove("id");
            }),
            ("a message rmcp's types refuse", |_, b| {
                b["jsonrpc"] = json!("1.0");
            }),
        ];
        for (what, change) in cases {
            let (mut headers, mut body) = call();
            change(&mut headers, &mut body);
            assert!(
                direct(&headers, body).is_none(),
                "{what} was served directly"
            );
        }
        let (mut headers, _) = call();
        headers.insert("mcp-method", HeaderValue::from_static("initialize"));
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
            "_meta": call().1["params"]["_meta"].clone()
        }});
        assert!(
            direct(&headers, init).is_none(),
            "initialize was served directly"
        );
    }

    #[test]
    fn an_annotated_argument_anywhere_in_a_schema_is_found() {
        let nested = json!({"type": "object", "properties": {
            "where": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
        }});
        let plain = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        assert!(names_header(nested.as_object().unwrap()));
        assert!(!names_header(plain.as_object().unwrap()));
    }
}
