//! What this crate's examples share: logging to stderr, the log a
//! `--store` argument names (as `mcp-resume serve` opens it), and the
//! listener whose `listening on URL` line the tests and scripts wait for.

use std::path::PathBuf;
use std::sync::Arc;

use mcp_resume_log::{DiskLog, Log, MemoryLog, RedisLog, Retention};

/// Where an example listens and keeps its sessions (flattened into its
/// arguments).
#[derive(clap::Args)]
pub struct Serving {
    /// Address to listen on (port 0 picks a free one; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: std::net::SocketAddr,
    /// Where sessions live: memory, disk:DIR or redis://HOST:PORT/DB.
    #[arg(long, default_value = "memory")]
    pub store: String,
    /// Replicas that must acknowledge each Redis append (WAIT).
    #[arg(long, default_value_t = 0)]
    pub redis_replicas: usize,
    /// Most events kept per stream, as `mcp-resume serve --retention-events`:
    /// older ones are trimmed, and a reader that falls further behind has
    /// its stream ended.
    #[arg(long, default_value_t = 10_000)]
    pub retention_events: u64,
}

impl Serving {
    /// The log `--store` names.
    pub async fn open_log(&self) -> Result<Arc<dyn Log>, String> {
        let mut retention = Retention::default();
        retention.max_events = self.retention_events.max(1);
        open_log(&self.store, self.redis_replicas, retention).await
    }

    /// Binds `--listen` and prints `listening on http://ADDR/mcp`.
    pub async fn listen(&self) -> Result<tokio::net::TcpListener, String> {
        listen(self.listen).await
    }
}

/// `memory`, `disk:DIR` or `redis://HOST:PORT/DB`, with `replicas` Redis
/// replicas acknowledging each append.
pub async fn open_log(
    store: &str,
    replicas: usize,
    retention: Retention,
) -> Result<Arc<dyn Log>, String> {
    if store == "memory" {
        return Ok(Arc::new(MemoryLog::new(retention)));
    }
    if store.starts_with("redis://") {
        let log = RedisLog::connect(store, retention, replicas)
            .await
            .map_err(|e| format!("connecting to {store}: {e}"))?;
        return Ok(Arc::new(log));
    }
    match store.strip_prefix("disk:") {
        Some(p) if !p.is_empty() => DiskLog::open(PathBuf::from(p), retention)
            .map(|l| Arc::new(l) as Arc<dyn Log>)
            .map_err(|e| format!("opening the log at {p}: {e}")),
        _ => Err(format!(
            "--store {store:?}: expected memory, disk:DIR or redis://HOST:PORT/DB"
        )),
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (default `warn`).
pub fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Binds `addr` and prints `listening on http://ADDR/mcp`.
pub async fn listen(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("binding {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{bound}/mcp");
    Ok(listener)
}

/// Completes on Ctrl-C or SIGTERM (a deploy's stop): the server then stops
/// gracefully (`McpServer::serve`).
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The process's exit after `run`, printing a failure as `NAME: error`.
pub fn exit(name: &str, run: Result<(), String>) -> std::process::ExitCode {
    match run {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
