//! Durable tasks (the `io.modelcontextprotocol/tasks` extension of MCP
//! 2026-07-28): long-running work whose state and result live in the log,
//! so `tasks/get` answers on any instance, within the task's TTL, and after
//! the instance that ran the task died (`kill -9`): with the result if it was
//! committed, else `failed` with `data.reason: "server-restarted"`; never
//! "not found" for a task that existed. No SDK's task store is durable; this
//! one is the log.
//!
//! A task is a log session of its own (its id is a session id: 256 random
//! bits), whose record says who owns it (the instance running its work) and
//! holds its state, changed by compare-and-set (`cell.rs`, `fold.rs`), and
//! whose stream carries its events: the history, and the bell that wakes
//! its work when a client answers or cancels. A handler creates one with
//! [`TaskStore::spawn`]; the work runs on this instance and talks to the
//! client through its [`TaskContext`] (input requests answered with
//! `tasks/update`, cancellation by `tasks/cancel`). `tasks/get`,
//! `tasks/update` and `tasks/cancel` are answered by the transport from the
//! log (`serve.rs`); they never reach the backend. `tasks/stream` (SEP-2694)
//! replays and follows the task's events stream from a cursor, on any
//! instance (`events.rs`, `stream.rs`); the work adds to it with
//! [`TaskContext::event`], queued and committed in batches (`emit.rs`).

mod cell;
mod emit;
pub mod events;
pub(crate) mod fold;
pub(crate) mod serve;
pub(crate) mod stream;
#[cfg(test)]
mod tests;
mod work;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, StreamKey};
use serde_json::{json, Map, Value};

use fold::TaskState;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::session::{new_session_id, SessionRecord};

/// The extension's identifier, in capabilities.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// How long a cancelled task's work may run on before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// How many times the owner tries to commit how a task ended (backing off
/// 0.1 s, 0.3 s, ... about 12 s in all) before it gives up and leaves the
/// task to be failed once this instance is gone.
const END_ATTEMPTS: usize = 6;

/// Who made a stateless-era request, as the transport authenticated it
/// (`None`: no credentials configured). The transport puts it in the HTTP
/// request's extensions, so a handler that creates a task can make it
/// readable by that principal only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller(pub Option<String>);

pub use crate::session::TaskRecord;

impl TaskRecord {
    /// The task's fields common to every answer about it (SEP-2663 `Task`),
    /// in the state `state`.
    pub(crate) fn wire(&self, id: &str, state: &TaskState) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("taskId".into(), json!(id));
        m.insert("status".into(), json!(state.status));
        m.insert("createdAt".into(), json!(fold::iso8601(self.created_ms)));
        m.insert(
            "lastUpdatedAt".into(),
            json!(fold::iso8601(state.updated_ms)),
        );
        m.insert("ttlMs".into(), json!(self.ttl_ms));
        m.insert("pollIntervalMs".into(), json!(self.poll_ms));
        m
    }
}

/// How a task's work ended.
#[derive(Debug)]
pub enum TaskEnd {
    /// With a result (a tool's result, even one with `isError: true`).
    Completed(Value),
    /// With a JSON-RPC error object (`code`, `message`, `data`).
    Failed(Value),
    /// Cancelled, as the client asked.
    Cancelled,
}

/// Why a [`TaskContext`] call could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The client cancelled the task (or it ended otherwise): stop.
    #[error("the task was cancelled")]
    Cancelled,
    /// The log refused a write.
    #[error(transparent)]
    Log(#[from] LogError),
    /// An event the work emitted is refused (its type or payload), why.
    #[error("{0}")]
    Invalid(String),
}

/// Creates durable tasks; clone it freely (one per server, shared with the
/// handlers that create tasks and with the transport, [`crate::McpServer::with_tasks`]).
#[derive(Clone)]
pub struct TaskStore {
    log: Arc<dyn Log>,
    ttl: Duration,
    poll: Duration,
    /// Tasks whose work runs in this process (shared by the store's clones):
    /// what a graceful stop waits for.
    running: Arc<std::sync::atomic::AtomicUsize>,
    /// How many of its last events a task keeps while it lives.
    max_events: u64,
}

/// How many of its last events a task keeps while it lives, unless
/// [`TaskStore::with_max_events`] says otherwise.
pub const DEFAULT_TASK_EVENTS: u64 = 10_000;

