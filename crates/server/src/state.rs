//! What every handler shares.

use std::sync::Arc;

use mcp_resume_log::{Log, LogError, Seq, StreamKey};
use tokio::sync::{watch, Mutex};

use crate::session::SessionRecord;
use crate::tools::ToolRegistry;
use crate::ServerConfig;

/// Shared state of one server: the log every connection reads, the tools,
/// the settings and the shutdown signal.
#[derive(Clone)]
pub struct AppState {
    /// The session log; the only source of what clients receive.
    pub log: Arc<dyn Log>,
    /// Static tools (the demo set, or the embedding application's).
    pub tools: Arc<ToolRegistry>,
    /// Settings.
    pub config: Arc<ServerConfig>,
    /// Flips to `true` when the server stops; streams end, sockets close with 1001.
    pub shutdown: watch::Receiver<bool>,
    /// Serialises read-modify-write of session records (rare: tool registration).
    pub(crate) record_lock: Arc<Mutex<()>>,
}

impl AppState {
    /// Appends one JSON-RPC message to a stream; the single door into the log for the server.
    pub async fn append(
        &self,
        session: &str,
        stream: StreamKey,
        message: &serde_json::Value,
    ) -> Result<Seq, LogError> {
        let bytes = bytes::Bytes::from(serde_json::to_vec(message).unwrap_or_default());
        self.log.append(session, stream, vec![bytes]).await
    }

    /// Reads the server's record of a session.
    pub async fn record(&self, session: &str) -> Result<SessionRecord, LogError> {
        Ok(SessionRecord::decode(
            &self.log.session(session).await?.meta,
        ))
    }

    /// Changes the session's record under a lock; `f` returns whether it changed anything.
    pub async fn update_record(
        &self,
        session: &str,
        f: impl FnOnce(&mut SessionRecord) -> bool,
    ) -> Result<bool, LogError> {
        let _guard = self.record_lock.lock().await;
        let mut rec = self.record(session).await?;
        if !f(&mut rec) {
            return Ok(false);
        }
        self.log.set_meta(session, rec.encode()).await?;
        Ok(true)
    }
}

/// Completes once the server is stopping (at once if it already is).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}
