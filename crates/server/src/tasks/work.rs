//! A task's work run to its end: how it ended committed, unless the task
//! ended first (cancelled), when the work is stopped after a grace.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{LogError, StreamKey, Subscription};

use super::{cell, events, fold, now_ms, Shared, TaskContext, TaskEnd, CANCEL_GRACE, END_ATTEMPTS};

/// Runs a task's work and commits how it ended, unless the task ended first
/// (cancelled): then the work is stopped after [`CANCEL_GRACE`].
pub(super) async fn run<F, Fut>(ctx: TaskContext, sub: Subscription, work: F)
where
    F: FnOnce(TaskContext) -> Fut + Send + 'static,
    Fut: Future<Output = TaskEnd> + Send + 'static,
{
    let shared = ctx.shared.clone();
    let watcher = tokio::spawn(watch(shared.clone(), sub));
    let grace = async {
        shared.cancel.cancelled().await;
        tokio::time::sleep(CANCEL_GRACE).await;
    };
    let end = tokio::select! {
        end = work(ctx) => end,
        _ = grace => TaskEnd::Cancelled,
    };
    watcher.abort();
    if shared.cancel.is_cancelled() {
        return; // ended by someone else's word: the first end stands
    }
    // Every event the work emitted comes before its end.
    let end = match shared.emitter.flush().await {
        Ok(()) => end,
        Err(_) => return, // the queue failed the task already
    };
    let (status, payload) = match end {
        TaskEnd::Completed(result) => ("completed", Some(("result", result))),
        TaskEnd::Failed(error) => ("failed", Some(("error", error))),
        TaskEnd::Cancelled => ("cancelled", None),
    };
    let at = now_ms();
    let mut backoff = Duration::from_millis(100);
    for _ in 0..END_ATTEMPTS {
        let ended = cell::update(&*shared.log, &shared.id, |s| {
            s.end(status, payload.clone(), at).then_some(())
        })
        .await;
        match ended {
            Ok((state, Some(()))) => {
                let e = fold::event(status, at, payload);
                if let Err(e) = shared.append(&e).await {
                    tracing::warn!(task = %shared.id, error = %e, "a task's end is in its record but not in its stream");
                }
                if let Err(e) =
                    events::status(&*shared.log, &shared.id, &shared.record, &state).await
                {
                    tracing::warn!(task = %shared.id, error = %e, "a task's end is in its record but not in its events; a reader adds it");
                }
                return;
            }
            // Ended first by another's word, or expired.
            Ok((_, None)) | Err(LogError::NoSession(_) | LogError::SessionEnded) => return,
            Err(e) => {
                tracing::warn!(task = %shared.id, error = %e, "could not commit how a task ended; trying again");
                tokio::time::sleep(backoff).await;
                backoff *= 3;
            }
        }
    }
    tracing::error!(task = %shared.id, "gave up committing how a task ended; tasks/get will report it failed once this instance is gone");
}

/// Follows the task's stream as a bell: every event (an answer, a cancel,
/// the work's own) makes the work read the task's record (`Shared::sync`).
/// A subscription that ends (a lost connection to the log, a lag) is taken
/// again and the record read, so an answer is never missed; nothing is read
/// from the stream itself, so retention may trim it freely.
async fn watch(shared: Arc<Shared>, mut sub: Subscription) {
    loop {
        match sub.next().await {
            Ok(_) => {}
            Err(LogError::NoSession(_) | LogError::SessionEnded | LogError::Closed) => {
                shared.cancel.cancel();
                return;
            }
            Err(e) => {
                tracing::debug!(task = %shared.id, error = %e, "following a task's stream again");
                tokio::time::sleep(Duration::from_millis(500)).await;
                match shared.log.subscribe(&shared.id, StreamKey::Session).await {
                    Ok((_, again)) => sub = again,
                    Err(e) => {
                        tracing::debug!(task = %shared.id, error = %e, "could not follow a task's stream");
                        continue;
                    }
                }
            }
        }
        if shared.sync().await {
            return;
        }
    }
}
