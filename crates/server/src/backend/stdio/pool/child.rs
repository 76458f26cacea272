//! One pooled child: its stdio, its `initialize`, and its calls in flight
//! (renumbered, so the requests of many clients share it) with their
//! progress. At most `--pool-calls-per-child` calls run on it at once and
//! `--pool-stdin-queue` messages wait for its stdin: past either a request
//! is refused ([`Refused`]), never queued without bound.
//!
//! A call ends exactly once: with the child's response, or with
//! `child-exited` when the child is gone (exited, stopped, or its stdin
//! broke: a child that cannot be written to is stopped), whenever the call
//! started; a call never waits on a child that will not answer it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};

use super::error;
use super::limits::{PoolLimits, Refused};
use crate::backend::stdio::{Launch, Slot};
use crate::backend::BackendError;

mod call;
pub(super) use call::Call;

/// The session revision a pooled child is initialized with.
const CHILD_VERSION: &str = "2025-11-25";
/// Methods whose 2026-07-28 results say how long they stay fresh
/// (`ttlMs`, `cacheScope`), which a session-era child does not.
const CACHEABLE: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];
/// Progress notifications queued per call for a client that reads slower
/// than the child sends; beyond, they are dropped (with a warning), never
/// the response.
const PROGRESS_QUEUE: usize = 256;

/// What `initialize` gave: its result, or why there is none.
type Init = Option<Result<Value, String>>;

/// Which requests share a child: those of one principal (with credentials
/// configured; else anyone's) that declare the same capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Key {
    /// Who made the requests, as authenticated (`None`: no credentials).
    pub(super) principal: Option<String>,
    /// The canonical JSON of the capabilities it was initialized with.
    pub(super) caps: String,
}

/// What [`Pooled::launch`] takes to run the child.
struct Pending {
    stdin: mpsc::Receiver<Value>,
    killed: mpsc::Receiver<()>,
    init: watch::Sender<Init>,
}

/// One pooled child.
pub(super) struct Pooled {
    pub(super) key: Key,
    /// Bounded (`--pool-stdin-queue`): a child that does not read its input
    /// refuses requests instead of queueing them without bound.
    stdin: mpsc::Sender<Value>,
    stdin_queue: usize,
    /// Most calls in flight (`--pool-calls-per-child`).
    max_calls: usize,
    /// Until [`Pooled::launch`] runs the child.
    pending: Mutex<Option<Pending>>,
    /// Calls in flight; `None` once the child is gone.
    calls: Mutex<Option<HashMap<u64, Waiter>>>,
    next: AtomicU64,
    init: watch::Receiver<Init>,
    last_used: Mutex<Instant>,
    /// Requests given this child that have not started their call yet: a
    /// child handed out is not idle, so it is never stopped under them.
    handed: AtomicUsize,
    kill: mpsc::Sender<()>,
    /// Its place among `--max-children`: released when it exits, or taken
    /// over by the child started in its place.
    slot: Mutex<Option<Slot>>,
}

