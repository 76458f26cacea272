//! What an operator scrapes: Prometheus metrics of one server, encoded in
//! the OpenMetrics text format (which Prometheus scrapes natively) by the
//! operations endpoints (`crate::http::ops`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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

/// A `limit` label: which configured limit refused something.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    /// One of [`LIMITS`].
    pub limit: &'static str,
}

/// Every limit whose refusals are counted in `mcp_resume_limit_refusals`,
/// each with the flag that sets it: the gateway's stateless pool
/// (`--pool-starts-per-sec`, `--pool-children-per-principal`,
/// `--pool-children` and `--max-children`, `--pool-calls-per-child`,
/// `--pool-stdin-queue`), and the events a task keeps
/// (`--task-max-events`, the oldest dropped).
pub(crate) const LIMITS: &[&str] = &[
    "pool-child-starts",
    "pool-principal-share",
    "pool-full",
    "pool-child-calls",
    "pool-child-stdin",
    "task-events",
];

/// The refusals at a limit, counted for the whole process: what refuses
/// (a gateway's pool) is built before the server whose `/metrics` shows
/// them, and one process serves one server.
fn limit_refusals() -> &'static Family<LimitLabel, Counter> {
    static FAMILY: std::sync::OnceLock<Family<LimitLabel, Counter>> = std::sync::OnceLock::new();
    FAMILY.get_or_init(|| {
        let f: Family<LimitLabel, Counter> = Family::default();
        for limit in LIMITS {
            let _ = f.get_or_create(&LimitLabel { limit });
        }
        f
    })
}

/// Counts one refusal at `limit`, one of [`LIMITS`], in
/// `mcp_resume_limit_refusals_total`.
pub(crate) fn limit_refused(limit: &'static str) {
    limit_counted(limit, 1);
}

/// Counts `n` refusals (for `task-events`, events a task let go past its
/// cap) at `limit`, one of [`LIMITS`].
pub(crate) fn limit_counted(limit: &'static str, n: u64) {
    limit_refusals()
        .get_or_create(&LimitLabel { limit })
        .inc_by(n);
}

/// The server's metrics; one set per server, registered in its own registry.
pub struct Metrics {
    registry: Registry,
    /// Live sessions, set from the log at each scrape.
    pub(crate) sessions_live: Gauge,
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
    /// The maintenance buckets this instance held at its last pass.
    maintenance_buckets: Gauge,
    /// How long each maintenance pass took.
    maintenance_duration: Histogram,
    /// Sessions maintenance ended for being idle.
    sessions_expired: Counter,
    /// Session handlers parked for having nothing in flight.
    pub(crate) handlers_parked: Counter,
    /// 1 while a graceful stop drains this instance.
    pub(crate) draining: Gauge,
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
        let maintenance_buckets = Gauge::default();
        // 1 ms .. ~65 s, doubling.
        let maintenance_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 17),
        );
        let sessions_expired = Counter::default();
        let handlers_parked = Counter::default();
        let draining = Gauge::default();
        registry.register(
            "draining",
            "1 while a graceful stop drains this instance (readyz answers 503; the work it promised finishes)",
            draining.clone(),
        );
        registry.register(
            "handlers_parked",
            "Session handlers this instance parked: stopped after nothing was in flight for the park time, made again from the session's initialize on its next message",
            handlers_parked.clone(),
        );
        registry.register(
            "maintenance_buckets",
            "Session buckets (of 64) this instance maintains: on a shared log each bucket is leased to one live instance",
            maintenance_buckets.clone(),
        );
        registry.register(
            "maintenance_pass_duration_seconds",
            "Time one maintenance pass (retention, idle expiry, tombstones) took",
            maintenance_duration.clone(),
        );
        registry.register(
            "sessions_expired",
            "Sessions this instance's maintenance ended for being idle",
            sessions_expired.clone(),
        );
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
        registry.register(
            "limit_refusals",
            "Refusals at a configured limit, by limit (the gateway's stateless pool; task-events counts events a task dropped past its cap)",
            limit_refusals().clone(),
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
            maintenance_buckets,
            maintenance_duration,
            sessions_expired,
            handlers_parked,
            draining,
        }
    }
}

impl Metrics {
    /// Records one commit of `events` events that took `took`.
    pub(crate) fn committed(&self, events: usize, took: Duration) {
        self.events_committed.inc_by(events as u64);
        self.commit_duration.observe(took.as_secs_f64());
    }

    /// Records one maintenance pass: the buckets it covered, the sessions
    /// it ended, how long it took.
    pub(crate) fn maintained(&self, buckets: u16, ended: usize, took: Duration) {
        self.maintenance_buckets.set(i64::from(buckets));
        self.sessions_expired.inc_by(ended as u64);
        self.maintenance_duration.observe(took.as_secs_f64());
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
    pub(crate) fn encode(&self) -> String {
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
