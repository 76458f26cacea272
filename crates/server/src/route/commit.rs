//! A route's commits: runs of messages bound for one stream, each committed
//! in one append (fenced by the lease for an exclusive backend), retried
//! under one key while the log is unavailable, and a call's answer replaced
//! by an error past the reply deadline (`crate::route::reply`).

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::Value;

use crate::backend::{Pending, Queued};
use crate::route::state::AppState;

/// Messages bound for one stream, committed in one append.
pub(super) type Run = (StreamKey, Vec<Bytes>);

/// How many of `queued` are messages (what the outbox counts as uncommitted).
pub(super) fn count_messages(queued: &[Queued]) -> usize {
    queued
        .iter()
        .filter(|q| matches!(q, Queued::Message(_)))
        .count()
}

/// Adds `m` to the run of stream `k`.
pub(super) fn push(runs: &mut Vec<Run>, k: StreamKey, m: &Value) {
    let bytes = Bytes::from(serde_json::to_vec(m).unwrap_or_default());
    match runs.last_mut() {
        Some((last, b)) if *last == k => b.push(bytes),
        _ => runs.push((k, vec![bytes])),
    }
}

/// Commits the runs in order; a run that cannot be committed is reported to
/// the backend at its next send ([`Pending::fail`]), and a call it answered
/// gets an error response instead. With `fenced` (a route
/// under a lease), each commit is refused once another instance holds the
/// lease: then nothing more is committed and this says so (`true`).
pub(super) async fn flush(
    state: &AppState,
    session: &str,
    runs: &mut Vec<Run>,
    pending: &Pending,
    fenced: bool,
) -> bool {
    for (k, messages) in runs.drain(..) {
        match crate::route::reply::commit(state, session, k, messages, fenced).await {
            Ok(_) => {}
            Err(LogError::LeaseLost(_)) => {
                // The runs after it are dropped with the drain.
                tracing::warn!(%session, "another instance holds the session's lease: what this instance's backend sent is not committed");
                return true;
            }
            Err(e) => {
                tracing::error!(%session, stream = ?k, error = %e, "could not commit what the backend sent");
                pending.fail(e);
            }
        }
    }
    false
}

/// Commits messages already encoded to the session stream in one append: at
/// most once per `key` when given (the sender may retry), fenced by the
/// lease with `fenced`.
pub(super) async fn encoded(
    state: &AppState,
    session: &str,
    messages: Vec<Bytes>,
    key: Option<u64>,
    fenced: bool,
) -> Result<Seq, LogError> {
    match key {
        None if !fenced => state.commit(session, StreamKey::Session, messages).await,
        key => {
            let key = key.unwrap_or_else(AppState::once_key);
            let k = StreamKey::Session;
            state.commit_once(session, k, messages, key, fenced).await
        }
    }
}
