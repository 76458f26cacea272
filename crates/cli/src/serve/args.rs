//! The flags of `mcp-resume serve` (and of `gateway`, which shares
//! [`ServeArgs`]): each with its `MCP_RESUME_*` variable, default and
//! `--help` heading.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

/// `mcp-resume serve`: the server, with the built-in demo tools.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
mcp-resume serve                                  # 127.0.0.1:8080, durable log in the data dir\n  \
mcp-resume serve --listen 127.0.0.1:0             # a free port; prints `listening on http://ADDR/mcp`\n  \
mcp-resume serve --store memory                   # nothing survives a restart\n  \
mcp-resume serve --store disk:/var/lib/mcp/log --bearer-token s3cret\n  \
mcp-resume serve --metrics-listen 127.0.0.1:9090  # /metrics, /healthz, /readyz on their own port\n  \
mcp-resume serve --tls-cert cert.pem --tls-key key.pem   # HTTPS and WSS; prints `listening on https://ADDR/mcp`\n\n\
Demo tools served to every session:\n  \
echo {text}                      returns the text\n  \
emit {count, interval_ms}        appends `count` notifications/message to the session stream, in the background\n  \
register_tool / unregister_tool {name}   change this session's tool list (notifications/tools/list_changed)\n  \
progress {steps, interval_ms}    answers as a resumable request stream of notifications/progress, then the result\n\n\
Operations: GET /metrics (Prometheus), /healthz (the process answers), /readyz (the log answers; 503 otherwise).")]
pub struct ServeCmd {
    #[command(flatten)]
    pub(super) server: ServeArgs,
    #[command(flatten)]
    pub(super) demo: DemoArgs,
}

/// What only the built-in demo tools use (not `gateway`).
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Most tools one session may add with register_tool.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_SESSION_TOOLS",
        default_value_t = 256,
        help_heading = "Demo tools (serve only)"
    )]
    pub(super) max_session_tools: usize,

    /// Most background tasks (emit) one session may run at once.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_BACKGROUND_PER_SESSION",
        default_value_t = 16,
        help_heading = "Demo tools (serve only)"
    )]
    pub(super) max_background_per_session: usize,

    /// DANGEROUS, for demonstrations only: upgrade to WebSocket without the cursor
    /// echo, the replay and the gate (docs/protocol.md 9). Events committed during the
    /// handshake are silently lost. Never use in production.
    #[arg(
        long,
        env = "MCP_RESUME_UNSAFE_LEGACY_UPGRADE",
        help_heading = "Demo tools (serve only)"
    )]
    pub(super) unsafe_legacy_upgrade: bool,
}

