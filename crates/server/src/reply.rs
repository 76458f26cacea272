//! Every call ends: what answers a call (a run of messages that ends with
//! its response) is committed, retried under one key while the log answers
//! `Unavailable` or a storage error, until the server's reply deadline
//! ([`crate::ServerConfig::reply_deadline`], 30 s by default); past it an
//! error response takes its place (-32603, `data.reason: "commit-failed"`),
//! retried until it lands, the session ends or the server stops. A reader
//! of the call's stream sees one response: the stream ends at the first
//! (docs/protocol.md 3.4), so a late real response after the error is never
//! shown. Used by every path that answers a call: built-in tools (SSE and
//! WebSocket) and routed backends (hosted handlers, gateway children).

use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::{json, Value};

use crate::jsonrpc;
use crate::state::AppState;

/// The first pause between attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Whether an append that failed with `e` may succeed if tried again.
pub(crate) fn retryable(e: &LogError) -> bool {
    matches!(e, LogError::Unavailable(_) | LogError::Storage(_))
}

/// Commits `messages` to `stream` of `session`: retried under one key
/// ([`AppState::commit_once`], fenced by this instance's lease with
/// `fenced`) while the failure is [`retryable`], until the reply deadline.
/// `calls` are the JSON-RPC ids of the calls the run answers (its
/// responses): when the run cannot be committed, an error response for each
/// is committed instead (see the module doc) before this returns the run's
/// error.
pub(crate) async fn commit(
    state: &AppState,
    session: &str,
    stream: StreamKey,
    messages: Vec<Bytes>,
    fenced: bool,
    calls: &[Value],
) -> Result<Seq, LogError> {
    let deadline = Instant::now() + state.config.reply_deadline;
    let key = AppState::once_key();
    let mut backoff = FIRST_BACKOFF;
    let failure = loop {
        match state
            .commit_once(session, stream, messages.clone(), key, fenced)
            .await
        {
            Ok(seq) => return Ok(seq),
            Err(e) if retryable(&e) && Instant::now() + backoff < deadline => {
                tracing::debug!(%session, ?stream, error = %e, "committing a call's answer again");
                if !pause(state, &mut backoff, MAX_BACKOFF).await {
                    break e;
                }
            }
            Err(e) => break e,
        }
    };
    if !calls.is_empty() && retryable(&failure) {
        tracing::error!(%session, ?stream, error = %failure, "could not commit a call's response within the reply deadline; answering it with an error");
        let errors: Vec<Bytes> = calls
            .iter()
            .map(|id| {
                let error = jsonrpc::error_with_data(
                    id,
                    jsonrpc::INTERNAL_ERROR,
                    format!(
                        "the server could not commit this call's response within {} s (its log was unavailable); it may be retried",
                        state.config.reply_deadline.as_secs()
                    ),
                    json!({"reason": "commit-failed"}),
                );
                Bytes::from(serde_json::to_vec(&error).unwrap_or_default())
            })
            .collect();
        let key = AppState::once_key();
        let mut backoff = FIRST_BACKOFF;
        loop {
            match state
                .commit_once(session, stream, errors.clone(), key, fenced)
                .await
            {
                Ok(_) => break,
                Err(e) if retryable(&e) => {
                    if !pause(state, &mut backoff, 5 * MAX_BACKOFF).await {
                        tracing::error!(%session, ?stream, "the server stops with a call left unanswered in the log; its owner is gone once it has stopped, and the call is ended as an orphan then");
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(%session, ?stream, error = %e, "a call's error response was not committed");
                    break;
                }
            }
        }
    }
    Err(failure)
}

/// Sleeps `backoff` (then doubles it, up to `max`); false if the server
/// began stopping meanwhile.
async fn pause(state: &AppState, backoff: &mut Duration, max: Duration) -> bool {
    let mut shutdown = state.shutdown.clone();
    if *shutdown.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(*backoff) => {}
        _ = crate::state::stopped(&mut shutdown) => return false,
    }
    *backoff = (*backoff * 2).min(max);
    true
}

/// The JSON-RPC ids of the responses in `run`: the calls it answers.
pub(crate) fn answered_calls(run: &[Bytes]) -> Vec<Value> {
    run.iter()
        .filter(|m| jsonrpc::is_response(m))
        .filter_map(|m| serde_json::from_slice::<Value>(m).ok())
        .filter_map(|v| v.get("id").filter(|id| !id.is_null()).cloned())
        .collect()
}
