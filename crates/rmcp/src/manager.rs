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
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
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
        let with_creation = self.events.own(loc, record.clone());
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
        let request_id = serde_json::to_value(&message)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(serde_json::Value::Null);
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
                self.bind(&loc, seq, &owner).await?;
                let follow = self.events.follow(&loc);
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

/// How many events a request stream's gate reads ahead of the commit, so
/// rmcp's worker (which waits for room in the stream's small channel) is not
/// held by a commit in flight: the store's own bound.
const READ_AHEAD: usize = crate::queue::MAX_QUEUED as usize;

/// A request stream as rmcp's worker fills it (events numbered and queued,
/// not yet committed), shown to the client one event at a time as the log
/// commits it. A stream whose events the log did not commit ends there, and
/// the call is answered in the log with an error, so that the client's
/// resume from the last id it got ends too.
struct Gate<S> {
    inner: std::pin::Pin<Box<S>>,
    /// rmcp's stream has ended.
    drained: bool,
    events: LogEventStore,
    /// The call the stream carries, where its first event named it.
    call: Option<Call>,
    /// Read from rmcp, not yet shown, in order.
    held: std::collections::VecDeque<ServerSseMessage>,
    /// The wait for the first held event's commit. In a `Mutex` only so
    /// the stream is `Sync` as rmcp asks (never locked: `get_mut`).
    waiting: Option<std::sync::Mutex<CommitWait>>,
    /// An event was not committed: nothing after it is shown.
    ended: bool,
}

/// The call a request stream carries.
struct Call {
    loc: Location,
    owner: RequestOwner,
    /// Its queue's committed head, followed from the stream's opening (the
    /// queue leaves the map once the answer is committed).
    follow: Option<crate::queue::Follow>,
}

type CommitWait = futures_util::future::BoxFuture<'static, Result<(), String>>;

impl<S> Gate<S> {
    fn new(inner: std::pin::Pin<Box<S>>, events: LogEventStore, call: Option<Call>) -> Self {
        Self {
            inner,
            drained: false,
            events,
            call,
            held: Default::default(),
            waiting: None,
            ended: false,
        }
    }

    /// Whether `seq` of `loc` is committed, without waiting.
    fn has(&self, loc: &Location, seq: mcp_resume_log::Seq) -> bool {
        match &self.call {
            Some(Call {
                loc: own,
                follow: Some(f),
                ..
            }) if own == loc => f.has(seq),
            _ => self.events.is_committed(loc, seq),
        }
    }

    /// Waits for `seq` of `loc` to be committed.
    fn wait(&self, loc: Location, seq: mcp_resume_log::Seq) -> CommitWait {
        match &self.call {
            Some(Call {
                loc: own,
                follow: Some(f),
                ..
            }) if *own == loc => Box::pin(f.clone().wait(seq)),
            _ => {
                let events = self.events.clone();
                Box::pin(
                    async move { events.committed(&loc, seq).await.map_err(|e| e.to_string()) },
                )
            }
        }
    }

    /// The stream failed: answers the call in the log with an error (its
    /// readers stop at the first answer), so a resume does not wait for
    /// an answer that will never come.
    fn fail(&mut self, why: &str) {
        tracing::warn!(error = %why, "a request stream ends where the log did not commit it");
        self.ended = true;
        self.held.clear();
        if let Some(call) = &self.call {
            let log = self.events.log().clone();
            let loc = call.loc.clone();
            let error = call.owner.error(&format!(
                "the server could not commit this call's events ({why}); its result is lost (call again)"
            ));
            tokio::spawn(async move {
                // The log that refused the call's events may refuse this
                // too for a while: retried, with backoff, for about a minute.
                let mut pause = std::time::Duration::from_millis(100);
                for _ in 0..10 {
                    match log
                        .append(&loc.session, loc.stream, vec![error.clone()])
                        .await
                    {
                        Ok(_) => return,
                        Err(e) => {
                            tracing::debug!(stream = %loc.session, error = %e, "answering a failed call in the log")
                        }
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(15));
                }
                tracing::warn!(stream = %loc.session, "could not answer a failed call in the log");
            });
        }
    }
}

impl<S> Drop for Gate<S> {
    fn drop(&mut self) {
        // rmcp closed the stream (answered, cancelled, its session ended):
        // nothing more is written to it, and its queue can go. A client
        // that went away while rmcp still writes keeps the queue.
        if self.drained {
            if let Some(call) = &self.call {
                self.events.retire(&call.loc);
            }
        }
    }
}

impl<S> futures_util::Stream for Gate<S>
where
    S: futures_util::Stream<Item = ServerSseMessage> + Send,
{
    type Item = ServerSseMessage;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<ServerSseMessage>> {
        use std::task::Poll;
        let this = self.get_mut();
        if this.ended {
            return Poll::Ready(None);
        }
        while !this.drained && this.held.len() < READ_AHEAD {
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(m)) => this.held.push_back(m),
                Poll::Ready(None) => this.drained = true,
                Poll::Pending => break,
            }
        }
        if this.waiting.is_none() {
            let Some(front) = this.held.front() else {
                return if this.drained {
                    Poll::Ready(None)
                } else {
                    Poll::Pending
                };
            };
            let Some((loc, seq)) = front
                .event_id
                .as_deref()
                .and_then(|id| parse_event_id(id).ok())
            else {
                return Poll::Ready(this.held.pop_front());
            };
            if this.has(&loc, seq) {
                return Poll::Ready(this.held.pop_front());
            }
            this.waiting = Some(std::sync::Mutex::new(this.wait(loc, seq)));
        }
        let wait = this.waiting.as_mut().expect("set above");
        let wait = wait.get_mut().unwrap_or_else(|e| e.into_inner());
        let outcome = futures_util::ready!(wait.as_mut().poll(cx));
        this.waiting = None;
        match outcome {
            Ok(()) => Poll::Ready(this.held.pop_front()),
            Err(why) => {
                this.fail(&why);
                Poll::Ready(None)
            }
        }
    }
}
