//! What a running tool may do besides returning. Everything it sends goes
//! through its session's route ([`Outbox`]), in the order it was sent, like
//! anything a backend sends.

use std::future::Future;
use std::sync::Arc;

use mcp_resume_log::Seq;
use serde_json::{json, Value};

use super::backend::Shared;
use super::ToolError;
use crate::backend::{Outbound, Outbox};
use crate::jsonrpc;

/// What a running tool may do besides returning: notify, report progress,
/// change the session's tool list, keep working in the background.
#[derive(Clone)]
pub struct ToolContext {
    /// What every call of the session shares, behind one reference count:
    /// a context is made, and cloned for its handler, on every call.
    pub(super) of: Arc<SessionTools>,
    pub(super) progress_token: Option<Value>,
    /// The call this context serves: its notifications travel with it.
    pub(super) call: Value,
}

/// What the calls of one session share.
pub(super) struct SessionTools {
    pub(super) shared: Arc<Shared>,
    pub(super) session: String,
    pub(super) outbox: Outbox,
    /// Cancelled when the session's route closes (the session ended, the
    /// server stops): the tool's work, background included, stops then.
    pub(super) cancel: tokio_util::sync::CancellationToken,
}

impl ToolContext {
    /// The calling session.
    pub fn session_id(&self) -> &str {
        &self.of.session
    }

    /// Sends one notification (a JSON-RPC message without an id), queued
    /// in order behind what the tool sent before: it resolves once queued
    /// (waiting only for room, at most 1,024 uncommitted per session), never
    /// for its commit, and readers see it once committed. Progress and
    /// cancellations are routed with the call (see [`ToolContext::progress`]);
    /// any other method goes to the session stream. For a tool that sends
    /// many: no fsync per message.
    pub async fn notify(&self, notification: Value) -> Result<(), ToolError> {
        let method = notification.get("method").and_then(Value::as_str);
        if matches!(
            method,
            Some("notifications/progress" | "notifications/cancelled")
        ) {
            let out = Outbound {
                message: notification,
                related: Some(self.call.clone()),
            };
            return Ok(self.of.outbox.send(out).await?);
        }
        let bytes = bytes::Bytes::from(serde_json::to_vec(&notification).unwrap_or_default());
        Ok(self.of.outbox.send_session_notification(bytes).await?)
    }

    /// Appends notifications to the session stream, committed before this returns.
    pub async fn notify_session(&self, notifications: Vec<Value>) -> Result<Seq, ToolError> {
        let msgs = notifications
            .iter()
            .map(|n| bytes::Bytes::from(serde_json::to_vec(n).unwrap_or_default()))
            .collect();
        self.notify_session_encoded(msgs).await
    }

    /// As [`ToolContext::notify_session`], for messages already encoded as
    /// JSON text (a hot loop need not build and serialise a `Value` each time).
    /// Each must be one JSON-RPC message.
    pub async fn notify_session_encoded(
        &self,
        messages: Vec<bytes::Bytes>,
    ) -> Result<Seq, ToolError> {
        Ok(self.of.outbox.commit_session(messages, None).await?)
    }

    /// [`ToolContext::notify_session_encoded`] for a batch that may be sent
    /// again after an error: committed at most once per `key`
    /// ([`EventLog::append_once`](mcp_resume_log::EventLog::append_once)).
    pub async fn notify_session_once(
        &self,
        messages: Vec<bytes::Bytes>,
        key: u64,
    ) -> Result<Seq, ToolError> {
        Ok(self.of.outbox.commit_session(messages, Some(key)).await?)
    }

    /// Reports progress on the call's own stream (its request stream once
    /// it has one; the session stream for a call answered as JSON); a no-op
    /// without a `progressToken`. Queued in order behind what the tool sent
    /// before, like every send; it does not wait for the commit.
    pub async fn progress(&self, progress: u64, total: Option<u64>) -> Result<(), ToolError> {
        let Some(token) = &self.progress_token else {
            return Ok(());
        };
        let mut params = json!({"progressToken": token, "progress": progress});
        if let Some(t) = total {
            params["total"] = json!(t);
        }
        let message = jsonrpc::notification("notifications/progress", params);
        let related = Some(self.call.clone());
        Ok(self.of.outbox.send(Outbound { message, related }).await?)
    }

