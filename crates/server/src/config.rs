//! What an operator can tune, with the defaults of the protocol.

use std::sync::Arc;
use std::time::Duration;

use crate::accept::ConnLimits;

/// Server settings; `Default` gives the docs/protocol.md defaults.
///
/// Non-exhaustive, so adding a setting is not a breaking change: start from
/// `ServerConfig::default()` and set the fields you need.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Base path `P` (docs/protocol.md 3).
    pub base_path: String,
    /// Allowed `Origin` values besides the loopback ones (when `allow_loopback_origins`).
    pub allowed_origins: Vec<String>,
    /// Accept `http://localhost:*`, `http://127.0.0.1:*` and `http://[::1]:*` origins.
    pub allow_loopback_origins: bool,
    /// Who may call: nobody checked (the default), a static bearer token, or
    /// OAuth 2.1 access tokens (see [`crate::auth`]).
    pub auth: crate::auth::Authenticator,
    /// Largest POST body.
    pub max_body_bytes: usize,
    /// Largest WebSocket message from a client.
    pub max_frame_bytes: usize,
    /// Most live sessions in this process.
    pub max_sessions: usize,
    /// Most request streams one session may open.
    pub max_request_streams: u64,
    /// Sessions idle longer than this end.
    pub session_ttl: Duration,
    /// How long a session's in-process handler (the built-in tools, a hosted
    /// rmcp handler) may have nothing in flight before it is parked: stopped,
    /// its memory freed, and restored from the session's stored `initialize`
    /// params on its next message. An idle session then holds only its
    /// streams. `None`: the backend's own
    /// [`park_after`](crate::backend::Backend::park_after) (120 s). A backend
    /// that never parks (a gateway's child, an upstream session: state a
    /// restart would lose) is not parked whatever this says. Maintenance runs
    /// often enough for it (at least every half park time, at most once a
    /// second for that).
    pub park_after: Option<Duration>,
    /// How long an ended session's id is remembered (so it is never confused
    /// with a new one) before maintenance forgets it.
    pub tombstone_ttl: Duration,
    /// SSE keepalive comment and WebSocket heartbeat interval.
    pub keepalive: Duration,
    /// Time a client has to send `cursor-ack`.
    pub upgrade_timeout: Duration,
    /// The SSE `retry:` the priming event advises.
    pub retry: Duration,
    /// How often retention and idle expiry run.
    pub maintenance_interval: Duration,
    /// Accept WebSocket upgrades; when off every upgrade gets 426 and clients stay on SSE.
    pub websocket: bool,
    /// docs/protocol.md 9: reproduce the unsafe upgrade on purpose.
    pub unsafe_legacy_upgrade: bool,
    /// Tools one session may register with `register_tool`.
    pub max_session_tools: usize,
    /// Background tasks (for example `emit`) one session may run at once.
    pub max_background_per_session: usize,
    /// Serve `/metrics`, `/healthz` and `/readyz` from [`crate::McpServer::router`]
    /// (off when they have a listener of their own).
    pub metrics_on_main: bool,
    /// Serve HTTPS (and WSS) with this configuration (see [`crate::tls_config`]);
    /// `None` serves plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Header-read, keep-alive, TLS-handshake and shutdown time limits.
    pub conn_limits: ConnLimits,
    /// Streams of the log that damaged storage left with a lost range when
    /// it opened (docs/protocol.md 6.1; `DiskLog::lost_ranges`), exported as
    /// `mcp_resume_log_damaged_streams` so an operator's alert sees them.
    pub damaged_streams: u64,
    /// How long the response of a call is retried while the log is
    /// unavailable before an error response (-32603, `commit-failed`) takes
    /// its place, so that no call stays open (docs/protocol.md 3.4).
    pub reply_deadline: Duration,
}

impl ServerConfig {
    /// How often an open reader marks its session as used (docs/protocol.md
    /// 10): a quarter of the session TTL, so a session with a reader is never
    /// near expiry, but no more often than the keepalive, when a reader's
    /// loop wakes anyway. Touching at the keepalive itself cost one log
    /// write per reader every 15 s: on Redis about 6,700 scripts a second
    /// at 100,000 readers (benches/results/scale.md), for nothing.
    pub fn reader_touch_every(&self) -> Duration {
        (self.session_ttl / 4).max(self.keepalive)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            base_path: "/mcp".into(),
            allowed_origins: Vec::new(),
            allow_loopback_origins: true,
            auth: crate::auth::Authenticator::default(),
            max_body_bytes: 4 * 1024 * 1024,
            max_frame_bytes: 4 * 1024 * 1024,
            max_sessions: 100_000,
            max_request_streams: 100_000,
            session_ttl: Duration::from_secs(30 * 60),
            park_after: None,
            tombstone_ttl: Duration::from_secs(24 * 3600),
            keepalive: Duration::from_secs(15),
            upgrade_timeout: Duration::from_secs(10),
            retry: Duration::from_millis(1000),
            maintenance_interval: Duration::from_secs(30),
            websocket: true,
            unsafe_legacy_upgrade: false,
            max_session_tools: 256,
            max_background_per_session: 16,
            metrics_on_main: true,
            tls: None,
            conn_limits: ConnLimits::default(),
            damaged_streams: 0,
            reply_deadline: Duration::from_secs(30),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_touches_every_quarter_ttl_never_more_often_than_the_keepalive() {
        let mut c = ServerConfig::default();
        assert_eq!(c.reader_touch_every(), Duration::from_secs(450));
        c.session_ttl = Duration::from_secs(2);
        c.keepalive = Duration::from_millis(500);
        assert_eq!(c.reader_touch_every(), Duration::from_millis(500));
        c.keepalive = Duration::from_secs(15);
        assert_eq!(c.reader_touch_every(), Duration::from_secs(15));
    }
}
