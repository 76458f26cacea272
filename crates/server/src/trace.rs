//! A tracing span per request, carrying the method, the path and the session
//! id, so every log line a request causes says which session it was; at
//! debug level (`RUST_LOG=mcp_resume_server=debug`, or `debug`): with the fmt
//! subscriber an enabled span formats its fields as it is made, a tenth of
//! the instructions of a `tools/call` answered as JSON. The warnings and
//! errors of the request paths name their session themselves.

use axum::http::Request;
use mcp_resume_proto::headers as h;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, TraceLayer};

/// Makes the span of one request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &Request<B>) -> tracing::Span {
        let session = req
            .headers()
            .get(h::MCP_SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        tracing::debug_span!(
            "request",
            method = %req.method(),
            path = req.uri().path(),
            session,
        )
    }
}

/// The layer: the span above; the per-request events at debug level.
pub(crate) fn layer() -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RequestSpan> {
    TraceLayer::new_for_http().make_span_with(RequestSpan)
}
