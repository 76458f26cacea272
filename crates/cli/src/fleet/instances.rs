//! The fleet's instances: processes of one kind (`serve`, `gateway -- CMD`,
//! or an rmcp handler hosted on the transport) on fixed loopback ports, so
//! that a restarted instance takes its slot in the balancer again. Stopped
//! gracefully (SIGTERM: the instance drains, then exits) or killed (`kill
//! -9`), frozen and thawed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What each instance runs.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// `mcp-resume serve`: the built-in demo tools.
    Serve,
    /// `mcp-resume gateway -- CMD`: a stdio server behind the transport.
    Gateway(Vec<String>),
    /// `BIN --transport mcp-resume`: an rmcp handler hosted on the
    /// transport (mcp-resume-rmcp's `rmcp_durable` example, or one with its
    /// flags).
    Hosted(PathBuf),
}

impl Kind {
    /// A short name for reports.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Kind::Serve => "serve",
            Kind::Gateway(_) => "gateway",
            Kind::Hosted(_) => "hosted",
        }
    }
}

/// How every instance is started.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The `mcp-resume` executable (for serve and gateway).
    pub(crate) exe: PathBuf,
    pub(crate) kind: Kind,
    /// `--store`.
    pub(crate) store: String,
    /// `--shutdown-grace-secs` (serve and gateway).
    pub(crate) grace_secs: u64,
    /// `--drain-accept-secs` (serve and gateway): how long a stopping
    /// instance still accepts, at least the balancer's check interval.
    pub(crate) drain_accept_secs: u64,
}

/// Starts one instance on `port`, its files in `dir`; returns once it
/// printed `listening on`.
pub(crate) fn start(launch: &Launch, port: u16, dir: &Path) -> Result<Child, String> {
    let addr = format!("127.0.0.1:{port}");
    let mut cmd = match &launch.kind {
        Kind::Serve | Kind::Gateway(_) => {
            let sub = if matches!(launch.kind, Kind::Serve) {
                "serve"
            } else {
                "gateway"
            };
            let mut cmd = Command::new(&launch.exe);
            cmd.args([sub, "--listen", &addr, "--store", &launch.store])
                .arg("--data-dir")
                .arg(dir)
                .args([
                    "--shutdown-grace-secs",
                    &launch.grace_secs.to_string(),
                    "--drain-accept-secs",
                    &launch.drain_accept_secs.to_string(),
                ]);
            if let Kind::Gateway(command) = &launch.kind {
                cmd.arg("--").args(command);
            }
            cmd
        }
        Kind::Hosted(bin) => {
            let mut cmd = Command::new(bin);
            cmd.args([
                "--listen",
                &addr,
                "--store",
                &launch.store,
                "--transport",
                "mcp-resume",
            ]);
            cmd
        }
    };
    // Appended to: an instance started again on its slot's port keeps what
    // the one before it (killed, say) wrote.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("instance-{port}.log")))
        .map_err(|e| format!("creating an instance's log: {e}"))?;
    let mut child = cmd
        .env(
            "RUST_LOG",
            std::env::var("MCPR_FLEET_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting a {} instance: {e}", launch.kind.name()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let read = BufReader::new(stdout).read_line(&mut line);
    if read.is_err() || !line.starts_with("listening on ") {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "a {} instance did not start on {addr} (its log: {})",
            launch.kind.name(),
            dir.join(format!("instance-{port}.log")).display()
        ));
    }
    Ok(child)
}

/// Sends `signal` to `child`.
pub(crate) fn signal(child: &Child, signal: libc::c_int) -> Result<(), String> {
    // SAFETY: kill(2) on our own child's pid with a valid signal number
    // reads and writes no memory of ours.
    match unsafe { libc::kill(child.id() as libc::pid_t, signal) } {
        0 => Ok(()),
        _ => Err(format!(
            "signal {signal} to pid {}: {}",
            child.id(),
            std::io::Error::last_os_error()
        )),
    }
}

/// SIGTERM, then waits for the exit at most `within` (a `kill -9` after
/// that); how long the graceful stop took, and whether it exited by itself.
pub(crate) async fn stop(child: &mut Child, within: Duration) -> (Duration, bool) {
    let began = Instant::now();
    if signal(child, libc::SIGTERM).is_err() {
        let _ = child.wait();
        return (began.elapsed(), true);
    }
    while began.elapsed() < within {
        if let Ok(Some(_)) = child.try_wait() {
            return (began.elapsed(), true);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    (began.elapsed(), false)
}

/// A free loopback port now.
pub(crate) fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}