/// Where the child's messages for one call go.
struct Waiter {
    progress: mpsc::Sender<Value>,
    response: oneshot::Sender<Value>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pooled {
    /// A child for `key` in `slot`, not yet running: cheap, so the pool
    /// makes it under its lock and [`Pooled::launch`]es it after.
    pub(super) fn new(key: Key, slot: Slot, limits: &PoolLimits) -> Arc<Pooled> {
        let stdin_queue = limits.stdin_queue.max(1);
        let (tx, rx) = mpsc::channel::<Value>(stdin_queue);
        let (kill, killed) = mpsc::channel::<()>(1);
        let (init_tx, init) = watch::channel(None);
        Arc::new(Pooled {
            key,
            stdin: tx,
            stdin_queue,
            max_calls: limits.calls_per_child.max(1),
            pending: Mutex::new(Some(Pending {
                stdin: rx,
                killed,
                init: init_tx,
            })),
            calls: Mutex::new(Some(HashMap::new())),
            next: AtomicU64::new(1),
            init,
            last_used: Mutex::new(Instant::now()),
            handed: AtomicUsize::new(0),
            kill,
            slot: Mutex::new(Some(slot)),
        })
    }

    /// Starts the child (`launch`: a fork, outside the pool's lock) and
    /// initializes it (in a task of its own: a request that goes away does
    /// not cancel it) with `caps` and `info`, given `init_wait` to answer.
    /// A child that cannot start is gone at once (its place freed).
    pub(super) fn launch(
        self: &Arc<Self>,
        launch: &Launch,
        caps: Value,
        info: Value,
        init_wait: Duration,
    ) -> Result<(), BackendError> {
        let Some(pending) = lock(&self.pending).take() else {
            return Ok(());
        };
        match self.run(launch, pending.stdin, pending.killed) {
            Ok(()) => {
                let init_tx = pending.init;
                let init = self.clone();
                tokio::spawn(async move {
                    let r = init.initialize(&caps, &info, init_wait).await;
                    if r.is_err() {
                        init.stop();
                    }
                    let _ = init_tx.send(Some(r));
                });
                Ok(())
            }
            Err(e) => {
                drop(lock(&self.calls).take());
                drop(lock(&self.slot).take());
                let _ = pending.init.send(Some(Err(e.to_string())));
                Err(e)
            }
        }
    }

    /// Spawns the process and the tasks that write its stdin and read its
    /// output.
    fn run(
        self: &Arc<Self>,
        launch: &Launch,
        mut rx: mpsc::Receiver<Value>,
        mut killed: mpsc::Receiver<()>,
    ) -> Result<(), BackendError> {
        let mut process = launch.spawn()?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(BackendError::Failed("the child has no stdio".into()));
        };
        let (mut out_lines, mut err_lines) = crate::backend::stdio::output(stdout, stderr)?;
        let kill = self.kill.clone();
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let mut line = serde_json::to_vec(&m).unwrap_or_default();
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    tracing::warn!("a stateless child's stdin broke; it is stopped");
                    let _ = kill.try_send(());
                    break;
                }
            }
        });
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                tracing::info!("stateless child: {line}");
            }
        });
        let reader = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    line = out_lines.next_line() => match line {
                        Ok(Some(line)) => reader.read(&line),
                        _ => break,
                    },
                    _ = killed.recv() => break,
                }
            }
            // Every call in flight, and any started from now on, ends with
            // child-exited.
            drop(lock(&reader.calls).take());
            drop(lock(&reader.slot).take());
            let _ = process.start_kill();
            let _ = process.wait().await;
        });
        Ok(())
    }

    /// The child's `initialize` result, once it answered.
    pub(super) async fn ready(&self) -> Result<Value, String> {
        let mut init = self.init.clone();
        let seen = match init.wait_for(Option::is_some).await {
            Ok(r) => r.clone(),
            Err(_) => None,
        };
        seen.unwrap_or_else(|| Err("the child exited before it was initialized".into()))
    }

    /// Whether the child is gone (its calls end with child-exited).
    pub(super) fn gone(&self) -> bool {
        lock(&self.calls).is_none()
    }

    /// Whether nothing uses the child: no call in flight, none about to start.
    pub(super) fn idle(&self) -> bool {
        self.handed.load(Ordering::Acquire) == 0
            && lock(&self.calls).as_ref().is_none_or(HashMap::is_empty)
    }

    pub(super) fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    /// Stops the child; its calls end with child-exited.
    pub(super) fn stop(&self) {
        let _ = self.kill.try_send(());
    }

    /// Stops the child and hands its place among `--max-children` to the
    /// caller (`None` if it had already given it back).
    pub(super) fn evict(&self) -> Option<Slot> {
        self.stop();
        lock(&self.slot).take()
    }

    /// The child for one request: not idle until the returned [`Handed`]
    /// is dropped (after its call started).
    pub(super) fn hand(self: &Arc<Self>) -> Handed {
        self.handed.fetch_add(1, Ordering::AcqRel);
        *lock(&self.last_used) = Instant::now();
        Handed(self.clone())
    }

    /// Initializes the child as a 2025-11-25 session with `caps` and `info`.
    async fn initialize(
        self: &Arc<Self>,
        caps: &Value,
        info: &Value,
        wait: Duration,
    ) -> Result<Value, String> {
        let mut call = self
            .start(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": CHILD_VERSION, "capabilities": caps, "clientInfo": info}}))
            .map_err(|r| r.to_string())?;
        // MCP forbids cancelling initialize.
        call.cancel_on_drop = false;
        let reply = match tokio::time::timeout(wait, call.answer(&Value::Null)).await {
            Ok(r) => r,
            Err(_) => {
                return Err(format!(
                    "the child did not answer initialize within {wait:?}"
                ))
            }
        };
        let Some(result) = reply.get("result") else {
            return Err(format!("the child refused initialize: {}", reply["error"]));
        };
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Ok(result.clone())
    }

    /// Queues a message of the transport's own (an answer to the child, a
    /// cancel) for the child's stdin; dropped, with a warning, when the
    /// child has not read what waits there already.
    fn send(&self, message: Value) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.stdin.try_send(message) {
            tracing::warn!(
                "a stateless child is not reading its input; a message to it was dropped"
            );
        }
    }

    /// Sends request `message` under an id of the child's (its
    /// `progressToken` too, if it has one), for [`Call`] to read its
    /// progress and response. On a child that is gone the call ends at once;
    /// one that runs its most calls, or whose stdin is backed up, refuses it.
    fn start(self: &Arc<Self>, mut message: Value) -> Result<Call, Refused> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (progress_tx, progress) = mpsc::channel(PROGRESS_QUEUE);
        let (response_tx, response) = oneshot::channel();
        let mut token = None;
        if let Some(m) = message
            .pointer_mut("/params/_meta")
            .and_then(Value::as_object_mut)
        {
            m.retain(|k, _| !k.starts_with("io.modelcontextprotocol/"));
            token = m.remove("progressToken");
            if token.is_some() {
                m.insert("progressToken".into(), json!(n));
            }
        }
        message["id"] = json!(n);
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        if let Some(calls) = lock(&self.calls).as_mut() {
            if calls.len() >= self.max_calls {
                return Err(Refused::Calls(self.max_calls));
            }
            match self.stdin.try_send(message) {
                Ok(()) => {
                    calls.insert(
                        n,
                        Waiter {
                            progress: progress_tx,
                            response: response_tx,
                        },
                    );
                }
                Err(mpsc::error::TrySendError::Full(_)) => {
                    return Err(Refused::Stdin(self.stdin_queue));
                }
                // The writer is gone with the child: the call ends at once.
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        Ok(Call {
            child: self.clone(),
            method,
            n,
            token,
            progress: Some(progress),
            response,
            done: false,
            cancel_on_drop: true,
        })
    }

    /// One line of the child's stdout.
    fn read(&self, line: &str) {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            if !line.trim().is_empty() {
                tracing::warn!("a stateless child wrote a line that is not JSON; ignored");
            }
            return;
        };
        let method = message.get("method").and_then(Value::as_str);
        let mut calls = lock(&self.calls);
        let Some(calls) = calls.as_mut() else { return };
        match (method, message.get("id")) {
            (Some("ping"), Some(id)) => {
                self.send(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            (Some(m), Some(id)) => {
                let why = format!("{m} cannot reach a stateless (2026-07-28) client through the gateway; use a session");
                self.send(error(id, -32601, why, None));
            }
            (Some("notifications/progress"), None) => {
                let token = message
                    .pointer("/params/progressToken")
                    .and_then(Value::as_u64);
                if let Some(w) = token.and_then(|n| calls.get(&n)) {
                    if w.progress.try_send(message).is_err() {
                        tracing::warn!("a stateless call's client reads its progress too slowly; a progress notification was dropped");
                    }
                }
            }
            (Some(m), None) => {
                tracing::debug!(
                    method = m,
                    "a stateless child's notification has no stateless client to go to; dropped"
                );
            }
            (None, Some(id)) => {
                if let Some(w) = id.as_u64().and_then(|n| calls.remove(&n)) {
                    let _ = w.response.send(message);
                }
            }
            (None, None) => {}
        }
    }
}

/// A child given to one request (see [`Pooled::hand`]).
pub(super) struct Handed(Arc<Pooled>);

impl Handed {
    /// Runs the child made for this request ([`Pooled::launch`]).
    pub(super) fn launch(
        &self,
        launch: &Launch,
        caps: Value,
        info: Value,
        init_wait: Duration,
    ) -> Result<(), BackendError> {
        self.0.launch(launch, caps, info, init_wait)
    }

    /// Starts the request's call on the child, unless it is at a limit.
    pub(super) fn start(&self, message: Value) -> Result<Call, Refused> {
        self.0.start(message)
    }
}

impl std::ops::Deref for Handed {
    type Target = Pooled;
    fn deref(&self) -> &Pooled {
        &self.0
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        self.0.handed.fetch_sub(1, Ordering::AcqRel);
    }
}
