//! Every call ends: what answers a call (a run of messages that ends with
//! its response) is committed, retried under one key while the log answers
//! `Unavailable` or a storage error, until the server's reply deadline
//! ([`crate::ServerConfig::reply_deadline`], 30 s by default); past it an
//! error response takes its place (-32603, `data.reason: "commit-failed"`),
//! retried until it lands, the session ends or the server stops. A reader
//! of the call's stream sees one response: the stream ends at the first
//! (docs/protocol.md 3.4), so a late real response after the error is never
//! shown. Used by every path that answers a call: each session's route (the
//! built-in tools, hosted handlers, gateway children) and the transport's
//! own answers.

use std::time::Instant;

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::route::state::AppState;

pub(crate) use crate::retry::retryable;

/// Commits `messages` to `stream` of `session`: retried under one key
/// ([`AppState::commit_once`], fenced by this instance's lease with
/// `fenced`) while the failure is [`retryable`], until the reply deadline.
/// When the run cannot be committed, each call it answers (each response
/// in it) gets an error response instead (see the module doc) before this
/// returns the run's error; the run is read for them only then.
pub(crate) async fn commit(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    messages: Vec<Bytes>,
    fenced: bool,
) -> Result<Seq, LogError> {
    let deadline = Instant::now() + state.config.reply_deadline;
    let failure = match retry(state, session, stream, &messages, fenced, Some(deadline)).await {
        Ok(seq) => return Ok(seq),
        Err(e) => e,
    };
    let calls = answered_calls(&messages);
    if calls.is_empty() || !retryable(&failure) {
        return Err(failure);
    }
    tracing::error!(%session, ?stream, error = %failure, "could not commit a call's response within the reply deadline; answering it with an error");
    let errors: Vec<Bytes> = calls
        .iter()
        .map(|id| Bytes::from(serde_json::to_vec(&commit_failed(state, id)).unwrap_or_default()))
        .collect();
    match retry(state, session, stream, &errors, fenced, None).await {
        Ok(_) => {}
        Err(e) if retryable(&e) => {
            tracing::error!(%session, ?stream, "the server stops with a call left unanswered in the log; its owner is gone once it has stopped, and the call is ended as an orphan then")
        }
        Err(e) => {
            tracing::warn!(%session, ?stream, error = %e, "a call's error response was not committed")
        }
    }
    Err(failure)
}

/// The error that answers call `id` when what it sent could not be
/// committed within the reply deadline (`data.reason: "commit-failed"`).
pub(crate) fn commit_failed(state: &AppState, id: &Value) -> Value {
    jsonrpc::error_with_data(
        id,
        jsonrpc::INTERNAL_ERROR,
        format!(
            "the server could not commit this call's messages within {} s (its log was unavailable); it may be retried",
            state.config.reply_deadline.as_secs()
        ),
        json!({"reason": "commit-failed"}),
    )
}

/// [`commit`] of one response the transport gives itself (a call refused,
/// cancelled, or whose backend stopped), on a stream; a failure is logged:
/// the call has its error response by then. `fenced` for a route under the
/// session's lease: like everything such a route commits, refused once
/// another instance holds the lease (an instance that lost it writes nothing
/// more; the call then ends as an orphan of a lost lease, `route::orphans`).
pub(crate) async fn commit_response(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    reply: &Value,
    fenced: bool,
) {
    let bytes = Bytes::from(serde_json::to_vec(reply).unwrap_or_default());
    match commit(state, session, stream, vec![bytes], fenced).await {
        Ok(_) => {}
        Err(LogError::LeaseLost(_)) => {
            tracing::debug!(%session, ?stream, "another instance holds the session's lease: this instance's answer is not committed (the call ends as an orphan of the lost lease)")
        }
        Err(e) => tracing::warn!(%session, ?stream, error = %e, "could not commit a response"),
    }
}

/// Appends `messages` under one key ([`retrying`]).
async fn retry(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    messages: &[Bytes],
    fenced: bool,
    deadline: Option<Instant>,
) -> Result<Seq, LogError> {
    let key = AppState::once_key();
    retrying(state, deadline, || {
        state.commit_once(session, stream, messages.to_vec(), key, fenced)
    })
    .await
}

/// [`crate::retry::retrying`] until the server stops.
pub(crate) async fn retrying<T, F, Fut>(
    state: &AppState,
    deadline: Option<Instant>,
    attempt: F,
) -> Result<T, LogError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LogError>>,
{
    crate::retry::retrying(Some(&state.shutdown), deadline, attempt).await
}

/// The JSON-RPC ids of the responses in `run`: the calls it answers.
fn answered_calls(run: &[Bytes]) -> Vec<Value> {
    run.iter().filter_map(|m| jsonrpc::answer_id(m)).collect()
}
