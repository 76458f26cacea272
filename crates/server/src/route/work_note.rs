//! A built-in tool's background work, noted in the log for as long as it
//! runs, so that a promise it made can only end kept or said broken.
//!
//! `ToolContext::spawn` opens the note before the work starts (and so
//! before the call that promised it answers): a request stream whose record
//! names this instance. The work then ends one of three ways:
//!
//! - it finished: the note gets its closing event ([`done_event`], a
//!   response to no call, so a sweep reads it as answered) and is retired;
//! - it failed (its sends refused past their retries): this instance tells
//!   the session's client on the session stream ([`lost_event`], `reason:
//!   work-lost`), then closes the note;
//! - its instance died (kill -9, or cut off past the shutdown grace): the
//!   note stays open, and the orphan sweep of another instance (or of this
//!   data directory's next process) tells the client
//!   (`route::orphans::end_if_orphaned`).
//!
//! Every "work-lost" of one note is committed under one key
//! ([`crate::route::orphans::orphan_key`]): the instance itself and a sweep
//! racing it commit one.

use std::sync::Arc;

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, StreamKey};
use serde_json::json;
use tokio::sync::watch;

use crate::route::orphans::orphan_key;

/// The record of a request stream that notes background work `instance`
/// runs for a session.
pub(crate) fn record(instance: &str) -> Bytes {
    Bytes::from(json!({"work": "background", "owner": instance}).to_string())
}

/// The event that closes a note: a response (to no call), so the sweep
/// reads the note as answered.
fn done_event() -> Bytes {
    Bytes::from_static(br#"{"jsonrpc":"2.0","id":null,"result":{"work":"done"}}"#)
}

/// What the session's client is told when background work it was promised
/// ended without being done: `owner` ran it, `why` says how it ended.
pub(crate) fn lost_event(owner: &str, why: &str) -> Bytes {
    Bytes::from(
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {
            "level": "error", "logger": "mcp-resume", "data": {
                "reason": "work-lost",
                "instance": owner,
                "message": format!("a tool's background work for this session ended before it finished ({why}): what that work had promised may be incomplete"),
            }}})
        .to_string(),
    )
}

/// Why work whose instance died is lost, as [`lost_event`] says it.
pub(crate) const DIED: &str =
    "the server instance running it stopped: killed, or cut off past its shutdown grace";

/// One open note of background work.
pub(crate) struct WorkNote {
    log: Arc<dyn Log>,
    session: String,
    r: u64,
}

impl WorkNote {
    /// Opens the note of work this instance is about to run for `session`.
    /// Before the work is promised: a note the log refuses fails the call
    /// that would have promised it, loudly, with nothing promised.
    pub(crate) async fn open(log: Arc<dyn Log>, session: &str) -> Result<Self, LogError> {
        // The transport's own record of work a call it admitted started:
        // never refused by the call limit.
        let r = log
            .open_request_stream(session, record(log.instance()), u64::MAX)
            .await?;
        Ok(Self {
            log,
            session: session.to_owned(),
            r,
        })
    }

    /// The work finished: the note is closed and retired, trying again
    /// while the log is away (until the server stops; a note left open
    /// then is swept, and reported, once this instance is gone).
    pub(crate) async fn done(self, shutdown: &watch::Receiver<bool>) {
        self.close(shutdown).await;
    }

    /// The work ended without keeping its promise (`why`): the session's
    /// client is told on its session stream, then the note is closed. Tried
    /// again while the log is away, as [`WorkNote::done`].
    pub(crate) async fn lost(self, why: &str, shutdown: &watch::Receiver<bool>) {
        let event = lost_event(self.log.instance(), why);
        let key = orphan_key(&self.session, self.r);
        let told = crate::retry::retrying(Some(shutdown), None, || {
            self.log
                .append_once(&self.session, StreamKey::Session, vec![event.clone()], key)
        })
        .await;
        match told {
            Ok(_) => {
                tracing::warn!(session = %self.session, %why, "told a session's client that background work it was promised ended unfinished")
            }
            Err(LogError::NoSession(_) | LogError::SessionEnded) => return,
            Err(e) => {
                // Left open: the sweep tells the client once this instance is gone.
                tracing::warn!(session = %self.session, error = %e, %why, "background work ended unfinished and its client could not be told yet");
                return;
            }
        }
        self.close(shutdown).await;
    }

    async fn close(self, shutdown: &watch::Receiver<bool>) {
        let stream = StreamKey::Request(self.r);
        // Under one key: an attempt whose outcome was unknown, tried again,
        // commits one closing event.
        let key = crate::route::state::AppState::once_key();
        let closed = crate::retry::retrying(Some(shutdown), None, || {
            self.log
                .append_once(&self.session, stream, vec![done_event()], key)
        })
        .await;
        match closed {
            Ok(_) => {}
            Err(LogError::NoSession(_) | LogError::SessionEnded) => return,
            // Retired meanwhile by a sweep that took this instance for dead
            // (a stall past its heartbeat): the client was told it was lost.
            Err(LogError::NoStream { .. } | LogError::Truncated { .. }) => {
                tracing::info!(session = %self.session, "background work ended after another instance, taking this one for dead, had reported it lost");
                return;
            }
            Err(e) => {
                tracing::warn!(session = %self.session, error = %e, "could not close a background work's note; it is reported lost once this instance is gone");
                return;
            }
        }
        if let Err(e) = self.log.retire_request_stream(&self.session, self.r).await {
            tracing::debug!(session = %self.session, error = %e, "could not retire a background work's note");
        }
    }
}