impl TaskStore {
    /// Tasks in `log`, kept 30 minutes after their last use (the server's
    /// default session TTL, which must not be shorter: a task is a session
    /// and ends with the same idle expiry), polled every 500 ms.
    pub fn new(log: Arc<dyn Log>) -> Self {
        Self {
            log,
            ttl: Duration::from_secs(30 * 60),
            poll: Duration::from_millis(500),
            running: Arc::default(),
            max_events: DEFAULT_TASK_EVENTS,
        }
    }

    /// How many of its last events a task keeps while it lives (at least
    /// one; [`DEFAULT_TASK_EVENTS`] unless set), pinned against the log's
    /// retention for its TTL. Older ones are the log's to drop (as its
    /// `--max-events` says): a reader that asks for one gets `events_gone`.
    pub fn with_max_events(mut self, n: u64) -> Self {
        self.max_events = n.max(1);
        self
    }

    /// The TTL tasks advertise; at most the server's session TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The log tasks live in.
    pub(crate) fn log(&self) -> &Arc<dyn Log> {
        &self.log
    }

    /// Creates a task readable by `caller` and runs `work` for it on this
    /// instance; returns once the task is committed, with its wire fields
    /// (`taskId`, `status`, `createdAt`, ... of a `CreateTaskResult`), so a
    /// `tasks/get` on any instance finds it at once.
    pub async fn spawn<F, Fut>(
        &self,
        caller: Caller,
        work: F,
    ) -> Result<Map<String, Value>, LogError>
    where
        F: FnOnce(TaskContext) -> Fut + Send + 'static,
        Fut: Future<Output = TaskEnd> + Send + 'static,
    {
        let id = new_session_id();
        let created_ms = now_ms();
        let state = TaskState::new(created_ms);
        let record = TaskRecord {
            owner: self.log.instance().to_owned(),
            created_ms,
            ttl_ms: self.ttl.as_millis() as u64,
            poll_ms: self.poll.as_millis() as u64,
            state: Some(state.clone()),
            events: true,
        };
        let session = SessionRecord {
            protocol_version: "2026-07-28".into(),
            principal: caller.0,
            task: Some(record.clone()),
            ..SessionRecord::default()
        };
        self.log.create_session(&id, session.encode()).await?;
        // Its events: request stream 1, opened with the task, seq 0 its start.
        let r = self
            .log
            .open_request_stream(&id, events::stream_record(), 1)
            .await?;
        debug_assert_eq!(StreamKey::Request(r), events::EVENTS);
        // Its last events follow the task's TTL, not the log's retention:
        // pinned from the first, the pin renewed (and moved up past
        // `max_events`) while the work emits.
        let pin = self.log.pin(&id, events::EVENTS, 1, self.ttl).await?;
        events::status(&*self.log, &id, &record, &state).await?;
        let (_, sub) = self.log.subscribe(&id, StreamKey::Session).await?;
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let pinned = emit::Pinned {
            id: pin,
            at: 1,
            ttl: self.ttl,
            keep: self.max_events,
        };
        let emitter =
            emit::Emitter::start(self.log.clone(), id.clone(), pinned, move || stop.cancel());
        let ctx = TaskContext {
            shared: Arc::new(Shared {
                log: self.log.clone(),
                id: id.clone(),
                record: record.clone(),
                waiters: Mutex::default(),
                cancel,
                emitter,
            }),
        };
        let running = Running::start(&self.running);
        tokio::spawn(async move {
            work::run(ctx, sub, work).await;
            drop(running);
        });
        Ok(record.wire(&id, &state))
    }

