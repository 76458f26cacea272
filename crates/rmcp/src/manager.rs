//! rmcp's in-memory [`LocalSessionManager`] with the two checks its event
//! store hook cannot make: rmcp hands `replay_events_after` only the
//! `Last-Event-ID`, not the session of the request, and names request streams
//! by a UUID unrelated to their session. This wrapper binds each request
//! stream to its session in the log before the client sees its first id, and
//! refuses a `Last-Event-ID` of another session's stream. A GET without
//! `Last-Event-ID` reads the standalone stream from the log's floor instead of
//! rmcp's in-memory channel.

use std::sync::Arc;

use futures_util::StreamExt;
use mcp_resume_log::Log;
use rmcp::{
    model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage},
    transport::{
        streamable_http_server::session::{
            local::{LocalSessionManager, LocalSessionManagerError},
            EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
        },
        WorkerTransport,
    },
};

use crate::{
    event_id::{parse_event_id, Location},
    gate::{Call, Gate},
    owner::RequestOwner,
    LogEventStore, StoreError,
};

/// Why the durable session manager refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// rmcp's local session manager failed.
    #[error("{0}")]
    Local(#[from] LocalSessionManagerError),
    /// The log store refused or failed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// rmcp's [`LocalSessionManager`] wired to a [`LogEventStore`], with the
/// session checks the store alone cannot make.
///
/// Why not `LocalSessionManager::with_event_store` alone: it works, but then a
/// `Last-Event-ID` from any session resumes that other session's stream.
pub struct DurableSessionManager {
    inner: LocalSessionManager,
    events: LogEventStore,
}

impl DurableSessionManager {
    /// A manager whose streams are stored in `log`.
    pub fn new(log: Arc<dyn Log>) -> Self {
        let events = LogEventStore::new(log);
        // rmcp's worker only queues (its store returns at once); every
        // stream this manager hands out shows an event once it is committed.
        let inner = LocalSessionManager::default().with_event_store(events.queueing());
        Self { inner, events }
    }

    /// Records in the log that request stream `loc` belongs to `session`,
    /// and that this process runs call `request_id`: with the stream's
    /// creation where it is not committed yet, else on its own.
    async fn bind(
        &self,
        loc: &Location,
        seq: mcp_resume_log::Seq,
        owner: &RequestOwner,
    ) -> Result<(), StoreError> {
        let record = owner.to_bytes();
        let with_creation = self.events.own(loc, &owner.session, record.clone());
        self.events.committed(loc, seq).await?;
        if with_creation {
            return Ok(());
        }
        self.events
            .log()
            .set_meta(&loc.session, record)
            .await
            .map_err(|source| StoreError::Log {
                op: "set_meta",
                session: loc.session.clone(),
                source,
            })
    }

    /// Checks that the stream of `last_event_id` belongs to `session`.
    async fn check_owner(
        &self,
        session: &SessionId,
        last_event_id: &str,
    ) -> Result<(), StoreError> {
        let (loc, _) = parse_event_id(last_event_id)?;
        let wrong = || StoreError::WrongSession {
            id: last_event_id.to_owned(),
            session: session.to_string(),
        };
        if loc.is_standalone() {
            return if loc.session == session.as_ref() {
                Ok(())
            } else {
                Err(wrong())
            };
        }
        match self.events.log().session(&loc.session).await {
            Ok(info)
                if RequestOwner::parse(&info.meta)
                    .is_some_and(|o| o.session == session.as_ref()) =>
            {
                Ok(())
            }
            Ok(_) => Err(wrong()),
            Err(source) => Err(StoreError::Resume {
                id: last_event_id.to_owned(),
                source,
            }),
        }
    }
}

impl SessionManager for DurableSessionManager {
    type Error = ManagerError;
    type Transport = WorkerTransport<
        rmcp::transport::streamable_http_server::session::local::LocalSessionWorker,
    >;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        // The id alone: the whole message written as a value to read it
        // cost a call on our stores more than its id is worth.
        let request_id = match &message {
            JsonRpcMessage::Request(r) => crate::outbound::id_value(&r.id),
            _ => serde_json::Value::Null,
        };
        let mut stream = Box::pin(self.inner.create_stream(id, message).await?);
        // The first event is rmcp's priming event, queued while the stream
        // was created (with `sse_retry` set, as by default): its stream is
        // bound to the session, in the commit that creates it, before the
        // client can see, and resume with, its id.
        let first = stream.next().await;
        let mut call = None;
        if let Some((loc, seq)) = first
            .as_ref()
            .and_then(|m| m.event_id.as_deref())
            .and_then(|id| parse_event_id(id).ok())
        {
            if loc.is_standalone() {
                self.events.committed(&loc, seq).await?;
            } else {
                let owner = RequestOwner {
                    session: id.to_string(),
                    instance: self.events.log().instance().to_owned(),
                    request_id,
                };
                // Followed before the bind: the queue is there until its
                // answer is committed, and its first commit waits for it.
                let follow = self.events.follow(&loc);
                self.bind(&loc, seq, &owner).await?;
                call = Some(Call { loc, owner, follow });
            }
        }
        let rest = Gate::new(stream, self.events.clone(), call);
        Ok(futures_util::stream::iter(first).chain(rest))
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.inner.close_session(id).await?;
        self.events.forget_session(id.as_ref());
        Ok(())
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        // Not rmcp's in-memory channel, which starts at "now" (what was sent
        // before this GET, or between a drop and a reconnect that has no
        // event id yet, is never delivered) and gives a second concurrent GET
        // a "shadow" stream that receives nothing: the log from its floor.
        if !self.inner.has_session(id).await? {
            return Err(LocalSessionManagerError::SessionNotFound(id.clone()).into());
        }
        Ok(self.events.standalone_from_floor(id.as_ref()).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<
        impl futures_util::Stream<Item = ServerSseMessage> + Send + Sync + 'static,
        Self::Error,
    > {
        self.check_owner(id, &last_event_id).await?;
        Ok(self.events.replay(&last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(self.inner.restore_session(id).await?)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        Some(Arc::new(self.events.clone()))
    }
}
