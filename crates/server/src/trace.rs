//! A tracing span per request, carrying the method, the path and the session
//! id, so every log line a request causes says which session it was; at
//! debug level (`RUST_LOG=mcp_resume_server=debug`, or `debug`): with the fmt
//! subscriber an enabled span formats its fields as it is made, a tenth of
//! the instructions of a `tools/call` answered as JSON. The warnings and
//! errors of the request paths name their session themselves.
//!
//! The same layer counts the refused requests (`refusals` by status) as
//! their responses pass it: a layer of its own per request cost a boxed
//! clone of the route below it and a boxed future (axum's `from_fn`).

use std::time::Duration;

use axum::http::{Request, Response};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{DefaultOnRequest, DefaultOnResponse, MakeSpan, OnResponse, TraceLayer};

use crate::http::guard::SESSION_ID;
use crate::metrics::StatusLabel;
use crate::route::state::AppState;

/// Makes the span of one request.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RequestSpan;

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &Request<B>) -> tracing::Span {
        // The fields are read only when the span is enabled (the macro
        // evaluates them after its level check): the header lookup is not
        // paid at the default level.
        tracing::debug_span!(
            "request",
            method = %req.method(),
            path = req.uri().path(),
            session = req
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .unwrap_or(""),
        )
    }
}

/// Counts a refused request (4xx, 5xx) by its status, then does what
/// tower-http does by default (an event at debug level).
#[derive(Clone)]
pub(crate) struct CountRefusals(AppState);

impl<B> OnResponse<B> for CountRefusals {
    fn on_response(self, resp: &Response<B>, latency: Duration, span: &tracing::Span) {
        let status = resp.status();
        if status.is_client_error() || status.is_server_error() {
            self.0
                .metrics
                .refusals
                .get_or_create(&StatusLabel {
                    status: status.as_u16(),
                })
                .inc();
        }
        DefaultOnResponse::default().on_response(resp, latency, span)
    }
}

/// The layer of `state`'s MCP routes: the span above, the refusals counted,
/// the per-request events at debug level.
pub(crate) fn layer(
    state: &AppState,
) -> TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    RequestSpan,
    DefaultOnRequest,
    CountRefusals,
> {
    TraceLayer::new_for_http()
        .make_span_with(RequestSpan)
        .on_response(CountRefusals(state.clone()))
}
