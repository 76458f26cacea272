//! `mcp-resume serve`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};
use mcp_resume_server::auth::{AuthConfig, Authenticator, JwksSource, OAuthConfig};
use mcp_resume_server::backend::Backend;
use mcp_resume_server::{demo::demo_tools, tls_config, McpServer, ServerConfig};

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
    server: ServeArgs,
    #[command(flatten)]
    demo: DemoArgs,
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
    max_session_tools: usize,

    /// Most background tasks (emit) one session may run at once.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_BACKGROUND_PER_SESSION",
        default_value_t = 16,
        help_heading = "Demo tools (serve only)"
    )]
    max_background_per_session: usize,

    /// DANGEROUS, for demonstrations only: upgrade to WebSocket without the cursor
    /// echo, the replay and the gate (docs/protocol.md 9). Events committed during the
    /// handshake are silently lost. Never use in production.
    #[arg(
        long,
        env = "MCP_RESUME_UNSAFE_LEGACY_UPGRADE",
        help_heading = "Demo tools (serve only)"
    )]
    unsafe_legacy_upgrade: bool,
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
    listen: SocketAddr,

    /// Base path of the MCP endpoint.
    #[arg(
        long,
        env = "MCP_RESUME_BASE_PATH",
        default_value = "/mcp",
        help_heading = "Listening"
    )]
    base_path: String,

    /// Serve /metrics, /healthz and /readyz on this address instead of the main listener.
    #[arg(
        long,
        env = "MCP_RESUME_METRICS_LISTEN",
        value_name = "ADDR",
        help_heading = "Listening"
    )]
    metrics_listen: Option<SocketAddr>,

    /// Refuse WebSocket upgrades with 426 (clients stay on SSE, losing nothing).
    #[arg(long, env = "MCP_RESUME_NO_WEBSOCKET", help_heading = "Listening")]
    no_websocket: bool,

    /// Where the session log lives: `memory` (lost on restart), `disk:DIR` (a
    /// directory; every event is fsync'd before any client sees it), or
    /// `redis://HOST:PORT/DB` (shared by any number of instances), or
    /// `redis-cluster://HOST:PORT[,HOST:PORT...]` (the same on a Redis Cluster;
    /// any nodes as seeds). Default: `disk` in --data-dir.
    #[arg(long, env = "MCP_RESUME_STORE", help_heading = "Storage")]
    store: Option<String>,

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
    data_dir: Option<PathBuf>,

    /// With a redis:// or redis-cluster:// store: replicas (of the session's
    /// master) that must acknowledge every append (`WAIT`) before it counts as committed. Pair with `appendonly yes` and `appendfsync always`
    /// on the Redis side for durability across a Redis restart.
    #[arg(
        long,
        env = "MCP_RESUME_REDIS_REPLICAS",
        default_value_t = 0,
        help_heading = "Storage"
    )]
    redis_replicas: usize,

    /// With a redis-cluster:// store: the longest interval, in seconds,
    /// between the safety reads of the streams this instance follows. Reads
    /// are pushed by wake-ups; the safety read finds a lost one. It starts at
    /// 1 s and doubles while wake-ups keep arriving, so an idle followed
    /// stream costs one Redis command per this interval, and a lost wake-up
    /// delays events by at most this long.
    #[arg(long, env = "MCP_RESUME_REDIS_SAFETY_READ_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600), help_heading = "Storage")]
    redis_safety_read_secs: u64,

    /// Most events kept per stream; older ones are trimmed (never past an active pin).
    #[arg(
        long,
        env = "MCP_RESUME_RETENTION_EVENTS",
        default_value_t = 10_000,
        help_heading = "Storage"
    )]
    retention_events: u64,

    /// Most seconds an event is kept.
    #[arg(
        long,
        env = "MCP_RESUME_RETENTION_SECS",
        default_value_t = 3600,
        help_heading = "Storage"
    )]
    retention_secs: u64,

    /// Sessions idle longer than this many seconds end (later use gets 404).
    /// An open GET stream or WebSocket is use: it marks its session in the
    /// log every quarter of this (or every heartbeat, when that is longer).
    #[arg(
        long,
        env = "MCP_RESUME_SESSION_TTL_SECS",
        default_value_t = 1800,
        help_heading = "Storage"
    )]
    session_ttl_secs: u64,

    /// Seconds an ended session's id is remembered (never reused, always 404)
    /// before maintenance forgets it and its storage.
    #[arg(long, env = "MCP_RESUME_TOMBSTONE_TTL_SECS", default_value_t = 24 * 3600, help_heading = "Storage")]
    tombstone_ttl_secs: u64,

    /// Require `Authorization: Bearer TOKEN` (or the subprotocol `mcp.auth.TOKEN`
    /// on WebSocket upgrades); anything else gets 401.
    #[arg(
        long,
        env = "MCP_RESUME_BEARER_TOKEN",
        hide_env_values = true,
        help_heading = "Auth"
    )]
    bearer_token: Option<String>,

    /// Accept OAuth 2.1 JWT access tokens issued by this authorization server
    /// (the tokens' exact `iss`); 401 with a `resource_metadata` challenge
    /// otherwise, and GET /.well-known/oauth-protected-resource names it.
    #[arg(long, env = "MCP_RESUME_OAUTH_ISSUER", value_name = "URL", requires_all = ["oauth_audience", "oauth_jwks"], conflicts_with = "bearer_token", help_heading = "Auth")]
    oauth_issuer: Option<String>,

    /// This server's resource URI, which tokens must carry in `aud`
    /// (e.g. `https://mcp.example.com/mcp`).
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_AUDIENCE",
        value_name = "URI",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    oauth_audience: Option<String>,

    /// The issuer's signing keys (JWKS): an http(s):// URL, fetched at start and
    /// again (at most once a minute) for an unknown key id, or a file.
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_JWKS",
        value_name = "FILE|URL",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    oauth_jwks: Option<String>,

    /// Scopes every token must carry (space-separated); 403 insufficient_scope otherwise.
    #[arg(
        long,
        env = "MCP_RESUME_OAUTH_SCOPE",
        value_name = "SCOPES",
        requires = "oauth_issuer",
        help_heading = "Auth"
    )]
    oauth_scope: Option<String>,

    /// An Origin to allow besides loopback ones (repeatable; `*` allows any).
    /// Requests with any other Origin get 403, against DNS rebinding.
    #[arg(
        long = "allow-origin",
        env = "MCP_RESUME_ALLOW_ORIGINS",
        value_delimiter = ',',
        value_name = "ORIGIN",
        help_heading = "Auth"
    )]
    allow_origins: Vec<String>,

    /// Serve HTTPS and WSS with this PEM certificate chain (leaf first); needs --tls-key.
    #[arg(
        long,
        env = "MCP_RESUME_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key",
        help_heading = "TLS"
    )]
    tls_cert: Option<PathBuf>,

    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of --tls-cert.
    #[arg(
        long,
        env = "MCP_RESUME_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert",
        help_heading = "TLS"
    )]
    tls_key: Option<PathBuf>,

    /// Most live sessions; `initialize` beyond it gets 429.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_SESSIONS",
        default_value_t = 100_000,
        help_heading = "Limits"
    )]
    max_sessions: usize,

    /// Most request streams (SSE-answered requests) one session may open; 429 beyond.
    #[arg(
        long,
        env = "MCP_RESUME_MAX_REQUEST_STREAMS",
        default_value_t = 100_000,
        help_heading = "Limits"
    )]
    max_request_streams: u64,

    /// Largest POST body in bytes (413 above it).
    #[arg(long, env = "MCP_RESUME_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024, help_heading = "Limits")]
    max_body_bytes: usize,

    /// Seconds a client has to send a whole request header once it starts one
    /// (and to send its first request after connecting); slower ones are closed.
    #[arg(
        long,
        env = "MCP_RESUME_HEADER_READ_TIMEOUT_SECS",
        default_value_t = 30,
        help_heading = "Limits"
    )]
    header_read_timeout_secs: u64,

    /// Seconds a connection may sit with no request in flight before it is closed
    /// (HTTP/1.1 keep-alive; HTTP/2 gets a GOAWAY). Not --heartbeat-secs, the
    /// heartbeat inside open streams.
    #[arg(
        long,
        env = "MCP_RESUME_KEEP_ALIVE_SECS",
        default_value_t = 60,
        help_heading = "Limits"
    )]
    keep_alive_secs: u64,

    /// Seconds of silence after which an open stream gets a heartbeat (an
    /// SSE comment, a WebSocket heartbeat frame). Not --keep-alive-secs.
    #[arg(
        long,
        env = "MCP_RESUME_HEARTBEAT_SECS",
        alias = "keepalive-secs",
        default_value_t = 15,
        help_heading = "Tuning"
    )]
    heartbeat_secs: u64,

    /// Milliseconds an upgraded client has to send `cursor-ack` (else close 4408).
    #[arg(
        long,
        env = "MCP_RESUME_UPGRADE_TIMEOUT_MS",
        default_value_t = 10_000,
        help_heading = "Tuning"
    )]
    upgrade_timeout_ms: u64,

    /// Seconds a call's response is retried while the log is unavailable
    /// before an error response (-32603, reason commit-failed) ends the call
    /// instead: no call stays open.
    #[arg(long, env = "MCP_RESUME_REPLY_DEADLINE_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Tuning")]
    reply_deadline_secs: u64,

    /// Seconds a session's in-process handler (the built-in tools) may have
    /// nothing in flight before it is parked: stopped, its memory freed, and
    /// restored from the session's stored `initialize` on its next message,
    /// so an idle session holds little more than its open streams. A
    /// gateway's child or upstream session is never parked (it holds state a
    /// restart would lose).
    #[arg(long, env = "MCP_RESUME_PARK_AFTER_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Tuning")]
    park_after_secs: u64,

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
    shutdown_grace_secs: u64,

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
    drain_accept_secs: u64,
}

