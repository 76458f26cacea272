//! A child process speaking MCP over stdio (newline-delimited JSON-RPC) as
//! a session's backend: any existing MCP server, in any language, behind the
//! durable transport (`mcp-resume gateway -- CMD ARGS`).
//!
//! Each session gets its own child. What the child writes to stdout is
//! committed to the session's log; the client's messages are written to its
//! stdin; its stderr goes to the server's log, one line per event, with the
//! session id. A session restored after a restart (or on another instance)
//! starts a new child and initializes it with the client's stored
//! `initialize` params; the child's answer to that is not sent to anyone. A
//! child that exits by itself ends its session: calls in flight get a
//! JSON-RPC error, then the session answers 404. A child nobody initializes
//! within the init grace (30 s by default: a stateless request that needs
//! no session, a client that went away) is stopped and its session ended,
//! so such children cannot pile up to `--max-children`.
//!
//! A stateless-era request (2026-07-28, no session) is answered by a small
//! pool of children initialized with the capabilities it declares
//! (`stdio/pool.rs`).

mod lines;
mod pool;
mod stdin;

pub use pool::PoolLimits;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::verbatim::Text;
use super::{Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox, StatelessHttp};

/// The JSON-RPC id of the `initialize` a restore sends the new child.
const RESTORE_ID: &str = "mcp-resume-restore";

/// Starts one child process per session.
#[derive(Clone)]
pub struct StdioBackend {
    launch: Arc<Launch>,
    program: String,
    max_children: usize,
    children: Arc<AtomicUsize>,
    init_grace: Duration,
    /// The stateless era's children, made on first use.
    pool: Arc<OnceLock<Arc<pool::Pool>>>,
    pool_limits: PoolLimits,
}

impl std::fmt::Debug for StdioBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioBackend")
            .field("program", &self.program)
            .field("max_children", &self.max_children)
            .finish_non_exhaustive()
    }
}

/// How a child is started: `program args` with only `PATH`, `HOME` and `env`.
#[derive(Debug)]
struct Launch {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl StdioBackend {
    /// Children run `program args` with an environment of only `PATH`,
    /// `HOME` and `env` (name, value pairs), at most `max_children` at once.
    pub fn new(
        program: impl Into<String>,
        args: Vec<String>,
        env: Vec<(String, String)>,
        max_children: usize,
    ) -> Self {
        let program = program.into();
        Self {
            launch: Arc::new(Launch {
                program: program.clone(),
                args,
                env,
            }),
            program,
            max_children,
            children: Arc::default(),
            init_grace: Duration::from_secs(30),
            pool: Arc::default(),
            pool_limits: PoolLimits::default(),
        }
    }

    /// The bounds of the pool that answers stateless requests
    /// ([`PoolLimits::default`] unless set).
    pub fn with_pool_limits(mut self, limits: PoolLimits) -> Self {
        self.pool_limits = limits;
        self
    }

