//! rmcp's [`SessionStore`] on an mcp-resume [`Log`]: the `initialize` params
//! are the log session's metadata, so any instance sharing the log can
//! restore the session by replaying `initialize`.

use std::sync::Arc;

use bytes::Bytes;
use mcp_resume_log::{Log, LogError};
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use serde::{Deserialize, Serialize};

use crate::StoreError;

/// The record kept as the log session's metadata. Wrapped so that a log
/// session made by the event store before the handshake was stored (empty
/// metadata) reads as "no state" rather than as garbage.
#[derive(Serialize, Deserialize)]
struct Record {
    rmcp_session_state: SessionState,
}

/// rmcp's session store, backed by any mcp-resume log.
///
/// Why: rmcp restores a session on an instance that never saw it from this
/// state alone; keeping it in the same log as the events means one backend,
/// one lifetime (ending the session ends both) and the log's durability.
#[derive(Clone)]
pub struct LogSessionStore {
    log: Arc<dyn Log>,
}

impl LogSessionStore {
    /// A store keeping session state in `log`.
    pub fn new(log: Arc<dyn Log>) -> Self {
        Self { log }
    }

    /// The state stored for `session_id`, `None` for an unknown or ended
    /// session or one whose handshake was never stored.
    pub async fn load_state(&self, session_id: &str) -> Result<Option<SessionState>, StoreError> {
        let info = match self.log.session(session_id).await {
            Ok(info) => info,
            Err(LogError::NoSession(_)) => return Ok(None),
            Err(source) => return Err(log_err("session", session_id, source)),
        };
        if info.meta.is_empty() {
            return Ok(None);
        }
        let record: Record =
            serde_json::from_slice(&info.meta).map_err(|source| StoreError::Decode {
                what: format!("session state of {session_id:?}"),
                source,
            })?;
        Ok(Some(record.rmcp_session_state))
    }

    /// Stores the state durably: creates the log session, or sets its
    /// metadata if the event store already created it. An ended session is
    /// not re-created: that is an error.
    pub async fn store_state(
        &self,
        session_id: &str,
        state: &SessionState,
    ) -> Result<(), StoreError> {
        let meta = serde_json::to_vec(&Record {
            rmcp_session_state: state.clone(),
        })
        .map(Bytes::from)
        .map_err(StoreError::Encode)?;
        match self.log.create_session(session_id, meta.clone()).await {
            Ok(()) => Ok(()),
            Err(LogError::SessionExists(_)) => self
                .log
                .set_meta(session_id, meta)
                .await
                .map_err(|e| log_err("set_meta", session_id, e)),
            Err(source) => Err(log_err("create_session", session_id, source)),
        }
    }

    /// Ends the session in the log: its state and standalone stream go, its
    /// open replays end, and its id is never used again.
    pub async fn delete_state(&self, session_id: &str) -> Result<(), StoreError> {
        match self.log.end_session(session_id).await {
            Ok(()) | Err(LogError::NoSession(_)) => Ok(()),
            Err(source) => Err(log_err("end_session", session_id, source)),
        }
    }
}

#[async_trait::async_trait]
impl SessionStore for LogSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        Ok(self.load_state(session_id).await?)
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(self.store_state(session_id, state).await?)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        Ok(self.delete_state(session_id).await?)
    }
}

fn log_err(op: &'static str, session: &str, source: LogError) -> StoreError {
    StoreError::Log {
        op,
        session: session.to_owned(),
        source,
    }
}