fn default_data_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("mcp-resume");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/mcp-resume"),
        None => PathBuf::from("mcp-resume-data"),
    }
}

/// Opens the log the flags name; also says how many of its streams damaged
/// storage left with a lost range (docs/protocol.md 6.1; the disk log logs
/// each of them as it opens).
async fn open_log(
    args: &ServeArgs,
    retention: Retention,
    default_dir: &Path,
) -> Result<(Arc<dyn Log>, String, u64), String> {
    match args.store.as_deref() {
        Some("memory") => Ok((Arc::new(MemoryLog::new(retention)), "memory".into(), 0)),
        Some(s) if s.starts_with("redis://") || s.starts_with("redis-cluster://") => {
            let log = RedisLog::connect(s, retention, args.redis_replicas)
                .await
                .map_err(|e| format!("connecting to {s}: {e}"))?;
            log.set_safety_read_max(Duration::from_secs(args.redis_safety_read_secs));
            match log.durability().await {
                (_, Some(warning)) => {
                    tracing::warn!("{s}: {warning} (docs/operator.md, Redis)")
                }
                (words, None) => tracing::info!("{s}: {words}"),
            }
            Ok((Arc::new(log), s.to_owned(), 0))
        }
        Some(s) => {
            let path = match s.strip_prefix("disk:") {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                Some(_) => {
                    return Err(
                        "--store disk: needs a path, e.g. disk:/var/lib/mcp-resume/log".into(),
                    )
                }
                None if s == "disk" => args
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| default_dir.to_owned())
                    .join("log"),
                None => {
                    return Err(format!(
                        "--store {s:?}: expected memory, disk:PATH, redis://HOST:PORT/DB \
                         or redis-cluster://HOST:PORT[,HOST:PORT...]"
                    ))
                }
            };
            open_disk(&path, retention)
        }
        None => {
            let path = args
                .data_dir
                .clone()
                .unwrap_or_else(|| default_dir.to_owned())
                .join("log");
            open_disk(&path, retention)
        }
    }
}

