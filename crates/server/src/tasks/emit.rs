//! The queue of a task's own events (its last [`super::TaskStore::with_max_events`]
//! events pinned against the log's retention for the task's TTL, the pin
//! renewed and moved up while the work emits, so a task that emits without
//! end keeps a bounded window, its oldest events dropped: a reader that
//! asks for them is told `events_gone` and where to resume): what its work emits
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
use mcp_resume_log::{Log, LogError, PinId, Seq};
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
    /// Starts the queue of task `id`, whose last `keep` events `pin` holds
    /// for `ttl` (renewed, and moved up, while it emits); `on_fail` runs
    /// once if a batch could not be committed (the task is failed then).
    pub(crate) fn start(
        log: Arc<dyn Log>,
        id: String,
        pin: Pinned,
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

/// The pin that holds a task's last events.
pub(crate) struct Pinned {
    /// The pin.
    pub(crate) id: PinId,
    /// The log seq it holds from.
    pub(crate) at: Seq,
    /// How long each pin lasts (the task's TTL).
    pub(crate) ttl: Duration,
    /// How many of the task's last events it holds.
    pub(crate) keep: u64,
}

impl Pinned {
    /// Where the pin should be for a stream at `head`, if it should move:
    /// up to hold the last `keep` events (in steps of an eighth of them,
    /// so a busy task pins again once per `keep / 8` events), or again
    /// where it is when half its life is gone.
    fn next(&self, head: Seq, since: Duration) -> Option<Seq> {
        let wanted = (head + 1).saturating_sub(self.keep).max(1);
        let step = (self.keep / 8).max(1);
        if wanted >= self.at + step {
            return Some(wanted);
        }
        (since > self.ttl / 2).then_some(self.at)
    }

    /// Pins at `at` for another TTL and lets the old pin go; the events
    /// below `at` are the task's no longer (counted as dropped).
    async fn move_to(&mut self, log: &dyn Log, task: &str, at: Seq) -> bool {
        let Ok(again) = log.pin(task, EVENTS, at, self.ttl).await else {
            return false;
        };
        let _ = log.unpin(task, self.id).await;
        if at > self.at {
            crate::metrics::limit_counted("task-events", at - self.at);
            tracing::debug!(
                task,
                from = self.at - 1,
                to = at - 2,
                "a task's oldest events passed its cap; retention may drop them"
            );
        }
        (self.id, self.at) = (again, at);
        true
    }
}

async fn commit_loop(
    log: Arc<dyn Log>,
    id: String,
    mut rx: mpsc::Receiver<Emit>,
    mut pin: Pinned,
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
        let outcome = if batch.is_empty() {
            Ok(None)
        } else {
            // Still emitting: its last events held for another TTL.
            commit(&*log, &id, batch)
                .await
                .map(|head| pin.next(head, pinned.elapsed()))
        };
        let outcome = match outcome {
            Ok(Some(at)) => {
                if pin.move_to(&*log, &id, at).await {
                    pinned = Instant::now();
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e),
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
async fn commit(log: &dyn Log, id: &str, batch: Vec<Bytes>) -> Result<Seq, LogError> {
    let mut key = [0u8; 8];
    getrandom::fill(&mut key).expect("the OS random source failed");
    let key = u64::from_le_bytes(key);
    let deadline = Some(Instant::now() + COMMIT_DEADLINE);
    crate::retry::retrying(None, deadline, || {
        log.append_once(id, EVENTS, batch.clone(), key)
    })
    .await
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
