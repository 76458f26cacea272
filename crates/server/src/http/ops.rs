//! The operations endpoints: `GET /metrics` (the OpenMetrics text of
//! [`crate::metrics::Metrics`]), `GET /healthz` (the process answers),
//! `GET /readyz` (the log can be reached: 503 while, say, Redis is down, and
//! once a graceful stop began),
//! and the layer that counts refused requests.

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::LogError;

use crate::route::state::AppState;

/// `GET /metrics`.
pub(crate) async fn scrape(State(state): State<AppState>) -> Response {
    let live = state.log.live_sessions().await;
    state.metrics.sessions_live.set(live as i64);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        )],
        state.metrics.encode(),
    )
        .into_response()
}

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: the log answers; 503 with the reason while it cannot,
/// and from the moment a graceful stop begins (`draining`), so a balancer
/// sends no new work to an instance that is about to go.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if state.drain.draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
            "draining\n",
        )
            .into_response();
    }
    // A lookup of an id no session has: a reachable log answers "no such session".
    match state.log.session("readyz-probe").await {
        Ok(_) | Err(LogError::NoSession(_)) | Err(LogError::SessionEnded) => {
            (StatusCode::OK, "ready\n").into_response()
        }
        Err(e) => {
            // The reason goes to the server's log, not to whoever probes.
            tracing::warn!(error = %e, "readyz: the log cannot be reached");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
                "log unavailable\n",
            )
                .into_response()
        }
    }
}
