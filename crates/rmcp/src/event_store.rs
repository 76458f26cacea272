//! rmcp's [`EventStore`] on an mcp-resume [`Log`]: an event is appended (and
//! so committed, in the backend's sense) before its id is returned (or, for
//! [`crate::DurableSessionManager`], before any client sees it), and a
//! replay is a range read of one stream followed by a tail of it from the
//! log's commit point, so events appended later by any instance arrive on the
//! same open stream with no gap and no duplicate at the seam.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use mcp_resume_log::{Bounds, Event, Log, LogError, Seq, Subscription};
use rmcp::{
    model::ServerJsonRpcMessage,
    transport::streamable_http_server::session::{
        EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
    },
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::{
    event_id::{parse_event_id, Location},
    owner::RequestOwner,
    queue::Queues,
    recent::Reading,
    StoreError,
};

/// How often an idle replay of a request stream checks that the process
/// running its call is alive.
const ORPHAN_CHECK: Duration = Duration::from_secs(2);
/// How many events one range read asks the log for.
const READ_BATCH: usize = 256;
/// Events buffered between the log and one SSE response.
const CHANNEL: usize = 64;
/// The key of the record stored for an event without a message (rmcp's
/// priming event, which only carries a retry hint).
const RETRY_KEY: &str = "rmcp-retry-ms";
/// How a priming record begins.
const PRIMING_PREFIX: &[u8] = b"{\"rmcp-retry-ms\"";

/// rmcp's event store, backed by any mcp-resume log (memory, disk, Redis).
///
/// Why a type of its own: rmcp ships the trait but no durable implementation;
/// this one gives every rmcp server the log's guarantees (commit before the id
/// is sent, ordered contiguous seqs, loud refusals of unusable cursors).
///
/// Events are numbered and queued in order and committed in batches, one
/// flush per stream (`crate::queue`); as rmcp's [`EventStore`] this store
/// returns an id once its event is committed. [`crate::DurableSessionManager`]
/// hands rmcp's session worker a queueing view instead, which returns at
/// once, and holds each request stream's events until the log has them.
#[derive(Clone)]
pub struct LogEventStore {
    log: Arc<dyn Log>,
    queues: Queues,
}

impl LogEventStore {
    /// A store writing to and replaying from `log`.
    pub fn new(log: Arc<dyn Log>) -> Self {
        Self {
            queues: Queues::new(log.clone()),
            log,
        }
    }

    /// The log underneath, for callers that share it (the session store).
    pub fn log(&self) -> &Arc<dyn Log> {
        &self.log
    }

    /// Appends one event and returns its id once the log has committed it.
    pub async fn append(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, StoreError> {
        let loc = Location::from_stream_id(stream_id)?;
        if loc.is_standalone() {
            // A session's standalone stream may have writers on several
            // instances, and this id is shown: the seq the log gives.
            let seq = self.queues.append_now(&loc, encode(event)?).await?;
            return Ok(loc.event_id(seq));
        }
        let (loc, seq) = self.enqueue(stream_id, event, false).await?;
        self.queues.committed(&loc, seq).await?;
        Ok(loc.event_id(seq))
    }

    /// Numbers and queues one event; its seq, before the commit. `owned`:
    /// a new request stream's owner will be given ([`LogEventStore::own`]).
    async fn enqueue(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
        owned: bool,
    ) -> Result<(Location, Seq), StoreError> {
        let loc = Location::from_stream_id(stream_id)?;
        let record = encode(event)?;
        let ends = !loc.is_standalone() && ends_request_stream(event);
        // Only a session stream's messages are kept for its readers
        // ([`Pump::recent`]): a call's events skip the shared cache's lock.
        let typed = event.message.as_ref().filter(|_| loc.is_standalone());
        let seq = self
            .queues
            .enqueue(&loc, record, typed, ends, owned)
            .await?;
        Ok((loc, seq))
    }

    /// Waits until event `seq` of `loc` is committed.
    pub(crate) async fn committed(&self, loc: &Location, seq: Seq) -> Result<(), StoreError> {
        self.queues.committed(loc, seq).await
    }

    /// Gives a new request stream its owner record (of MCP session
    /// `session`), committed with its creation; `false` where that has been
    /// committed already.
    pub(crate) fn own(&self, loc: &Location, session: &str, meta: Bytes) -> bool {
        self.queues.own(loc, session, meta)
    }

    /// Whether event `seq` of `loc` is known committed, without waiting.
    pub(crate) fn is_committed(&self, loc: &Location, seq: Seq) -> bool {
        self.queues.is_committed(loc, seq)
    }

    /// The committed head of `loc`'s queue, followed.
    pub(crate) fn follow(&self, loc: &Location) -> Option<crate::queue::Follow> {
        self.queues.follow(loc)
    }

    /// rmcp closed request stream `loc`: its queue goes once committed.
    pub(crate) fn retire(&self, loc: &Location) {
        self.queues.retire(loc)
    }

    /// Forgets the queues of `session`'s streams (the session closed).
    pub(crate) fn forget_session(&self, session: &str) {
        self.queues.forget_session(session);
    }

    /// The same store as rmcp's [`EventStore`] that answers once an event
    /// is queued, not committed: only for a session manager that shows no
    /// event before [`LogEventStore::committed`] says so.
    pub(crate) fn queueing(&self) -> Arc<dyn EventStore> {
        Arc::new(Queueing(self.clone()))
    }

    /// Every event after `last_event_id`, then every later one as it is
    /// committed. Refuses (never answers with an empty stream) an id this store
    /// did not issue, one ahead of the head, one already trimmed, or one of a
    /// session that ended.
    pub async fn replay(&self, last_event_id: &str) -> Result<EventStream, StoreError> {
        let (loc, cursor) = parse_event_id(last_event_id)?;
        let resume_err = |source| StoreError::Resume {
            id: last_event_id.to_owned(),
            source,
        };
        let (bounds, sub) = self
            .log
            .subscribe(&loc.session, loc.stream)
            .await
            .map_err(resume_err)?;
        admit(bounds, cursor).map_err(resume_err)?;
        let (tx, rx) = mpsc::channel(CHANNEL);
        let pump = Pump {
            log: self.log.clone(),
            recent: loc
                .is_standalone()
                .then(|| self.queues.recent.read(&loc.session)),
            loc,
            cursor,
            tx,
        };
        tokio::spawn(pump.run(bounds, sub));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

impl LogEventStore {
    /// Every retained event of session `session`'s standalone stream, then
    /// every later one: what a reader with no `Last-Event-ID` has not seen yet
    /// (as `mcp-resume serve` answers a GET without one).
    pub async fn standalone_from_floor(&self, session: &str) -> Result<EventStream, StoreError> {
        let loc = Location {
            session: session.to_owned(),
            stream: mcp_resume_log::StreamKey::Session,
        };
        let subscribed = match self.log.subscribe(&loc.session, loc.stream).await {
            Err(LogError::NoSession(_)) => {
                // No event and no stored state yet: the stream starts empty.
                match self.log.create_session(&loc.session, Bytes::new()).await {
                    Ok(()) | Err(LogError::SessionExists(_)) => {}
                    Err(source) => return Err(log_err("create_session", &loc, source)),
                }
                self.log.subscribe(&loc.session, loc.stream).await
            }
            other => other,
        };
        let (bounds, sub) = subscribed.map_err(|e| log_err("subscribe", &loc, e))?;
        let (tx, rx) = mpsc::channel(CHANNEL);
        let pump = Pump {
            log: self.log.clone(),
            recent: Some(self.queues.recent.read(&loc.session)),
            loc,
            cursor: bounds.floor.saturating_sub(1),
            tx,
        };
        tokio::spawn(pump.run(bounds, sub));
        Ok(Box::pin(ReceiverStream::new(rx)))
    }
}

/// [`LogEventStore`] answering rmcp once an event is queued.
struct Queueing(LogEventStore);

#[async_trait::async_trait]
impl EventStore for Queueing {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let (loc, seq) = self.0.enqueue(stream_id, event, true).await?;
        Ok(loc.event_id(seq))
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        Ok(self.0.replay(last_event_id).await?)
    }
}

#[async_trait::async_trait]
impl EventStore for LogEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        Ok(self.append(stream_id, event).await?)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        Ok(self.replay(last_event_id).await?)
    }
}

/// The log's own cursor check, as a [`LogError`].
fn admit(bounds: Bounds, cursor: Seq) -> Result<(), LogError> {
    match bounds.admit(cursor) {
        Ok(()) => Ok(()),
        Err(_) if cursor > bounds.head => Err(LogError::Ahead {
            cursor,
            head: bounds.head,
            floor: bounds.floor,
        }),
        Err(_) => Err(LogError::Truncated {
            cursor,
            head: bounds.head,
            floor: bounds.floor,
        }),
    }
}

fn log_err(op: &'static str, loc: &Location, source: LogError) -> StoreError {
    StoreError::Log {
        op,
        session: loc.session.clone(),
        source,
    }
}

/// The log record of an event: the JSON-RPC message verbatim (so the log stays
/// a log of JSON-RPC messages), or `{"rmcp-retry-ms": N}` for a priming event.
fn encode(event: &ServerSseMessage) -> Result<Bytes, StoreError> {
    let json = match &event.message {
        Some(message) => crate::outbound::to_vec(message.as_ref()),
        None => serde_json::to_vec(&serde_json::json!({
            RETRY_KEY: event.retry.map(|d| d.as_millis() as u64)
        })),
    };
    json.map(Bytes::from).map_err(StoreError::Encode)
}

/// Inverse of [`encode`], with the event's id.
fn decode(loc: &Location, ev: &Event) -> Result<ServerSseMessage, StoreError> {
    let id = loc.event_id(ev.seq);
    let bad = |source| StoreError::Decode {
        what: id.clone(),
        source,
    };
    // A priming record is `{"rmcp-retry-ms":N}` as `encode` writes it; any
    // other record is a JSON-RPC message, parsed once, straight into rmcp's
    // type (no `Value` in between: a reader's cost per event).
    if ev.message.starts_with(PRIMING_PREFIX) {
        let value: serde_json::Value = serde_json::from_slice(&ev.message).map_err(bad)?;
        if let Some(retry) = value.get(RETRY_KEY) {
            let mut priming = ServerSseMessage::priming(id.clone(), Duration::ZERO);
            priming.retry = retry.as_u64().map(Duration::from_millis);
            return Ok(priming);
        }
    }
    let message = crate::outbound::from_slice(&ev.message).map_err(bad)?;
    Ok(ServerSseMessage::new(id, message))
}

/// Whether `msg` ends its request stream (the response or error of the call).
fn ends_request_stream(msg: &ServerSseMessage) -> bool {
    matches!(
        msg.message.as_deref(),
        Some(ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
    )
}

/// Moves one stream's events from the log into one SSE response.
struct Pump {
    log: Arc<dyn Log>,
    /// The messages this process queued for the stream, typed: an event
    /// found there is not parsed back ([`crate::recent`]). Only a session
    /// stream's: a request stream is read live through the gate, which has
    /// rmcp's own messages, and through a pump only when resumed.
    recent: Option<Reading>,
    loc: Location,
    cursor: Seq,
    tx: mpsc::Sender<ServerSseMessage>,
}

/// Why a pump stopped: it only matters for the trace.
enum Stop {
    /// The request stream delivered its response.
    Done,
    /// The client went away.
    Gone,
    /// The log ended the stream (session ended, log closed, backend lost, a
    /// gap or an unreadable record): the response ends and the client resumes
    /// from the last id it got, which the log then admits or refuses.
    Ended(String),
}

impl Pump {
    async fn run(mut self, mut bounds: Bounds, mut sub: Subscription) {
        let stop = loop {
            if let Err(stop) = self.finished_already().await {
                break stop;
            }
            if let Err(stop) = self.replay_to(bounds.head).await {
                break stop;
            }
            match self.tail(&mut sub).await {
                Err(stop) => break stop,
                // Lagged: read from where we are and tail again.
                Ok(()) => match self.log.subscribe(&self.loc.session, self.loc.stream).await {
                    Ok((b, s)) => (bounds, sub) = (b, s),
                    Err(e) => break Stop::Ended(e.to_string()),
                },
            }
        };
        if let Stop::Ended(why) = stop {
            tracing::debug!(stream = %self.loc.session, cursor = self.cursor, %why, "replay ended");
        }
    }

    /// A request stream resumed after its response has nothing more to send.
    async fn finished_already(&mut self) -> Result<(), Stop> {
        if self.loc.is_standalone() || self.cursor == 0 {
            return Ok(());
        }
        let last = match self
            .log
            .read(&self.loc.session, self.loc.stream, self.cursor - 1, 1)
            .await
        {
            Ok(last) => last,
            // Damaged storage lost it: the replay goes on from the cursor.
            Err(LogError::DataLost { .. }) => Vec::new(),
            Err(e) => return Err(Stop::Ended(e.to_string())),
        };
        match last.first().map(|ev| decode(&self.loc, ev)) {
            Some(Ok(msg)) if ends_request_stream(&msg) => Err(Stop::Done),
            _ => Ok(()),
        }
    }

    /// Range reads from the cursor up to `head`.
    async fn replay_to(&mut self, head: Seq) -> Result<(), Stop> {
        while self.cursor < head {
            let events = self
                .log
                .read(&self.loc.session, self.loc.stream, self.cursor, READ_BATCH)
                .await
                .map_err(|e| Stop::Ended(e.to_string()))?;
            if events.is_empty() {
                return Err(Stop::Ended(format!(
                    "read after {} returned nothing",
                    self.cursor
                )));
            }
            for ev in events.iter().take_while(|e| e.seq <= head) {
                self.deliver(ev).await?;
            }
        }
        Ok(())
    }

    /// Follows the subscription; `Ok` when it lagged and must be renewed.
    async fn tail(&mut self, sub: &mut Subscription) -> Result<(), Stop> {
        let mut check = tokio::time::interval(ORPHAN_CHECK);
        loop {
            let next = tokio::select! {
                next = sub.next() => next,
                _ = self.tx.closed() => return Err(Stop::Gone),
                _ = check.tick(), if !self.loc.is_standalone() => {
                    self.answer_if_orphaned().await;
                    continue;
                }
            };
            match next {
                Ok(ev) if ev.seq <= self.cursor => continue,
                Ok(ev) => self.deliver(&ev).await?,
                Err(LogError::Lagged { .. }) => return Ok(()),
                Err(e) => return Err(Stop::Ended(e.to_string())),
            }
        }
    }

    /// Ends a request stream whose call died with its process: appends the
    /// JSON-RPC error that answers it (it then arrives through the tail).
    /// Only streams bound by [`crate::DurableSessionManager`] have an owner.
    async fn answer_if_orphaned(&self) {
        let Ok(info) = self.log.session(&self.loc.session).await else {
            return;
        };
        let Some(owner) = RequestOwner::parse(&info.meta) else {
            return;
        };
        if self.log.instance_alive(&owner.instance).await != Ok(false) {
            return;
        }
        // Another replay may do the same at once: the first error ends the
        // call for every reader (a reader stops at the first response).
        let _ = self
            .log
            .append(
                &self.loc.session,
                self.loc.stream,
                vec![owner.orphan_error()],
            )
            .await;
    }

    /// Sends the next event; refuses to skip a seq.
    async fn deliver(&mut self, ev: &Event) -> Result<(), Stop> {
        if ev.seq != self.cursor + 1 {
            return Err(Stop::Ended(format!(
                "gap: expected seq {} got {}",
                self.cursor + 1,
                ev.seq
            )));
        }
        let msg = match self
            .recent
            .as_ref()
            .and_then(|r| r.take(ev.seq, &ev.message))
        {
            Some(message) => {
                // rmcp's type is non-exhaustive: built from its constructor.
                let mut msg = ServerSseMessage::priming(self.loc.event_id(ev.seq), Duration::ZERO);
                msg.message = Some(message);
                msg.retry = None;
                msg
            }
            None => decode(&self.loc, ev).map_err(|e| Stop::Ended(e.to_string()))?,
        };
        let done = !self.loc.is_standalone() && ends_request_stream(&msg);
        self.tx.send(msg).await.map_err(|_| Stop::Gone)?;
        self.cursor = ev.seq;
        if done {
            return Err(Stop::Done);
        }
        Ok(())
    }
}