/// The server's settings, shared by `serve` and `gateway`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. Port 0 picks a free port; the real address is printed.
    #[arg(
        long,
        env = "MCP_RESUME_LISTEN",
        default_value = "127.0.0.1:8080",
        help_heading = "Listening"
    )]
    pub(super) listen: SocketAddr,

    /// Base path of the MCP endpoint.
    #[arg(
        long,
        env = "MCP_RESUME_BASE_PATH",
        default_value = "/mcp",
        help_heading = "Listening"
    )]
    pub(super) base_path: String,

    /// Serve /metrics, /healthz and /readyz on this address instead of the main listener.
    #[arg(
        long,
        env = "MCP_RESUME_METRICS_LISTEN",
        value_name = "ADDR",
        help_heading = "Listening"
    )]
    pub(super) metrics_listen: Option<SocketAddr>,

    /// Refuse WebSocket upgrades with 426 (clients stay on SSE, losing nothing).
    #[arg(long, env = "MCP_RESUME_NO_WEBSOCKET", help_heading = "Listening")]
    pub(super) no_websocket: bool,

    /// Where the session log lives: `memory` (lost on restart), `disk:DIR` (a
    /// directory; every event is fsync'd before any client sees it), or
    /// `redis://HOST:PORT/DB` (shared by any number of instances), or
    /// `redis-cluster://HOST:PORT[,HOST:PORT...]` (the same on a Redis Cluster;
    /// any nodes as seeds). Default: `disk` in --data-dir.
    #[arg(long, env = "MCP_RESUME_STORE", help_heading = "Storage")]
    pub(super) store: Option<String>,

    /// Directory of the default disk log (the log lives in `log/` inside it).
    /// Default for `serve`: $XDG_DATA_HOME/mcp-resume, else
    /// ~/.local/share/mcp-resume; for `gateway`: `gateway/` inside that, so
    /// the two run side by side with their defaults.
    #[arg(
        long,
        env = "MCP_RESUME_DATA_DIR",
        hide_env_values = true,
        help_heading = "Storage"
    )]
    pub(super) data_dir: Option<PathBuf>,

    /// With a redis:// or redis-cluster:// store: replicas (of the session's
    /// master) that must acknowledge every append (`WAIT`) before it counts as committed. Pair with `appendonly yes` and `appendfsync always`
    /// on the Redis side for durability across a Redis restart.
    #[arg(
        long,
        env = "MCP_RESUME_REDIS_REPLICAS",
        default_value_t = 0,
        help_heading = "Storage"
    )]
    pub(super) redis_replicas: usize,

    /// With a redis-cluster:// store, or redis:// with --redis-replicas: the
    /// longest interval, in seconds, between the safety reads of the streams
    /// this instance follows. Reads are pushed by wake-ups; the safety read
    /// finds a lost one (on one server without replicas the commit itself
    /// rings, and there are none). It starts at
    /// 1 s and doubles while wake-ups keep arriving, so an idle followed
    /// stream costs one Redis command per this interval, and a lost wake-up
    /// delays events by at most this long.
    #[arg(long, env = "MCP_RESUME_REDIS_SAFETY_READ_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600), help_heading = "Storage")]
    pub(super) redis_safety_read_secs: u64,

    /// With a redis:// store (one server, no --redis-replicas): create new
    /// sessions in the seq-id layout, in which Redis numbers each stream's
    /// entries itself, so an event costs Redis three commands instead of
    /// six. Every instance of this release reads both layouts, and new
    /// sessions take it only while every live instance does; a release
    /// before it cannot read such a session (its requests fail). Turn it on
    /// once no instance of an older release will run against this Redis
    /// again, a rollback included (docs/operator.md, Redis). Sessions keep
    /// the layout they were created in.
    #[arg(long, env = "MCP_RESUME_REDIS_SEQ_IDS", help_heading = "Storage")]
    pub(super) redis_seq_ids: bool,

    /// Most events kept per stream; older ones are trimmed (never past an active pin).
    #[arg(
        long,
        env = "MCP_RESUME_RETENTION_EVENTS",
        default_value_t = 10_000,
        help_heading = "Storage"
    )]
    pub(super) retention_events: u64,

    /// Most seconds an event is kept.
    #[arg(
        long,
        env = "MCP_RESUME_RETENTION_SECS",
        default_value_t = 3600,
        help_heading = "Storage"
    )]
    pub(super) retention_secs: u64,

    /// Sessions idle longer than this many seconds end (later use gets 404).
    /// An open GET stream or WebSocket is use: it marks its session in the
    /// log every quarter of this (or every heartbeat, when that is longer).
    /// On Redis, maintenance reads the sessions' state at most every
    /// sixteenth of this or of --retention-secs (the shorter, at most
    /// 120 s), so an idle session ends up to that much later.
    #[arg(
        long,
        env = "MCP_RESUME_SESSION_TTL_SECS",
        default_value_t = 1800,
        help_heading = "Storage"
    )]
    pub(super) session_ttl_secs: u64,

    /// Seconds an ended session's id is remembered (never reused, always 404)
    /// before maintenance forgets it and its storage.
    #[arg(long, env = "MCP_RESUME_TOMBSTONE_TTL_SECS", default_value_t = 24 * 3600, help_heading = "Storage")]
    pub(super) tombstone_ttl_secs: u64,

    /// Require `Authorization: Bearer TOKEN` (or the subprotocol `mcp.auth.TOKEN`
    /// on WebSocket upgrades); anything else gets 401.
    #[arg(
        long,
        env = "MCP_RESUME_BEARER_TOKEN",
        hide_env_values = true,
        help_heading = "Auth"
    )]
    pub(super) bearer_token: Option<String>,

    /// Accept OAuth 2.1 JWT access tokens issued by this authorization server
    /// (the tokens' exact `iss`); 401 with a `resource_metadata` challenge
    /// otherwise, and GET /.well-known/oauth-protected-resource names it.
    #[arg(long, env = "MCP_RESUME_OAUTH_ISSUER", value_name = "URL", requires_all = ["oauth_audience", "oauth_jwks"], conflicts_with = "bearer_token", help_heading = "Auth")]
    pub(super) oauth_issuer: Option<String>,

    /// This server's resource URI, which tokens must carry in `aud`
    /// (e.g. `https://mcp.example.com/mcp`).
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_AUDIENCE",
        value_name = "URI",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    pub(super) oauth_audience: Option<String>,

    /// The issuer's signing keys (JWKS): an http(s):// URL, fetched at start and
    /// again (at most once a minute) for an unknown key id, or a file.
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_JWKS",
        value_name = "FILE|URL",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    pub(super) oauth_jwks: Option<String>,

    /// Scopes every token must carry (space-separated); 403 insufficient_scope otherwise.
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_SCOPE",
        value_name = "SCOPES",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    pub(super) oauth_scope: Option<String>,

    /// An Origin to allow besides loopback ones (repeatable; `*` allows any).
    /// Requests with any other Origin get 403, against DNS rebinding.
    #[arg(
        long = "allow-origin",
        env = "MCP_RESUME_ALLOW_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN",
        help_heading = "Auth"
    )]
    pub(super) allow_origins: Vec<String>,

    /// Serve HTTPS and WSS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(
        long,
        env = "MCP_RESUME_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key",
        help_heading = "TLS"
    )]
    pub(super) tls_cert: Option<PathBuf>,

    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(
        long,
        env = "MCP_RESUME_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert",
        help_heading = "TLS"
    )]
    pub(super) tls_key: Option<PathBuf>,

    /// Most live sessions; `initialize` beyond it gets 429.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_SESSIONS",
        default_value_t = 100_000,
        help_heading = "Limits"
    )]
    pub(super) max_sessions: usize,

    /// Most request streams (SSE-answered requests) one session may open; 429 beyond.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_REQUEST_STREAMS",
        default_value_t = 100_000,
        help_heading = "Limits"
    )]
    pub(super) max_request_streams: u64,

    /// Largest POST body in bytes (413 above it).
    #[arg(long, env = "MCP_RESUME_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024, help_heading = "Limits")]
    pub(super) max_body_bytes: usize,

    /// Seconds a client has to send a whole request header once it starts one
    /// (and to send its first request after connecting); slower ones are closed.
    #[arg(
        long,
        env = "MCP_RESUME_HEADER_READ_TIMEOUT_SECS",
        default_value_t = 30,
        help_heading = "Limits"
    )]
    pub(super) header_read_timeout_secs: u64,

    /// Seconds a connection may sit with no request in flight before it is closed
    /// (HTTP/1.1 keep-alive; HTTP/2 gets a GOAWAY). Not --heartbeat-secs, the
    /// heartbeat inside open streams.
    #[arg(
        long,
        env = "MCP_RESUME_KEEP_ALIVE_SECS",
        default_value_t = 60,
        help_heading = "Limits"
    )]
    pub(super) keep_alive_secs: u64,

    /// Seconds of silence after which an open stream gets a heartbeat (an
    /// SSE comment, a WebSocket heartbeat frame). Not --keep-alive-secs.
    #[arg(
        long,
        env = "MCP_RESUME_HEARTBEAT_SECS",
        alias = "keepalive-secs",
        default_value_t = 15,
        help_heading = "Tuning"
    )]
    pub(super) heartbeat_secs: u64,

    /// Milliseconds an upgraded client has to send `cursor-ack` (else close 4408).
    #[arg(
        long,
        env = "MCP_RESUME_UPGRADE_TIMEOUT_MS",
        default_value_t = 10_000,
        help_heading = "Tuning"
    )]
    pub(super) upgrade_timeout_ms: u64,

    /// Seconds a call's response is retried while the log is unavailable
    /// before an error response (-32603, reason commit-failed) ends the call
    /// instead: no call stays open.
    #[arg(long, env = "MCP_RESUME_REPLY_DEADLINE_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Tuning")]
    pub(super) reply_deadline_secs: u64,

    /// Seconds a session's in-process handler (the built-in tools) may have
    /// nothing in flight before it is parked: stopped, its memory freed, and
    /// restored from the session's stored `initialize` on its next message,
    /// so an idle session holds little more than its open streams. A
    /// gateway's child or upstream session is never parked (it holds state a
    /// restart would lose).
    #[arg(long, env = "MCP_RESUME_PARK_AFTER_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Tuning")]
    pub(super) park_after_secs: u64,

    /// Seconds a graceful stop (SIGTERM, Ctrl-C) may take: /readyz answers 503 at
    /// once, calls in flight and the work tools started finish, a gateway's
    /// settled sessions give their leases up; then streams end (clients resume
    /// elsewhere) and what still runs is cut off
    #[arg(
        long,
        env = "MCP_RESUME_SHUTDOWN_GRACE_SECS",
        default_value_t = 10,
        help_heading = "Shutdown"
    )]
    pub(super) shutdown_grace_secs: u64,

    /// Seconds a stopping server still accepts connections (every HTTP/1.1
    /// answer with `Connection: close`) before it stops accepting: at least
    /// your balancer's health-check interval times its fall count, so it has
    /// seen /readyz turn 503. Part of --shutdown-grace-secs
    #[arg(
        long,
        env = "MCP_RESUME_DRAIN_ACCEPT_SECS",
        default_value_t = 2,
        help_heading = "Shutdown"
    )]
    pub(super) drain_accept_secs: u64,
}

pub(super) fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("mcp-resume");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/mcp-resume"),
        None => PathBuf::from("mcp-resume-data"),
    }
}
