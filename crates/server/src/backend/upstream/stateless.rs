//! MCP's stateless era (2026-07-28 on) through `gateway --upstream URL`: a
//! request without a session goes to the upstream as the same stateless
//! request, and its answer (JSON or an SSE body) comes back as it is, while
//! it arrives (docs/protocol.md 3.6).
//!
//! What crosses: the body unchanged, and of the client's headers only what
//! the stateless era defines (`Content-Type`, `Accept`, the SEP-2243
//! `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*`
//! headers, as sent, so the upstream validates them itself) plus trace
//! context; the gateway's configured `--upstream-header`s carry the
//! upstream's own credentials, never the client's (MCP forbids token
//! passthrough). Nothing of it is logged: the stateless era has no stream to
//! resume; what is durable there is a task, and `tasks/*` reach the
//! upstream's own tasks.
//!
//! Failures end loudly: an upstream that cannot be reached, or that refuses
//! the gateway's own credentials, answers 502 with a JSON-RPC error for the
//! request (`data.reason` `upstream-unreachable` or `upstream-refused`); an
//! SSE answer that breaks off before the response ends with one more event,
//! a JSON-RPC error `upstream-lost` for the request, so the caller never
//! waits on a stream that will say nothing more. There is no total
//! timeout: a stateless call runs as long as its tool does (a listen stream
//! for hours); the client's connect timeout (10 s) bounds an unreachable
//! upstream.

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use mcp_resume_proto::sse::SseParser;
use serde_json::{json, Value};

use super::describe;
use crate::backend::{StatelessFuture, StatelessHttp};

/// Most bytes of a stateless request body read (the transport has already
/// bounded it; this is the relay's own guard).
const BODY_LIMIT: usize = 16 << 20;

/// Relays stateless-era requests to one upstream endpoint.
#[derive(Debug, Clone)]
pub(super) struct StatelessRelay {
    pub(super) url: reqwest::Url,
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) http: reqwest::Client,
}

impl StatelessHttp for StatelessRelay {
    fn serve(&self, request: Request<Body>, message: Value) -> StatelessFuture {
        let relay = self.clone();
        Box::pin(async move { relay.relay(request, message).await })
    }
}

/// Whether client header `name` crosses to the upstream.
fn crosses(name: &str) -> bool {
    matches!(
        name,
        "content-type" | "accept" | "traceparent" | "tracestate"
    ) || (name.starts_with("mcp-") && name != mcp_resume_proto::headers::MCP_SESSION_ID)
}

/// Whether upstream response header `name` crosses back to the client.
fn returns(name: &str) -> bool {
    matches!(name, "content-type" | "cache-control")
        || (name.starts_with("mcp-") && name != mcp_resume_proto::headers::MCP_SESSION_ID)
}

impl StatelessRelay {
    async fn relay(self, request: Request<Body>, message: Value) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, BODY_LIMIT).await {
            Ok(b) => b,
            Err(e) => {
                return failure(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    "bad-request",
                    format!("the request body could not be read: {e}"),
                )
            }
        };
        // The request's id, for an answer of the gateway's own (an error,
        // the watch on an SSE answer), from the transport's parse.
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        drop(message);
        let mut rb = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone());
        for (name, value) in &parts.headers {
            if crosses(name.as_str()) {
                rb = rb.header(name.as_str(), value.as_bytes());
            }
        }
        let resp = match rb.body(body).send().await {
            Ok(r) => r,
            Err(e) => {
                return failure(
                    StatusCode::BAD_GATEWAY,
                    &id,
                    "upstream-unreachable",
                    format!("cannot reach the upstream {}", describe(e, &self.url)),
                )
            }
        };
        let status = resp.status();
        if matches!(status.as_u16(), 401 | 403) {
            // The client's credentials are the gateway's business, checked
            // already; this refusal is of the gateway's own.
            return failure(
                StatusCode::BAD_GATEWAY,
                &id,
                "upstream-refused",
                format!(
                    "the upstream answered {status} to the gateway's credentials (see --upstream-header)"
                ),
            );
        }
        let mut out = Response::builder().status(status.as_u16());
        let mut sse = false;
        for (name, value) in resp.headers() {
            if returns(name.as_str()) {
                if name == reqwest::header::CONTENT_TYPE {
                    sse = value.as_bytes().starts_with(b"text/event-stream");
                }
                out = out.header(name.as_str(), value.as_bytes());
            }
        }
        let id = if sse { id } else { Value::Null };
        out.body(relay_body(resp, sse, id, self.url.clone()))
            .unwrap_or_else(|e| {
                failure(
                    StatusCode::BAD_GATEWAY,
                    &Value::Null,
                    "upstream-lost",
                    e.to_string(),
                )
            })
    }
}

