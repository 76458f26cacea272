//! Handing a route's answers to the POSTs that wait for them: a JSON
//! answer, a call's request stream opened on its first message (lazily), or
//! the response committed to a stream; and the error a call gets when the
//! lease moved under it.

use std::sync::Mutex;
use std::time::Instant;

use mcp_resume_log::StreamKey;
use serde_json::{json, Value};

use super::streams;
use super::table::{Answer, Dest, Table};
use crate::backend::Message;
use crate::jsonrpc;
use crate::route::state::AppState;

/// The error that answers call `id` when the instance running it lost the
/// session's lease (`data.reason: "lease-lost"`).
pub(super) fn lease_lost_error(id: &Value) -> Value {
    jsonrpc::error_with_data(
        id,
        jsonrpc::INTERNAL_ERROR,
        "this instance lost the session's lease while this call ran (it was stalled, or the lease moved); it may be retried",
        json!({"reason": "lease-lost"}),
    )
}

/// An answer a POST awaits, held until the lease is known to hold.
pub(super) enum Handed {
    /// For a POST that reads JSON.
    Json(tokio::sync::oneshot::Sender<Message>, Message),
    /// For a lazy call's POST, still answered as JSON.
    Lazy(tokio::sync::oneshot::Sender<Answer>, Message),
}

impl Handed {
    /// The call's id, read from the answer.
    pub(super) fn id(&self) -> Value {
        let (Handed::Json(_, m) | Handed::Lazy(_, m)) = self;
        match m {
            Message::Value(v) => v.get("id").cloned(),
            Message::Text(text) => jsonrpc::answer_id(text),
        }
        .unwrap_or(Value::Null)
    }

    /// Hands the backend's answer over.
    pub(super) fn send_answer(self) {
        match self {
            Handed::Json(tx, m) => {
                let _ = tx.send(m);
            }
            Handed::Lazy(tx, m) => {
                let _ = tx.send(Answer::Json(m));
            }
        }
    }

    /// Hands `m` over in the answer's place.
    pub(super) fn send(self, m: Message) {
        match self {
            Handed::Json(tx, _) => Handed::Json(tx, m),
            Handed::Lazy(tx, _) => Handed::Lazy(tx, m),
        }
        .send_answer()
    }
}

/// Opens the request stream of lazy call `call` (its key), tried again
/// while the log is unavailable until the reply deadline, and tells the POST
/// that waits to read it; the stream its messages go to. If it cannot be
/// opened the call ends loudly instead: the POST gets the `commit-failed`
/// error as its answer, the call is [failed](Dest::Failed) (what its handler
/// sends later is dropped, never shown on another stream) and `None` says
/// the message is not committed.
pub(super) async fn open_lazy(
    state: &AppState,
    session: &str,
    table: &Mutex<Table>,
    call: &str,
) -> Option<StreamKey> {
    let id: Value = serde_json::from_str(call).unwrap_or(Value::Null);
    let deadline = Instant::now() + state.config.reply_deadline;
    match streams::open_call_stream(state, session, &id, deadline).await {
        Ok((k, head, sub)) => {
            let tx = table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .opened(call, k);
            if let Some(tx) = tx {
                // A POST that is gone leaves the stream resumable anyway.
                let _ = tx.send(Answer::Stream {
                    stream: k,
                    head,
                    sub,
                });
            }
            Some(k)
        }
        Err(e) => {
            tracing::error!(%session, error = %e, "could not open a call's request stream within the reply deadline; the call is answered with an error");
            let dest = table.lock().unwrap_or_else(|e| e.into_inner()).fail(&id);
            if let Some(Dest::Lazy(tx)) = dest {
                let failed = crate::route::reply::commit_failed(state, &id);
                let _ = tx.send(Answer::Json(Message::Value(failed)));
            }
            None
        }
    }
}

/// Delivers an answer the transport itself gives to a call: to the waiting
/// POST, or committed to its stream (`fenced` for a route under a lease).
pub(crate) async fn answer(
    state: &AppState,
    session: &str,
    dest: Dest,
    reply: Value,
    fenced: bool,
) {
    match dest {
        Dest::Json(tx) => {
            let _ = tx.send(Message::Value(reply));
        }
        Dest::Lazy(tx) => {
            let _ = tx.send(Answer::Json(Message::Value(reply)));
        }
        Dest::Stream(k) => {
            crate::route::reply::commit_response(state, session, k, &reply, fenced).await
        }
        // Answered with an error already.
        Dest::Failed => {}
    }
}
