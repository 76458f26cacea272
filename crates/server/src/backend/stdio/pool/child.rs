//! One pooled child: its stdio, its calls in flight (renumbered, so the
//! requests of many clients share it) and their progress.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, OnceCell};

use super::error;
use crate::backend::stdio::{Launch, Slot};
use crate::backend::BackendError;

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

/// One pooled child.
pub(super) struct Pooled {
    /// The canonical JSON of the capabilities it was initialized with.
    pub(super) key: String,
    stdin: mpsc::UnboundedSender<Value>,
    calls: Mutex<Calls>,
    next: AtomicU64,
    /// Its `initialize` result, or why it has none.
    pub(super) init: OnceCell<Result<Value, String>>,
    pub(super) last_used: Mutex<Instant>,
    pub(super) kill: mpsc::Sender<()>,
    /// Set once its stdout closed.
    pub(super) gone: std::sync::atomic::AtomicBool,
}

/// Calls in flight on one child, by the id the child knows them by (also
/// their `progressToken` on the child: clients' own tokens may collide).
#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, mpsc::UnboundedSender<Value>>,
}

impl Pooled {
    /// Starts a child for capabilities `key`, counted in `slots` (at most
    /// `max_children`); it is initialized by its first user.
    pub(super) fn spawn(
        launch: &Launch,
        slots: &Arc<AtomicUsize>,
        max_children: usize,
        key: String,
    ) -> Result<Arc<Pooled>, BackendError> {
        if slots.fetch_add(1, Ordering::AcqRel) >= max_children {
            slots.fetch_sub(1, Ordering::AcqRel);
            return Err(BackendError::Busy(format!(
                "the gateway runs its maximum of {} child processes; retry later",
                max_children
            )));
        }
        let slot = Slot(slots.clone());
        let mut process = launch.spawn()?;
        let (Some(mut stdin), Some(stdout), Some(stderr)) = (
            process.stdin.take(),
            process.stdout.take(),
            process.stderr.take(),
        ) else {
            return Err(BackendError::Failed("the child has no stdio".into()));
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let (kill, mut killed) = mpsc::channel::<()>(1);
        let child = Arc::new(Pooled {
            key,
            stdin: tx,
            calls: Mutex::default(),
            next: AtomicU64::new(1),
            init: OnceCell::new(),
            last_used: Mutex::new(Instant::now()),
            kill,
            gone: Default::default(),
        });
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let mut line = serde_json::to_vec(&m).unwrap_or_default();
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!("stateless child: {line}");
            }
        });
        let reader = child.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut lines = BufReader::new(stdout).lines();
            loop {
                tokio::select! {
                    line = lines.next_line() => match line {
                        Ok(Some(line)) => reader.read(&line),
                        _ => break,
                    },
                    _ = killed.recv() => break,
                }
            }
            reader.gone.store(true, Ordering::Release);
            // Every call in flight sees its channel close: child-exited.
            drop(std::mem::take(
                &mut *reader.calls.lock().unwrap_or_else(|e| e.into_inner()),
            ));
            let _ = process.start_kill();
            let _ = process.wait().await;
        });
        Ok(child)
    }

    pub(super) fn idle(&self) -> bool {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .is_empty()
    }

    pub(super) fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// Initializes the child as a 2025-11-25 session with `caps` and `info`.
    pub(super) async fn initialize(
        self: &Arc<Self>,
        caps: &Value,
        info: &Value,
        wait: Duration,
    ) -> Result<Value, String> {
        let call = self.start(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": CHILD_VERSION, "capabilities": caps, "clientInfo": info}}));
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
        let _ = self
            .stdin
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        Ok(result.clone())
    }

    /// Sends request `message` under an id of the child's, for [`Call`] to
    /// read its progress and response.
    pub(super) fn start(self: &Arc<Self>, mut message: Value) -> Call {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
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
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .insert(n, tx);
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let _ = self.stdin.send(message);
        Call {
            child: self.clone(),
            method,
            n,
            token,
            rx,
            done: false,
        }
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
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        match (method, message.get("id")) {
            (Some("ping"), Some(id)) => {
                let _ = self
                    .stdin
                    .send(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
            }
            (Some(m), Some(id)) => {
                let why = format!("{m} cannot reach a stateless (2026-07-28) client through the gateway; use a session");
                let _ = self.stdin.send(error(id, -32601, why, None));
            }
            (Some("notifications/progress"), None) => {
                let token = message
                    .pointer("/params/progressToken")
                    .and_then(Value::as_u64);
                if let Some(tx) = token.and_then(|n| calls.waiting.get(&n)) {
                    let _ = tx.send(message);
                }
            }
            (Some(_), None) => {}
            (None, Some(id)) => {
                if let Some(tx) = id.as_u64().and_then(|n| calls.waiting.get(&n)) {
                    let _ = tx.send(message);
                }
            }
            (None, None) => {}
        }
    }
}

/// One request in flight on a pooled child; dropped before its response
/// (the client went away), it cancels the request on the child.
pub(super) struct Call {
    child: Arc<Pooled>,
    /// The request's method.
    method: String,
    n: u64,
    /// The client's own `progressToken`, put back on the call's progress.
    token: Option<Value>,
    rx: mpsc::UnboundedReceiver<Value>,
    done: bool,
}

impl Call {
    /// The next message for the call: a progress notification, or its
    /// response with the client's `id` (the last); `None` once done.
    pub(super) async fn next(&mut self, id: &Value) -> Option<Value> {
        if self.done {
            return None;
        }
        let Some(mut m) = self.rx.recv().await else {
            self.done = true;
            return Some(error(
                id,
                -32603,
                "the server process exited before answering",
                Some(json!({"reason": "child-exited"})),
            ));
        };
        if m.get("method").is_some() {
            if let (Some(t), Some(p)) = (&self.token, m.get_mut("params")) {
                p["progressToken"] = t.clone();
            }
            return Some(m);
        }
        self.done = true;
        self.forget();
        m["id"] = id.clone();
        if let Some(r) = m.get_mut("result").and_then(Value::as_object_mut) {
            r.entry("resultType").or_insert_with(|| json!("complete"));
            if CACHEABLE.contains(&self.method.as_str()) {
                // 2026-07-28 requires the freshness of these; a child's
                // answer may depend on its per-process state: never cached.
                r.entry("ttlMs").or_insert_with(|| json!(0));
                r.entry("cacheScope").or_insert_with(|| json!("private"));
            }
        }
        Some(m)
    }

    /// The response, progress skipped.
    pub(super) async fn answer(mut self, id: &Value) -> Value {
        loop {
            match self.next(id).await {
                Some(m) if m.get("method").is_some() => {}
                Some(m) => return m,
                None => return error(id, -32603, "no answer", None),
            }
        }
    }

    fn forget(&self) {
        self.child
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .waiting
            .remove(&self.n);
        *self
            .child
            .last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if !self.done {
            self.forget();
            let _ = self.child.stdin.send(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": self.n, "reason": "the stateless client went away"}}),
            );
        }
    }
}