/// What a relayed body is doing.
struct Relay {
    resp: Option<reqwest::Response>,
    /// The request's id, for the error that ends a broken SSE answer.
    id: Value,
    /// `Some` for an SSE answer not yet seen to carry the response.
    watch: Option<SseParser>,
    /// The upstream, for naming it in an error (by its origin only).
    url: reqwest::Url,
}

/// The upstream's body as it arrives. An SSE answer that breaks off (or
/// ends) before carrying the response to `id` gets one more event: a
/// JSON-RPC error for it. A JSON body that breaks off aborts the response
/// (the client sees a broken connection, never a truncated answer taken
/// for whole).
fn relay_body(resp: reqwest::Response, sse: bool, id: Value, url: reqwest::Url) -> Body {
    let state = Relay {
        resp: Some(resp),
        watch: (sse && !id.is_null()).then(SseParser::new),
        id,
        url,
    };
    let chunks = stream::unfold(state, |mut st| async move {
        let resp = st.resp.as_mut()?;
        let broke = match resp.chunk().await {
            Ok(Some(chunk)) => {
                if let Some(parser) = st.watch.as_mut() {
                    if answers(parser, &chunk, &st.id) {
                        st.watch = None;
                    }
                }
                return Some((Ok(chunk), st));
            }
            Ok(None) => None,
            Err(e) => Some(describe(e, &st.url)),
        };
        st.resp = None;
        match (st.watch.take(), broke) {
            (Some(_), why) => {
                let why = why.unwrap_or_else(|| "it ended".into());
                let error = error(
                    &st.id,
                    "upstream-lost",
                    format!("the upstream's answer broke off before the response: {why}"),
                );
                // The blank lines first end whatever event the upstream left
                // half written, so this one is read on its own.
                let event = Bytes::from(format!("\n\nevent: message\ndata: {error}\n\n"));
                Some((Ok(event), st))
            }
            (None, Some(why)) => Some((Err(std::io::Error::other(why)), st)),
            (None, None) => None,
        }
    });
    Body::from_stream(chunks.boxed())
}

/// Whether `chunk` completes an SSE event that is the response to `id`.
fn answers(parser: &mut SseParser, chunk: &[u8], id: &Value) -> bool {
    parser.feed(chunk).into_iter().any(|ev| {
        serde_json::from_str::<Value>(&ev.data).is_ok_and(|m| {
            m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
        })
    })
}

/// A JSON-RPC error (-32603) for request `id`, with `data.reason`.
fn error(id: &Value, reason: &str, message: String) -> Value {
    crate::jsonrpc::error_with_data(
        id,
        crate::jsonrpc::INTERNAL_ERROR,
        message,
        json!({"reason": reason}),
    )
}

/// `status` with a JSON-RPC error body for `id`.
fn failure(status: StatusCode, id: &Value, reason: &str, message: String) -> Response<Body> {
    tracing::warn!(%id, reason, "stateless request through the gateway: {message}");
    axum::response::IntoResponse::into_response((status, axum::Json(error(id, reason, message))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stateless_era_s_headers_cross() {
        for name in [
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "mcp-protocol-version",
            "accept",
        ] {
            assert!(crosses(name), "{name}");
        }
        for name in [
            "authorization",
            "cookie",
            "host",
            "mcp-session-id",
            "origin",
            "content-length",
        ] {
            assert!(!crosses(name), "{name}");
        }
    }

    #[test]
    fn an_sse_event_answering_the_request_is_seen() {
        let mut p = SseParser::new();
        let id = json!(7);
        assert!(!answers(&mut p, b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n", &id));
        assert!(!answers(
            &mut p,
            b"data: {\"jsonrpc\":\"2.0\",\"id\":7,",
            &id
        ));
        assert!(answers(&mut p, b"\"result\":{}}\n\n", &id));
    }
}
