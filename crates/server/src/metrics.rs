//! What an operator scrapes: Prometheus metrics of one server, and the
//! liveness and readiness probes.
//!
//! `GET /metrics` answers in the OpenMetrics text format (which Prometheus
//! scrapes natively); `GET /healthz` says the process answers; `GET /readyz`
//! says the log can be reached (503 while, say, Redis is down).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::LogError;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::state::AppState;

/// A `transport` label: `sse` or `websocket`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransportLabel {
    /// `sse` or `websocket`.
    pub transport: &'static str,
}

/// An `outcome` label of an upgrade.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// `upgraded`, `refused` or `legacy`.
    pub outcome: &'static str,
}

/// A `status` label: the HTTP status of a refusal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// The status code, e.g. `409`.
    pub status: u16,
}

/// The server's metrics; one set per server, registered in its own registry.
pub struct Metrics {
    registry: Registry,
    /// Live sessions, set from the log at each scrape.
    sessions_live: Gauge,
    /// Streams with a lost range when the log opened (docs/protocol.md 6.1).
    pub(crate) damaged_streams: Gauge,
    /// Events committed through this server.
    pub(crate) events_committed: Counter,
    /// Time from handing a batch to the log to its commit.
    pub(crate) commit_duration: Histogram,
    /// Open readers by transport.
    pub(crate) readers: Family<TransportLabel, Gauge<i64, std::sync::atomic::AtomicI64>>,
    /// WebSocket upgrades by outcome.
    pub(crate) upgrades: Family<OutcomeLabel, Counter>,
    /// Requests refused (every 4xx and 5xx) by status.
    pub(crate) refusals: Family<StatusLabel, Counter<u64, AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("mcp_resume");
        let sessions_live = Gauge::default();
        let damaged_streams = Gauge::default();
        let events_committed = Counter::default();
        // 50 µs .. ~3.3 s, doubling.
        let commit_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.00005, 2.0, 17),
        );
        let readers: Family<TransportLabel, Gauge<i64, std::sync::atomic::AtomicI64>> =
            Family::default();
        let upgrades: Family<OutcomeLabel, Counter> = Family::default();
        // Every known label value from start-up, at 0: a Prometheus user's
        // rate() and alerts see the series before the first reader.
        for transport in ["sse", "websocket"] {
            let _ = readers.get_or_create(&TransportLabel { transport });
        }
        for outcome in ["upgraded", "refused", "legacy"] {
            let _ = upgrades.get_or_create(&OutcomeLabel { outcome });
        }
        let refusals = Family::default();
        registry.register("sessions_live", "Live sessions", sessions_live.clone());
        registry.register(
            "log_damaged_streams",
            "Streams whose committed events damaged storage lost, found when the log opened",
            damaged_streams.clone(),
        );
        registry.register(
            "events_committed",
            "Server-to-client messages committed to the log",
            events_committed.clone(),
        );
        registry.register(
            "commit_duration_seconds",
            "Time from handing a batch of events to the log until it is committed",
            commit_duration.clone(),
        );
        registry.register(
            "readers",
            "Open readers of a stream, by transport",
            readers.clone(),
        );
        registry.register(
            "upgrades",
            "WebSocket upgrades of the session stream, by outcome",
            upgrades.clone(),
        );
        registry.register(
            "refusals",
            "Requests answered with a 4xx or 5xx status, by status",
            refusals.clone(),
        );
        Self {
            registry,
            sessions_live,
            damaged_streams,
            events_committed,
            commit_duration,
            readers,
            upgrades,
            refusals,
        }
    }
}

impl Metrics {
    /// Records one commit of `events` events that took `took`.
    pub(crate) fn committed(&self, events: usize, took: Duration) {
        self.events_committed.inc_by(events as u64);
        self.commit_duration.observe(took.as_secs_f64());
    }

    /// Counts an open reader until the guard drops.
    pub(crate) fn reader(self: &Arc<Self>, transport: &'static str) -> ReaderGuard {
        self.readers
            .get_or_create(&TransportLabel { transport })
            .inc();
        ReaderGuard {
            metrics: self.clone(),
            transport,
        }
    }

    /// Counts an upgrade's outcome.
    pub(crate) fn upgrade(&self, outcome: &'static str) {
        self.upgrades.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// The text a scrape gets.
    fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Decrements the reader gauge when a reader ends, however it ends.
pub(crate) struct ReaderGuard {
    metrics: Arc<Metrics>,
    transport: &'static str,
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        self.metrics
            .readers
            .get_or_create(&TransportLabel {
                transport: self.transport,
            })
            .dec();
    }
}

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

/// `GET /readyz`: the log answers; 503 with the reason while it cannot.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
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

/// Counts every refused request (4xx, 5xx) by status; a layer on the MCP routes.
pub(crate) async fn count_refusals(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if status.is_client_error() || status.is_server_error() {
        state
            .metrics
            .refusals
            .get_or_create(&StatusLabel {
                status: status.as_u16(),
            })
            .inc();
    }
    resp
}
