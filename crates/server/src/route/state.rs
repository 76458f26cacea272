//! What every handler shares.

use std::future::Future;
use std::sync::Arc;

use mcp_resume_log::{Log, LogError, Seq, StreamKey};
use tokio::sync::{watch, Mutex};
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;

use crate::session::SessionRecord;
use crate::ServerConfig;

/// How many slots [`AppState::orphan_locks`] has.
pub(crate) const ORPHAN_SLOTS: usize = 64;

/// Shared state of one server ([`ServerState`]) behind one `Arc`: every
/// request clones it a few times (axum's `State`, each layer's), and a clone
/// of the fields themselves was a dozen atomic counts each time.
#[derive(Clone)]
pub(crate) struct AppState(Arc<ServerState>);

impl AppState {
    /// Shares `state`.
    pub(crate) fn new(state: ServerState) -> Self {
        Self(Arc::new(state))
    }

    /// The state to change before the server runs (a copy if it is shared
    /// already).
    pub(crate) fn make_mut(&mut self) -> &mut ServerState {
        Arc::make_mut(&mut self.0)
    }
}

impl std::ops::Deref for AppState {
    type Target = ServerState;

    fn deref(&self) -> &ServerState {
        &self.0
    }
}

/// What one server shares: the log every connection reads, the sessions'
/// backend and routes, the settings and the shutdown signal.
#[derive(Clone)]
pub(crate) struct ServerState {
    /// The session log; the only source of what clients receive.
    pub(crate) log: Arc<dyn Log>,
    /// Settings.
    pub(crate) config: Arc<ServerConfig>,
    /// Flips to `true` when the server stops; streams end, sockets close with 1001.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Serialises read-modify-write of session records (rare: tool registration).
    pub(crate) record_lock: Arc<Mutex<()>>,
    /// Every task the server spawns (handlers, readers, background work), so
    /// shutdown can wait for them within a deadline instead of guessing.
    pub(crate) tasks: TaskTracker,
    /// What `/metrics` reports.
    pub(crate) metrics: Arc<Metrics>,
    /// Serialise the ending of one orphaned call in this process (its
    /// error is committed under one key anyway): one lock per slot of
    /// (session, stream), so a resume waits for the start-up sweep or
    /// another orphan only when they share a slot (1 in 64).
    pub(crate) orphan_locks: Arc<[Mutex<()>; ORPHAN_SLOTS]>,
    /// What serves MCP for each session: the built-in tools, an rmcp
    /// handler, a gateway's child or upstream. Every session's messages go
    /// through its route to it.
    pub(crate) backend: Arc<dyn crate::backend::Backend>,
    /// The routes of the sessions whose backend runs on this instance.
    pub(crate) routes: Arc<crate::route::Routes>,
    /// Durable tasks, answered by the transport (`tasks/*`), if the server has them.
    pub(crate) task_store: Option<crate::tasks::TaskStore>,
    /// Whether the server is stopping, and the requests its stop waits for
    /// ([`crate::route::drain`]).
    pub(crate) drain: Arc<crate::route::drain::Drain>,
    /// The heads of sessions whose requests came here without their route
    /// ([`crate::route::heads`]).
    pub(crate) heads: Arc<crate::route::heads::Heads>,
}

impl AppState {
    /// Appends JSON-RPC messages already encoded as JSON text to a stream,
    /// returning once they are committed; every server write goes through here.
    pub(crate) async fn commit(
        &self,
        session: &str,
        stream: StreamKey,
        messages: Vec<bytes::Bytes>,
    ) -> Result<Seq, LogError> {
        let n = messages.len();
        self.timed(n, self.log.append(session, stream, messages))
            .await
    }

    /// Records a commit of `n` events in the metrics once `append` is done.
    async fn timed(
        &self,
        n: usize,
        append: impl Future<Output = Result<Seq, LogError>>,
    ) -> Result<Seq, LogError> {
        let started = std::time::Instant::now();
        let seq = append.await?;
        self.metrics.committed(n, started.elapsed());
        Ok(seq)
    }

    /// [`AppState::commit`] for a batch that may be retried: at most once
    /// per `key` ([`EventLog::append_once`]); with `fenced`, on behalf of this
    /// instance's lease on the session ([`EventLog::append_fenced`]: refused with
    /// `LeaseLost` once another instance holds it).
    pub(crate) async fn commit_once(
        &self,
        session: &str,
        stream: StreamKey,
        messages: Vec<bytes::Bytes>,
        key: u64,
        fenced: bool,
    ) -> Result<Seq, LogError> {
        let n = messages.len();
        if fenced {
            let append = self.log.append_fenced(session, stream, messages, key);
            self.timed(n, append).await
        } else {
            let append = self.log.append_once(session, stream, messages, key);
            self.timed(n, append).await
        }
    }

    /// A random key for [`AppState::commit_once`].
    pub(crate) fn once_key() -> u64 {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("the OS random source failed");
        u64::from_le_bytes(b)
    }

    /// How long a session's handler may have nothing in flight before it is
    /// parked: [`crate::ServerConfig::park_after`] when set, else the
    /// backend's own; `None` for a backend that never parks.
    pub(crate) fn park_after(&self) -> Option<std::time::Duration> {
        self.backend
            .park_after()
            .map(|own| self.config.park_after.unwrap_or(own))
    }

    /// Spawns a task the server's shutdown waits for.
    pub(crate) fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Reads the server's record of a session.
    pub(crate) async fn record(&self, session: &str) -> Result<SessionRecord, LogError> {
        crate::session::read_record(&*self.log, session).await
    }

    /// Changes the session's record under a lock; `f` returns whether it changed anything.
    pub(crate) async fn update_record(
        &self,
        session: &str,
        f: impl FnOnce(&mut SessionRecord) -> bool,
    ) -> Result<bool, LogError> {
        crate::session::update_record(&*self.log, &self.record_lock, session, f).await
    }
}

/// Completes once the server is stopping (at once if it already is).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
