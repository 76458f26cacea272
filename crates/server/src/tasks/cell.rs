//! A task's record as a compare-and-set cell: every change of a task's
//! state (by its work on the owner, by `tasks/update`, `tasks/cancel` or
//! the failing of a dead owner's task on any instance) reads the record,
//! applies one transition of `fold.rs`, and writes it back only if nobody
//! wrote in between ([`SessionRecords::swap_meta`]), else reads again. So two ends
//! never both win, an answer is never lost to a concurrent status change,
//! and a task's state never depends on events retention may have trimmed.

use mcp_resume_log::{Log, LogError, StreamKey};
use serde_json::Value;

use super::fold::{self, TaskState};
use super::TaskRecord;
use crate::session::SessionRecord;

/// How many times a change is tried against a record that keeps changing
/// under it before the log is reported unavailable. A task has a handful of
/// writers; this is never reached but by a fault.
const MAX_RACES: usize = 64;

/// The most events read at once to fold a record written by an earlier release.
const PAGE: usize = 4096;

/// The task's record and its current state.
pub(crate) async fn read(log: &dyn Log, id: &str) -> Result<(TaskRecord, TaskState), LogError> {
    let rec = SessionRecord::decode(&log.session(id).await?.meta);
    let Some(task) = rec.task else {
        return Err(LogError::NoSession(id.to_owned()));
    };
    let state = current(log, id, &task).await?;
    Ok((task, state))
}

/// The state `task` holds; for a record an earlier release wrote (no state
/// in it), folded from the task's whole stream as that release did.
pub(crate) async fn current(
    log: &dyn Log,
    id: &str,
    task: &TaskRecord,
) -> Result<TaskState, LogError> {
    if let Some(state) = &task.state {
        return Ok(state.clone());
    }
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = log.read(id, StreamKey::Session, after, PAGE).await?;
        let Some(last) = page.last() else { break };
        after = last.seq;
        events.extend(
            page.iter()
                .filter_map(|e| serde_json::from_slice::<Value>(&e.message).ok()),
        );
    }
    Ok(fold::fold(task.created_ms, &events))
}

/// Applies `change` to the task's state and commits it, unless `change`
/// answers `None` (nothing to change). Returns the state after and what
/// `change` answered. A record that changed meanwhile is read again and
/// `change` applied to it afresh.
pub(crate) async fn update<T>(
    log: &dyn Log,
    id: &str,
    mut change: impl FnMut(&mut TaskState) -> Option<T>,
) -> Result<(TaskState, Option<T>), LogError> {
    for _ in 0..MAX_RACES {
        let meta = log.session(id).await?.meta;
        let mut rec = SessionRecord::decode(&meta);
        let Some(task) = rec.task.as_mut() else {
            return Err(LogError::NoSession(id.to_owned()));
        };
        let mut state = current(log, id, task).await?;
        let Some(outcome) = change(&mut state) else {
            return Ok((state, None));
        };
        task.state = Some(state.clone());
        if log.swap_meta(id, meta, rec.encode()).await? {
            return Ok((state, Some(outcome)));
        }
    }
    Err(LogError::Unavailable(format!(
        "task {id}: its record changed under every one of {MAX_RACES} attempts to update it"
    )))
}
