//! A tracing span per request, carrying the method, the path and the session
//! id, so every log line a request causes says which session it was; at debug
//! level (`RUST_LOG=mcp_resume_server=debug`, or `debug`), since with the fmt
//! subscriber an enabled span formats its fields as it is made, which costs
//! every request (benches/results/echo-ceiling.md). The warnings and errors of
//! the request paths name their session themselves.
//!
//! The same layer counts the refused requests (`refusals` by status) as their
//! responses pass it, and logs a response with a server error (5xx) at error
//! level. It is ours rather than tower-http's `TraceLayer`, which read the
//! clock five times a request (for latencies only its debug events print) and
//! wrapped every response body to time each chunk, an SSE stream's events
//! included; and one layer rather than two, as axum boxes a route under each
//! layer and clones that box for every request.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Span;

use crate::metrics::StatusLabel;
use crate::names::SESSION_ID;
use crate::route::state::AppState;

/// The layer of `state`'s MCP routes.
#[derive(Clone)]
pub(crate) struct RequestLayer(AppState);

/// The layer: the span above, the refusals counted.
pub(crate) fn layer(state: &AppState) -> RequestLayer {
    RequestLayer(state.clone())
}

impl<S> Layer<S> for RequestLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Traced {
            inner,
            state: self.0.clone(),
        }
    }
}

/// A service under [`RequestLayer`].
#[derive(Clone)]
pub(crate) struct Traced<S> {
    inner: S,
    state: AppState,
}

/// The span of one request.
fn request_span<B>(req: &Request<B>) -> Span {
    // The fields are read only when the span is enabled (the macro
    // evaluates them after its level check): the header lookup is not paid
    // at the default level.
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

impl<S, B, ResBody> Service<Request<B>> for Traced<S>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answered<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let span = request_span(&req);
        let future = {
            let _entered = span.enter();
            tracing::debug!("started processing request");
            self.inner.call(req)
        };
        Answered {
            future,
            span,
            state: self.state.clone(),
        }
    }
}

pin_project! {
    /// A request's answer, polled in its span; counted when it comes.
    pub(crate) struct Answered<F> {
        #[pin]
        future: F,
        span: Span,
        state: AppState,
    }
}

impl<F, ResBody, E> Future for Answered<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let answer = std::task::ready!(this.future.poll(cx));
        if let Ok(resp) = &answer {
            let status = resp.status();
            if status.is_client_error() || status.is_server_error() {
                this.state
                    .metrics
                    .refusals
                    .get_or_create(&StatusLabel {
                        status: status.as_u16(),
                    })
                    .inc();
            }
            if status.is_server_error() {
                tracing::error!(status = status.as_u16(), "response failed");
            } else {
                tracing::debug!(status = status.as_u16(), "finished processing request");
            }
        }
        Poll::Ready(answer)
    }
}