/// Opens the disk log at `path`, counting its damaged streams.
fn open_disk(path: &Path, retention: Retention) -> Result<(Arc<dyn Log>, String, u64), String> {
    let log = DiskLog::open(path, retention).map_err(|e| {
        format!(
            "opening the log: {e} (`mcp-resume log check {}` says more)",
            path.display()
        )
    })?;
    let damaged = log.lost_ranges().len() as u64;
    Ok((Arc::new(log), format!("disk:{}", path.display()), damaged))
}

async fn signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// An error and its sources, on one line: `tls_config` names the file, its
/// source says what is wrong with it.
fn error_chain(e: impl std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

/// What serves the sessions of [`run_with`].
pub enum Sessions {
    /// The built-in demo tools (`serve`).
    Demo(DemoArgs),
    /// A gateway's backend: child processes or an upstream server.
    Gateway(Arc<dyn Backend>),
}

/// Runs the server with the demo tools until SIGTERM or Ctrl-C.
pub async fn run(cmd: ServeCmd) -> Result<ExitCode, String> {
    run_with(cmd.server, Sessions::Demo(cmd.demo)).await
}

/// Runs the server until SIGTERM or Ctrl-C, its sessions served as
/// `sessions` says.
pub async fn run_with(args: ServeArgs, sessions: Sessions) -> Result<ExitCode, String> {
    if !args.base_path.starts_with('/') || args.base_path.len() < 2 {
        return Err(format!(
            "--base-path {:?} must start with / and name a path",
            args.base_path
        ));
    }
    let mut retention = Retention::default();
    retention.max_events = args.retention_events.max(1);
    retention.max_age = Duration::from_secs(args.retention_secs);
    // Before the log opens: a wrong file fails fast, naming itself.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_config(cert, key).map_err(error_chain)?),
        _ => None,
    };
    let auth = match (&args.oauth_issuer, &args.bearer_token) {
        (Some(issuer), _) => {
            let jwks: JwksSource = args
                .oauth_jwks
                .clone()
                .unwrap_or_default()
                .parse()
                .map_err(|e: std::convert::Infallible| e.to_string())?;
            let mut oauth = OAuthConfig::new(
                issuer,
                args.oauth_audience.clone().unwrap_or_default(),
                jwks,
            );
            oauth.scope = args.oauth_scope.clone();
            AuthConfig::OAuth(oauth)
        }
        (None, Some(token)) => AuthConfig::Bearer(token.clone()),
        (None, None) => AuthConfig::None,
    };
    let auth = Authenticator::new(auth).await.map_err(|e| {
        let mut msg = format!("setting up authentication: {e}");
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        msg
    })?;
    // `serve` and `gateway` keep their default logs apart: one data
    // directory holds one server's log (its lock refuses a second).
    let default_dir = match &sessions {
        Sessions::Demo(_) => default_data_dir(),
        Sessions::Gateway(_) => default_data_dir().join("gateway"),
    };
    let (log, store, damaged) = open_log(&args, retention, &default_dir).await?;
    let mut config = ServerConfig::default();
    config.damaged_streams = damaged;
    config.base_path = args.base_path.clone();
    config.allowed_origins = args.allow_origins.clone();
    config.allow_loopback_origins = true;
    config.auth = auth.clone();
    config.max_body_bytes = args.max_body_bytes;
    config.session_ttl = Duration::from_secs(args.session_ttl_secs);
    config.park_after = Some(Duration::from_secs(args.park_after_secs));
    // Idle sessions end within about half a TTL past it, not up to 30 s
    // later when the TTL is short (the server shortens it for parking).
    config.maintenance_interval =
        (config.session_ttl / 2).clamp(Duration::from_secs(1), config.maintenance_interval);
    config.tombstone_ttl = Duration::from_secs(args.tombstone_ttl_secs);
    config.keepalive = Duration::from_secs(args.heartbeat_secs.max(1));
    config.upgrade_timeout = Duration::from_millis(args.upgrade_timeout_ms);
    config.reply_deadline = Duration::from_secs(args.reply_deadline_secs);
    config.websocket = !args.no_websocket;
    config.max_sessions = args.max_sessions;
    config.max_request_streams = args.max_request_streams;
    config.metrics_on_main = args.metrics_listen.is_none();
    config.tls = tls;
    config.conn_limits.header_read_timeout =
        Duration::from_secs(args.header_read_timeout_secs.max(1));
    config.conn_limits.keep_alive_idle = Duration::from_secs(args.keep_alive_secs.max(1));
    config.conn_limits.shutdown_grace = Duration::from_secs(args.shutdown_grace_secs);
    config.conn_limits.drain_accept =
        Duration::from_secs(args.drain_accept_secs.min(args.shutdown_grace_secs));
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    if let Sessions::Demo(demo) = &sessions {
        config.max_session_tools = demo.max_session_tools;
        config.max_background_per_session = demo.max_background_per_session.max(1);
        config.unsafe_legacy_upgrade = demo.unsafe_legacy_upgrade;
    }
    if config.unsafe_legacy_upgrade {
        tracing::warn!("UNSAFE LEGACY UPGRADE MODE: WebSocket upgrades carry no cursor echo, no replay and no gate; events committed during the handshake WILL BE LOST SILENTLY. For demonstrations only.");
        eprintln!("WARNING: --unsafe-legacy-upgrade is on: WebSocket upgrades can silently lose events. Never use this in production.");
    }
    if !args.listen.ip().is_loopback() && !auth.is_enabled() {
        tracing::warn!(listen = %args.listen, "listening beyond loopback without --bearer-token or --oauth-issuer");
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let (server, serving) = match sessions {
        Sessions::Gateway(b) => (McpServer::with_backend(log, b, config), "gateway"),
        Sessions::Demo(_) => (McpServer::new(log, demo_tools(), config), "demo tools"),
    };
    if let Some(ops) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(ops)
            .await
            .map_err(|e| format!("cannot listen on {ops} (--metrics-listen): {e}"))?;
        let app = server.ops_router();
        tracing::info!(addr = %ops, "metrics on /metrics, probes on /healthz and /readyz");
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "the metrics listener stopped");
            }
        });
    }
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {scheme}://{addr}{}", args.base_path);
        let _ = out.flush();
    }
    tracing::info!(%addr, store, serving, "serving MCP");
    server
        .serve(listener, signal())
        .await
        .map_err(|e| format!("server error: {e}"))?;
    tracing::info!("stopped cleanly");
    Ok(ExitCode::SUCCESS)
}
