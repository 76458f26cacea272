//! `mcp-resume serve`.

mod args;

use args::default_data_dir;
pub use args::{DemoArgs, ServeArgs, ServeCmd};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};
use mcp_resume_server::auth::{AuthConfig, Authenticator, JwksSource, OAuthConfig};
use mcp_resume_server::backend::Backend;
use mcp_resume_server::{demo::demo_tools, tls_config, McpServer, ServerConfig};

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
            if args.redis_seq_ids && (args.redis_replicas > 0 || s.starts_with("redis-cluster://"))
            {
                let why = if s.starts_with("redis-cluster://") {
                    "a cluster rings its followers after the commit".to_owned()
                } else {
                    format!(
                        "{} replicas acknowledge it after the script",
                        args.redis_replicas
                    )
                };
                return Err(format!(
                    "--redis-seq-ids needs one Redis server without --redis-replicas (its commit is the append script): on {s}, {why}"
                ));
            }
            let log = RedisLog::connect(s, retention, args.redis_replicas)
                .await
                .map_err(|e| format!("connecting to {s}: {e}"))?;
            log.set_safety_read_max(Duration::from_secs(args.redis_safety_read_secs));
            log.set_seq_ids(args.redis_seq_ids);
            // A session's use reaches Redis at most this late: an eighth of
            // its TTL, so idle expiry never ends a session in use.
            log.set_touch_interval(touch_interval(args.session_ttl_secs));
            log.set_walk_interval(walk_interval(args.session_ttl_secs, args.retention_secs));
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
/// How long a touch is answered from memory on Redis (`RedisLog::
/// set_touch_interval`): an eighth of the session TTL, between 1 s and 60 s.
fn touch_interval(session_ttl_secs: u64) -> Duration {
    Duration::from_secs((session_ttl_secs / 8).clamp(1, 60))
}

/// How long maintenance on Redis waits between two walks over its
/// sessions' state (`RedisLog::set_walk_interval`): a sixteenth of the
/// session TTL or of the age limit, whichever is shorter, at most 120 s
/// (an idle session ends, an old event goes, at most that much late).
fn walk_interval(session_ttl_secs: u64, retention_secs: u64) -> Duration {
    let horizon = session_ttl_secs.min(retention_secs);
    Duration::from_millis(horizon.saturating_mul(1000) / 16).min(Duration::from_secs(120))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_are_a_sixteenth_of_the_shorter_horizon_at_most_two_minutes() {
        // The defaults: a 30 min TTL, a 1 h age limit.
        assert_eq!(walk_interval(1800, 3600), Duration::from_millis(112_500));
        assert_eq!(walk_interval(2, 3600), Duration::from_millis(125));
        assert_eq!(walk_interval(86_400, 3600), Duration::from_secs(120));
        assert_eq!(walk_interval(1800, 0), Duration::ZERO, "events go at once");
    }
}
