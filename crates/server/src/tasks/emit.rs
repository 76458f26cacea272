//! The queue of a task's own events (pinned against the log's retention
//! for the task's TTL, the pin renewed while the work emits): what its work emits
//! ([`super::TaskContext::event`]) and its `input_required` status events,
//! committed in order to the task's events stream in batches, so the work
//! never waits for an fsync per event (it waits only for room: at most
//! [`QUEUE`] events not yet committed). A batch the log refuses is tried
//! again while the log is unavailable, for up to [`COMMIT_DEADLINE`]; past it
//! the task fails loudly (`data.reason: "commit-failed"`) instead of going on
//! with a hole in its stream.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, PinId};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::events::{self, EVENTS};
use super::{cell, now_ms};
use crate::jsonrpc;

/// Events emitted and not yet committed, per task, before `event` waits.
pub(crate) const QUEUE: usize = 1024;
/// The most events committed in one append.
const BATCH: usize = 512;
/// How long a refused batch is tried again before the task fails.
const COMMIT_DEADLINE: Duration = Duration::from_secs(30);

/// One entry of the queue.
pub(crate) enum Emit {
    /// An event, as stored.
    Event(Bytes),
    /// Answered once everything queued before it is committed.
    Flush(oneshot::Sender<Result<(), LogError>>),
}

/// The sending half, and what stopped the queue if anything did.
#[derive(Clone)]
pub(crate) struct Emitter {
    tx: mpsc::Sender<Emit>,
    failed: Arc<OnceLock<LogError>>,
}

impl Emitter {
    /// Starts the queue of task `id`, whose events `pin` holds for `ttl`
    /// (renewed while it emits); `on_fail` runs once if a batch could not be
    /// committed (the task is failed then).
    pub(crate) fn start(
        log: Arc<dyn Log>,
        id: String,
        pin: (PinId, Duration),
        on_fail: impl FnOnce() + Send + 'static,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let failed = Arc::new(OnceLock::new());
        tokio::spawn(commit_loop(log, id, rx, pin, failed.clone(), on_fail));
        Self { tx, failed }
    }

    /// Queues `event`; waits only for room.
    pub(crate) async fn send(&self, event: Bytes) -> Result<(), LogError> {
        self.check()?;
        self.tx
            .send(Emit::Event(event))
            .await
            .map_err(|_| self.stopped())
    }

    /// Waits until everything queued so far is committed.
    pub(crate) async fn flush(&self) -> Result<(), LogError> {
        self.check()?;
        let (ack, done) = oneshot::channel();
        self.tx
            .send(Emit::Flush(ack))
            .await
            .map_err(|_| self.stopped())?;
        done.await.map_err(|_| self.stopped())?
    }

    fn check(&self) -> Result<(), LogError> {
        match self.failed.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn stopped(&self) -> LogError {
        self.failed.get().cloned().unwrap_or(LogError::Closed)
    }
}

async fn commit_loop(
    log: Arc<dyn Log>,
    id: String,
    mut rx: mpsc::Receiver<Emit>,
    (mut pin, ttl): (PinId, Duration),
    failed: Arc<OnceLock<LogError>>,
    on_fail: impl FnOnce() + Send + 'static,
) {
    let mut queued = Vec::new();
    let mut pinned = Instant::now();
    while rx.recv_many(&mut queued, BATCH).await > 0 {
        let mut batch = Vec::new();
        let mut acks = Vec::new();
        for q in queued.drain(..) {
            match q {
                Emit::Event(e) => batch.push(e),
                Emit::Flush(ack) => acks.push(ack),
            }
        }
        if !batch.is_empty() && pinned.elapsed() > ttl / 2 {
            // Still emitting: hold its events for another TTL.
            if let Ok(again) = log.pin(&id, EVENTS, 1, ttl).await {
                let _ = log.unpin(&id, pin).await;
                (pin, pinned) = (again, Instant::now());
            }
        }
        let outcome = if batch.is_empty() {
            Ok(())
        } else {
            commit(&*log, &id, batch).await
        };
        if let Err(e) = &outcome {
            let _ = failed.set(e.clone());
        }
        for ack in acks {
            let _ = ack.send(outcome.clone());
        }
        if let Err(e) = outcome {
            tracing::error!(task = %id, error = %e, "a task's events could not be committed; the task fails");
            rx.close();
            fail_task(&*log, &id).await;
            on_fail();
            return;
        }
    }
}

/// Appends one batch, again after a pause while the log is unavailable,
/// until the deadline. A retried batch whose first try may have landed is
/// appended under one key.
async fn commit(log: &dyn Log, id: &str, batch: Vec<Bytes>) -> Result<(), LogError> {
    let mut key = [0u8; 8];
    getrandom::fill(&mut key).expect("the OS random source failed");
    let key = u64::from_le_bytes(key);
    let deadline = Some(Instant::now() + COMMIT_DEADLINE);
    crate::retry::retrying(None, deadline, || {
        log.append_once(id, EVENTS, batch.clone(), key)
    })
    .await?;
    Ok(())
}

/// Fails the task (first end wins) because its events could not be
/// committed: a reader sees the stream end with this failure, never a hole.
async fn fail_task(log: &dyn Log, id: &str) {
    let error = json!({"code": jsonrpc::INTERNAL_ERROR,
        "message": "the task's events could not be committed (its log was unavailable); it may be retried",
        "data": {"reason": "commit-failed"}});
    let at = now_ms();
    match cell::update(log, id, |s| {
        s.end("failed", Some(("error", error.clone())), at)
            .then_some(())
    })
    .await
    {
        Ok((state, Some(()))) => {
            if let Ok((rec, _)) = cell::read(log, id).await {
                if let Err(e) = events::status(log, id, &rec, &state).await {
                    tracing::warn!(task = %id, error = %e, "a task's failure is in its record but not in its events; a reader adds it");
                }
            }
        }
        Ok((_, None)) => {}
        Err(e) => {
            tracing::error!(task = %id, error = %e, "could not fail a task whose events were not committed")
        }
    }
}
