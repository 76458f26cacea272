//! A request stream of rmcp's, shown as the log commits it: rmcp's worker
//! numbers and queues its events (`crate::queue`) and writes them to the
//! stream at once; the gate reads ahead and holds each event until the log
//! has it, and ends the stream, answering the call in the log with an error,
//! where the log refused it.

use rmcp::transport::streamable_http_server::session::ServerSseMessage;

use crate::{
    event_id::{parse_event_id, Location},
    owner::RequestOwner,
    queue::Follow,
    LogEventStore,
};

/// How many events a request stream's gate reads ahead of the commit, so
/// rmcp's worker (which waits for room in the stream's small channel) is not
/// held by a commit in flight: the store's own bound.
const READ_AHEAD: usize = crate::queue::MAX_QUEUED as usize;

/// A request stream as rmcp's worker fills it (events numbered and queued,
/// not yet committed), shown to the client one event at a time as the log
/// commits it. A stream whose events the log did not commit ends there, and
/// the call is answered in the log with an error, so that the client's
/// resume from the last id it got ends too.
pub(crate) struct Gate<S> {
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
pub(crate) struct Call {
    pub(crate) loc: Location,
    pub(crate) owner: RequestOwner,
    /// Its queue's committed head, followed from the stream's opening (the
    /// queue leaves the map once the answer is committed).
    pub(crate) follow: Option<Follow>,
}

type CommitWait = futures_util::future::BoxFuture<'static, Result<(), String>>;

impl<S> Gate<S> {
    pub(crate) fn new(
        inner: std::pin::Pin<Box<S>>,
        events: LogEventStore,
        call: Option<Call>,
    ) -> Self {
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