    /// How many tasks' work runs in this process now.
    pub(crate) fn running(&self) -> usize {
        self.running.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// One task's work counted in [`TaskStore::running`] until dropped.
struct Running(Arc<std::sync::atomic::AtomicUsize>);

impl Running {
    fn start(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// What a task's work holds to talk to its client.
#[derive(Clone)]
pub struct TaskContext {
    shared: Arc<Shared>,
}

struct Shared {
    log: Arc<dyn Log>,
    id: String,
    /// The task's record as created (its wire fields for status events).
    record: TaskRecord,
    /// The work's input requests waiting for an answer, by key.
    waiters: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Fires when the task ends by someone else's word (a cancel), or its
    /// events could not be committed.
    cancel: CancellationToken,
    /// The queue of its events.
    emitter: emit::Emitter,
}

impl TaskContext {
    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.shared.id
    }

    /// Asks the client for input (an `elicitation/create`,
    /// `sampling/createMessage` or `roots/list` request, as JSON) under
    /// `key`, unique over the task's life: the task shows `input_required`
    /// with it until the client answers with `tasks/update` (on any
    /// instance); returns the answer.
    pub async fn request_input(&self, key: &str, request: Value) -> Result<Value, TaskError> {
        let shared = &self.shared;
        let (tx, rx) = oneshot::channel();
        lock(&shared.waiters).insert(key.to_owned(), tx);
        let asked = cell::update(&*shared.log, &shared.id, |s| {
            s.ask(key, request.clone(), now_ms()).then_some(())
        })
        .await;
        let state = match asked {
            Ok((state, Some(()))) => state,
            Ok((_, None)) => {
                lock(&shared.waiters).remove(key);
                return Err(TaskError::Cancelled); // it has ended
            }
            Err(e) => {
                lock(&shared.waiters).remove(key);
                return Err(e.into());
            }
        };
        let pending = Value::Object(state.pending());
        let e = fold::event(
            "input_required",
            state.updated_ms,
            Some(("inputRequests", pending)),
        );
        shared.append(&e).await?;
        // In order behind the events the work emitted before it.
        let status = events::status_event(&shared.id, &shared.record, &state);
        shared.emitter.send(status).await?;
        tokio::select! {
            answer = rx => answer.map_err(|_| TaskError::Cancelled),
            _ = shared.cancel.cancelled() => Err(TaskError::Cancelled),
        }
    }

    /// Emits an event of type `kind` (vendor-prefixed, e.g.
    /// `com.example.progress`) with `payload` (a JSON object of at most
    /// [`events::MAX_EVENT_PAYLOAD`] bytes) to the task's event stream, read
    /// with `tasks/stream` on any instance (SEP-2694). Queued in order and
    /// committed in batches: this waits only for room in the queue, never
    /// for an fsync; readers see it once it is committed. An event the log
    /// cannot take fails the task loudly; after the task ended (a cancel)
    /// nothing more is accepted.
    pub async fn event(&self, kind: &str, payload: Value) -> Result<(), TaskError> {
        events::check_emitted(kind, &payload).map_err(TaskError::Invalid)?;
        if self.shared.cancel.is_cancelled() {
            return Err(TaskError::Cancelled);
        }
        let Value::Object(payload) = payload else {
            unreachable!("checked: an object")
        };
        let event = events::stored(kind, &payload);
        Ok(self.shared.emitter.send(event).await?)
    }

    /// Waits until every event emitted so far is committed (readable on
    /// every instance); rarely needed, as a task's end waits for it anyway.
    pub async fn flush(&self) -> Result<(), TaskError> {
        Ok(self.shared.emitter.flush().await?)
    }

    /// Completes when the task is cancelled: work that can stop early
    /// selects on it and returns [`TaskEnd::Cancelled`].
    pub async fn cancelled(&self) {
        self.shared.cancel.cancelled().await
    }
}

impl Shared {
    async fn append(&self, event: &Value) -> Result<(), LogError> {
        let bytes = Bytes::from(serde_json::to_vec(event).unwrap_or_default());
        self.log
            .append(&self.id, StreamKey::Session, vec![bytes])
            .await?;
        Ok(())
    }

    /// Hands the work the answers its record holds for it, and stops the
    /// work once the task has ended; whether it has. A record that cannot
    /// be read is read again (every 500 ms) until it can: the bell that
    /// called this rings once.
    async fn sync(&self) -> bool {
        let state = loop {
            match cell::read(&*self.log, &self.id).await {
                Ok((_, state)) => break state,
                Err(LogError::NoSession(_) | LogError::SessionEnded | LogError::Closed) => {
                    self.cancel.cancel(); // expired
                    return true;
                }
                Err(e) => {
                    tracing::debug!(task = %self.id, error = %e, "reading a task's record again");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = self.cancel.cancelled() => return true,
                    }
                }
            }
        };
        if state.terminal() {
            self.cancel.cancel();
            return true;
        }
        let mut taken = Vec::new();
        {
            let mut waiters = lock(&self.waiters);
            for (key, answer) in &state.answers {
                if let Some(tx) = waiters.remove(key) {
                    let _ = tx.send(answer.clone());
                    taken.push(key.clone());
                }
            }
        }
        if !taken.is_empty() {
            // Bookkeeping only: an answer left in the record is never handed
            // out twice (keys are not reused, its waiter is gone).
            let took = cell::update(&*self.log, &self.id, |s| s.take(&taken).then_some(())).await;
            if let Err(e) = took {
                tracing::debug!(task = %self.id, error = %e, "could not clear a task's taken answers");
            }
        }
        false
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Now, in Unix ms.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}