    /// Adds (`true`) or removes a per-session tool and, when the list
    /// changed, emits `notifications/tools/list_changed`. Returns whether it changed.
    pub async fn set_session_tool(&self, name: &str, present: bool) -> Result<bool, ToolError> {
        let max = self.of.shared.config.max_session_tools;
        let mut full = false;
        let changed = self
            .of
            .shared
            .update_record(&self.of.session, |rec| {
                let has = rec.dynamic_tools.iter().any(|t| t == name);
                match (has, present) {
                    (false, true) if rec.dynamic_tools.len() >= max => {
                        full = true;
                        return false;
                    }
                    (false, true) => rec.dynamic_tools.push(name.to_owned()),
                    (true, false) => rec.dynamic_tools.retain(|t| t != name),
                    _ => return false,
                }
                true
            })
            .await?;
        if full {
            return Err(ToolError::InvalidParams(format!(
                "a session may register at most {max} tools; unregister one first"
            )));
        }
        if changed {
            self.notify_session(vec![jsonrpc::notification(
                "notifications/tools/list_changed",
                json!({}),
            )])
            .await?;
        }
        Ok(changed)
    }

    /// Runs `work` in the background until it ends, the session ends (or
    /// its route closes) or the server stops. A session runs at most
    /// [`ServerConfig::max_background_per_session`](crate::ServerConfig) such
    /// tasks at once; past that this refuses (`InvalidParams`, so the caller
    /// sees why) instead of letting one session grow without bound.
    ///
    /// The work is noted in the log before it starts, so call this before
    /// promising what it will do: a promise then ends kept or said broken.
    /// The session's client is told (`notifications/message`, `data.reason:
    /// work-lost`) when `work` returns an error, and, by another instance's
    /// sweep, when this process dies (kill -9, or cut off past the shutdown
    /// grace) before the work ends. A log that refuses the note fails this,
    /// and the call with it, with nothing promised.
    pub async fn spawn<F>(&self, work: F) -> Result<(), ToolError>
    where
        F: Future<Output = Result<(), ToolError>> + Send + 'static,
    {
        let max = self.of.shared.config.max_background_per_session;
        {
            let mut running = self.of.shared.background();
            let n = running.entry(self.of.session.clone()).or_default();
            if *n >= max {
                return Err(ToolError::InvalidParams(format!(
                    "this session already runs {max} background tasks; wait for one to finish"
                )));
            }
            *n += 1;
        }
        let slot = BackgroundSlot {
            shared: self.of.shared.clone(),
            session: self.of.session.clone(),
        };
        let note =
            crate::route::work_note::WorkNote::open(self.of.shared.log.clone(), &self.of.session)
                .await?;
        let shutdown = self.of.shared.shutdown.clone();
        let cancel = self.of.cancel.clone();
        self.of.shared.tasks.spawn(async move {
            let mut stop = shutdown.clone();
            tokio::select! {
                ended = work => match ended {
                    Ok(()) => note.done(&shutdown).await,
                    Err(e) => note.lost(&e.to_string(), &shutdown).await,
                },
                // Cut off past the grace: the note stays, and is reported
                // by the sweep once this instance is gone.
                _ = crate::route::state::stopped(&mut stop) => {}
                // The session ended (its route closed): nobody to tell. A
                // route closed by the server stopping is a cut, as above.
                _ = cancel.cancelled() => {
                    if !*shutdown.borrow() {
                        note.done(&shutdown).await;
                    }
                }
            }
            drop(slot);
        });
        Ok(())
    }
}

/// Frees a session's background slot when its task ends, however it ends.
struct BackgroundSlot {
    shared: Arc<Shared>,
    session: String,
}

impl Drop for BackgroundSlot {
    fn drop(&mut self) {
        let mut running = self.shared.background();
        if let Some(n) = running.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.session);
            }
        }
    }
}