    /// How long a new session's child may wait for the client's
    /// `initialize` before it is stopped and its session ended (30 s).
    pub fn with_init_grace(mut self, grace: Duration) -> Self {
        self.init_grace = grace;
        self
    }
}

impl Launch {
    fn spawn(&self) -> Result<Child, BackendError> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        for name in ["PATH", "HOME"] {
            if let Ok(v) = std::env::var(name) {
                cmd.env(name, v);
            }
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd.spawn()
            .map_err(|e| BackendError::Failed(format!("cannot start {}: {e}", self.program)))
    }
}

impl Backend for StdioBackend {
    fn open(
        &self,
        session: &str,
        outbox: Outbox,
        restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        // Idle children of the stateless pool give way to a session's.
        let slot = Slot::take(&self.children, self.max_children).or_else(|| {
            let freed = self.pool.get().is_some_and(|p| p.evict_idle());
            freed
                .then(|| Slot::take(&self.children, self.max_children))
                .flatten()
        });
        let Some(slot) = slot else {
            return Err(BackendError::Busy(format!(
                "the gateway runs its maximum of {} child processes; retry later",
                self.max_children
            )));
        };
        // Boxed: the task that reads the child keeps it all its life and
        // touches it only at the end.
        let mut child = Box::new(self.launch.spawn()?);
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let (Some(stdin), Some(stdout), Some(stderr)) = (stdin, stdout, stderr) else {
            return Err(BackendError::Failed("the child has no stdio".into()));
        };
        let (mut out_lines, mut err_lines) = output(stdout, stderr)?;
        // Written from the task that delivers each message; a task of its
        // own only for a backlog the pipe does not take at once.
        let stdin = stdin
            .into_owned_fd()
            .and_then(stdin::Stdin::new)
            .map_err(|e| BackendError::Failed(format!("cannot write the child's input: {e}")))?;
        let initialized = Arc::new(AtomicBool::new(restore.is_some()));
        if let Some(params) = restore {
            // Re-initialize the new child as the client once did; its answer
            // (id RESTORE_ID) has no call waiting and is dropped.
            let init = json!({"jsonrpc": "2.0", "id": RESTORE_ID, "method": "initialize", "params": params});
            let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let _ = write(&stdin, &init).and_then(|()| write(&stdin, &initialized));
        }
        let id = session.to_owned();
        let program = self.program.clone();
        // Cancelled to stop the child.
        let kill = CancellationToken::new();
        // The init grace runs in the task that reads the child (a timer task
        // of its own cost every session its memory for 30 s), and goes as
        // soon as the child is initialized.
        let grace_for = self.init_grace;
        let mut grace =
            (!initialized.load(Ordering::Acquire)).then(|| Box::pin(tokio::time::sleep(grace_for)));
        let initialized_seen = initialized.clone();
        let stop = kill.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut killed = false;
            // Its stderr is read in the same task: one task fewer for every
            // session's child.
            let mut stderr_open = true;
            loop {
                if grace.is_some() && initialized_seen.load(Ordering::Acquire) {
                    grace = None;
                }
                tokio::select! {
                    _ = async { if let Some(g) = grace.as_mut() { g.await } }, if grace.is_some() => {
                        grace = None;
                        if !initialized_seen.load(Ordering::Acquire) {
                            tracing::warn!(session = %id, "the child was not initialized within {grace_for:?}; it is stopped");
                            outbox.end_session(format!("no initialize within {grace_for:?}"));
                            killed = true;
                            break;
                        }
                    },
                    line = err_lines.next_line(), if stderr_open => match line {
                        Ok(Some(line)) => tracing::info!(session = %id, "child: {line}"),
                        // A line that is not text is passed over: stopping
                        // here would leave the child blocked on a full pipe.
                        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                            tracing::info!(session = %id, "child: (a line that is not UTF-8)")
                        }
                        _ => stderr_open = false,
                    },
                    line = out_lines.next_line() => match line {
                        Ok(Some(line)) if line.trim().is_empty() => {}
                        // Sent in order; awaiting each keeps a fast child
                        // from queueing without bound. Boxed (an allocation a
                        // message): inline, its state (150 bytes) would size
                        // the task every idle session's child keeps.
                        Ok(Some(line)) => match Text::read(line) {
                            Ok(Text::Answer(call, text)) => {
                                let _ = Box::pin(outbox.send_answer(call, text)).await;
                            }
                            Ok(Text::Message(message)) => {
                                let _ = Box::pin(outbox.send(Outbound { message, related: None })).await;
                            }
                            Err(e) => tracing::warn!(session = %id, error = %e, "the child wrote a line that is not JSON; ignored"),
                        },
                        _ => break,
                    },
                    _ = stop.cancelled() => {
                        killed = true;
                        break;
                    }
                }
            }
            // Boxed: the task waits in the loop above nearly all its life,
            // and would otherwise be sized by the timers of its ending.
            Box::pin(async move {
                if killed {
                    let _ = child.start_kill();
                } else {
                    // What a child that exits says last (a panic, a stack
                    // trace) is logged too, for as long as it takes to write.
                    let rest = async {
                        while stderr_open {
                            match err_lines.next_line().await {
                                Ok(Some(line)) => tracing::info!(session = %id, "child: {line}"),
                                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                                _ => stderr_open = false,
                            }
                        }
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(1), rest).await;
                    let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                    let why = match status {
                        Ok(Ok(s)) => format!("{program} exited ({s})"),
                        _ => format!("{program} closed its stdout"),
                    };
                    let _ = child.start_kill();
                    outbox.end_session(why);
                }
                let _ = child.wait().await;
            })
            .await;
        });
        Ok(Box::new(StdioSession {
            stdin,
            kill,
            initialized,
        }))
    }

    fn park_after(&self) -> Option<Duration> {
        None
    }

    fn exclusive(&self) -> bool {
        true
    }

    /// Stateless requests go to the pool of children (`stdio/pool.rs`), which
    /// shares `--max-children` with the sessions' children.
    fn stateless(&self) -> Option<&dyn StatelessHttp> {
        let pool = self.pool.get_or_init(|| {
            pool::Pool::start(
                self.launch.clone(),
                self.children.clone(),
                self.max_children,
                self.init_grace,
                self.pool_limits,
            )
        });
        Some(pool)
    }
}

/// A child's stdout and stderr, read line by line ([`lines`]).
fn output(
    stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
) -> Result<(lines::Lines, lines::Lines), BackendError> {
    let read = |fd: std::io::Result<std::os::fd::OwnedFd>| {
        fd.and_then(lines::Lines::new)
            .map_err(|e| BackendError::Failed(format!("cannot read the child's output: {e}")))
    };
    Ok((read(stdout.into_owned_fd())?, read(stderr.into_owned_fd())?))
}

/// Counts a running child until dropped.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place among `max` children counted by `counter`, if one is free.
    fn take(counter: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        if counter.fetch_add(1, Ordering::AcqRel) >= max {
            counter.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(counter.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Writes `message` to the child as one line.
fn write(stdin: &stdin::Stdin, message: &Value) -> Result<(), stdin::Broken> {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    stdin.send(&line)
}

/// One session's child, as the transport sees it.
struct StdioSession {
    stdin: stdin::Stdin,
    kill: CancellationToken,
    /// The client's `initialize` (or a restore's) reached the child.
    initialized: Arc<AtomicBool>,
}

impl BackendSession for StdioSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        if message.get("method").and_then(Value::as_str) == Some("initialize") {
            self.initialized.store(true, Ordering::Release);
        }
        write(&self.stdin, &message).map_err(|_| DeliverError::Closed)
    }

    fn close(&self) {
        self.kill.cancel();
    }
}

impl Drop for StdioSession {
    fn drop(&mut self) {
        self.kill.cancel();
    }
}
