//! Answers to server requests that reach another instance.
//!
//! A client may POST its response to a server request (an elicitation, a
//! sampling call) to any instance, but the handler that awaits it runs on
//! one. The instance that receives an answer it did not ask for forwards it
//! through the log, the one thing every instance shares: it opens a request
//! stream whose record carries the answer (`{"answer": MESSAGE}`; nothing is
//! ever appended to it, and the orphan sweep leaves it alone). While a
//! session's route awaits answers, a task on its instance reads the records
//! of request streams opened since just before the request was committed,
//! and delivers the answers that are its own. The cost is paid only while a
//! server request is pending: one `request_streams` read per
//! [`POLL`], plus a record read per stream opened meanwhile.

use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq};
use serde_json::{json, Value};

use crate::state::AppState;

/// How often a route that awaits answers looks for forwarded ones.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// Forwards `answer` (a client's response to a server request this instance
/// did not send) to the instance that did, through the log.
pub(crate) async fn forward(
    state: &AppState,
    session: &str,
    answer: &Value,
) -> Result<(), LogError> {
    let meta = Bytes::from(json!({"answer": answer, "owner": state.log.instance()}).to_string());
    state.log.open_request_stream(session, meta).await?;
    Ok(())
}

/// The answer a request stream's record forwards, if it is one.
pub(crate) fn answer_of(meta: &[u8]) -> Option<Value> {
    let v: Value = serde_json::from_slice(meta).ok()?;
    v.get("answer").cloned()
}

/// Watches for answers forwarded to `session`'s route, from request stream
/// `seen + 1` on, until it awaits none (or the route goes).
pub(crate) async fn watch(state: AppState, session: String, mut seen: Seq) {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(route) = state.routes.peek(&session) else {
            return;
        };
        {
            let mut t = route.lock_table();
            if !t.asking() {
                t.watching = false;
                return;
            }
        }
        let n = match state.log.request_streams(&session).await {
            Ok(n) => n,
            Err(LogError::NoSession(_) | LogError::SessionEnded) => return,
            Err(e) => {
                tracing::debug!(%session, error = %e, "could not look for forwarded answers");
                continue;
            }
        };
        for r in seen + 1..=n {
            let meta = match state.log.request_meta(&session, r).await {
                Ok(m) => m,
                Err(_) => continue,
            };
            let Some(answer) = answer_of(&meta) else {
                continue;
            };
            if let Some(m) = route.client_response(answer) {
                if let Err(e) = route.deliver(m) {
                    tracing::warn!(%session, error = %e, "a forwarded answer was not delivered");
                }
            }
        }
        seen = n;
    }
}
