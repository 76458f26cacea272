//! The ordered commit queue behind [`crate::LogEventStore`]: an event is
//! numbered and queued when rmcp stores it, and one flush per stream commits
//! whatever is queued in one append, so a handler that sends a thousand
//! notifications waits for room in the queue, never for a thousand fsyncs.
//!
//! The number is the seq the log gives the event: a request stream has one
//! writer (the rmcp session worker that runs its call), which the queue
//! numbers from 1, and every commit checks that the log put the batch
//! exactly where it was numbered. Where it did not (another writer), the
//! stream fails, and so does every later store to it: a number handed out is
//! never shown on another event. A session's standalone stream may have
//! writers on several instances (a session restored elsewhere); its numbers
//! are never shown (its readers read the log, `crate::DurableSessionManager`),
//! so where the log put a batch elsewhere the queue numbers on from there.
//!
//! Numbering is not showing: a reader sees an event only once
//! [`Queues::committed`] says the log has it (the log's own subscriptions
//! for the session stream, the request-stream gate of
//! [`crate::DurableSessionManager`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, Seq};
use tokio::sync::{watch, Notify};

use crate::event_id::Location;
use crate::recent::Recent;
use crate::StoreError;

mod follow;
mod guard;
use follow::Committed;
pub(crate) use follow::Follow;
use rmcp::model::ServerJsonRpcMessage;

/// How many events of one stream may be queued and not yet committed
/// before a store waits for room (the back-pressure on a handler).
pub(crate) const MAX_QUEUED: u64 = 1024;

/// How long a new request stream's first commit waits for its owner record
/// ([`Queues::own`]), which its session manager gives as soon as it reads
/// the stream's first event: past this it commits without it, and the owner
/// is recorded after.
const OWNER_WAIT: Duration = Duration::from_millis(100);

/// Every stream with events queued or numbered in this process.
#[derive(Clone)]
pub(crate) struct Queues {
    log: Arc<dyn Log>,
    map: Arc<Mutex<HashMap<String, Arc<Queue>>>>,
    /// The request streams of sessions that closed, when they were
    /// forgotten: rmcp's worker may still store to one after the close, and
    /// a new queue would number it from 1 again ([`guard::Closed`]).
    closed: Arc<guard::Closed>,
    /// The typed messages of the newest events, for streams with a reader.
    pub(crate) recent: Arc<Recent>,
}

/// One stream's queue.
struct Queue {
    loc: Location,
    state: Mutex<State>,
    committed: watch::Sender<Committed>,
    /// Rung when the owner record is given.
    owned: Notify,
}

/// What is queued and how it is numbered.
struct State {
    /// The seq the next queued event gets.
    next: Seq,
    /// Queued, not yet handed to the log, in order.
    pending: Vec<Bytes>,
    /// A flush task is running.
    flushing: bool,
    /// The stream's log session may not exist yet: the first commit
    /// creates it.
    create: bool,
    /// A request stream's response is queued: nothing follows it, and the
    /// queue goes once it is committed.
    ended: bool,
    /// The record the stream's log session is created with.
    meta: Bytes,
    /// The first commit waits (at most [`OWNER_WAIT`]) for [`Queues::own`].
    awaits_owner: bool,
    /// The first batch has gone to the log: the creation is decided.
    started: bool,
    /// The stream failed (the reason is on the watch): nothing more is
    /// queued.
    failed: bool,
    /// The MCP session a request stream belongs to, once given
    /// ([`Queues::own`]): its queue goes when that session closes.
    session: Option<String>,
}

impl Queues {
    /// Queues of streams in `log`.
    pub(crate) fn new(log: Arc<dyn Log>) -> Self {
        Self {
            log,
            map: Arc::default(),
            closed: Arc::default(),
            recent: Arc::default(),
        }
    }

    /// Numbers `record` as the next event of `loc` and queues it; returns
    /// its seq without waiting for the commit (only, past [`MAX_QUEUED`]
    /// uncommitted events, for room). `typed` is the message `record`
    /// encodes, kept for the stream's readers ([`Recent`]). `ends` marks a
    /// request stream's last event; `owned`, that a new request stream's
    /// owner will be given ([`Queues::own`]) for its creation.
    pub(crate) async fn enqueue(
        &self,
        loc: &Location,
        record: Bytes,
        typed: Option<&Arc<ServerJsonRpcMessage>>,
        ends: bool,
        owned: bool,
    ) -> Result<Seq, StoreError> {
        let queue = self.queue(loc, owned).await?;
        let mut watch = queue.committed.subscribe();
        let mut record = Some(record);
        loop {
            let head = {
                let c = watch.borrow_and_update();
                if let Some(why) = &c.failed {
                    return Err(failed(loc, why));
                }
                c.head
            };
            let start = {
                let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.failed {
                    drop(st);
                    let why = watch.borrow().failed.clone().unwrap_or_default();
                    return Err(failed(loc, &why));
                }
                if st.next - 1 - head < MAX_QUEUED {
                    let seq = st.next;
                    st.next += 1;
                    if let (Some(m), Some(r)) = (typed, &record) {
                        // Under the state lock: kept in the order numbered.
                        self.recent.keep(&loc.session, seq, r, m);
                    }
                    st.pending.extend(record.take());
                    st.ended |= ends;
                    let start = !st.flushing;
                    st.flushing = true;
                    Some((seq, start))
                } else {
                    None
                }
            };
            match start {
                Some((seq, start)) => {
                    if start {
                        tokio::spawn(self.clone().flush(queue));
                    }
                    return Ok(seq);
                }
                // Full: wait for a commit (or the failure) and look again.
                None => {
                    if watch.changed().await.is_err() {
                        return Err(failed(loc, "the queue was dropped"));
                    }
                }
            }
        }
    }

    /// Waits until event `seq` of `loc` is committed; an error where it
    /// never will be. A request stream with no queue here has nothing in
    /// flight (its queue goes once all it held is committed): the log's head
    /// answers. A reader of many events follows the queue instead
    /// ([`Queues::follow`]).
    pub(crate) async fn committed(&self, loc: &Location, seq: Seq) -> Result<(), StoreError> {
        let Some(follow) = self.follow(loc) else {
            let bounds = self
                .log
                .bounds(&loc.session, loc.stream)
                .await
                .map_err(|e| log_err("bounds", loc, e))?;
            return if bounds.head >= seq {
                Ok(())
            } else {
                Err(failed(loc, &format!("event {seq} was never committed")))
            };
        };
        follow.wait(seq).await.map_err(|why| failed(loc, &why))
    }

    /// Gives a new request stream the record its log session is created
    /// with (on the disk log in the same commit as its first events; on
    /// memory and Redis just before them); `false` where its first commit
    /// has already gone (the caller records it itself). The stream belongs
    /// to MCP session `session` from now on ([`Queues::forget_session`]).
    pub(crate) fn own(&self, loc: &Location, session: &str, meta: Bytes) -> bool {
        let Some(queue) = self.get(loc) else {
            return false;
        };
        let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
        st.session = Some(session.to_owned());
        if st.started || !st.create {
            return false;
        }
        st.meta = meta;
        st.awaits_owner = false;
        drop(st);
        queue.owned.notify_one();
        true
    }

    /// The stream's writer is done with it (rmcp closed a request stream:
    /// answered, cancelled, or its session ended): its queue goes once what
    /// it holds is committed.
    pub(crate) fn retire(&self, loc: &Location) {
        let Some(queue) = self.get(loc) else {
            return;
        };
        let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
        st.ended = true;
        let idle = !st.flushing;
        drop(st);
        if idle {
            self.remove(&queue);
        }
    }

    /// The committed head of `loc` as its queue publishes it, for a reader
    /// that waits on many of its events (none where no queue is here).
    pub(crate) fn follow(&self, loc: &Location) -> Option<Follow> {
        self.get(loc).map(|q| Follow(q.committed.subscribe()))
    }

    /// Whether event `seq` of `loc` is committed as far as its queue here
    /// knows (`false` where there is none: ask [`Queues::committed`]).
    pub(crate) fn is_committed(&self, loc: &Location, seq: Seq) -> bool {
        self.get(loc)
            .is_some_and(|q| q.committed.borrow().head >= seq)
    }

    /// Forgets the queues of every stream of MCP session `session` (it
    /// closed): its standalone stream's, and those of its calls whose
    /// client went away and whose handler was cancelled before it answered
    /// (rmcp never closes their streams, so they were never retired). What
    /// they still hold is committed by their flushes.
    pub(crate) fn forget_session(&self, session: &str) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.remove(session);
        let mut gone = Vec::new();
        map.retain(|name, q| {
            let st = q.state.lock().unwrap_or_else(|e| e.into_inner());
            let keep = st.session.as_deref() != Some(session);
            if !keep {
                gone.push(name.clone());
            }
            keep
        });
        drop(map);
        self.closed.add(gone);
    }

    fn get(&self, loc: &Location) -> Option<Arc<Queue>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&loc.session).cloned()
    }

    /// The queue of `loc`, made on its first event: a request stream is new
    /// (rmcp names each with a fresh UUID) and starts at 1; a session stream
    /// goes on from the log's head.
    async fn queue(&self, loc: &Location, owned: bool) -> Result<Arc<Queue>, StoreError> {
        if let Some(q) = self.get(loc) {
            return Ok(q);
        }
        let (head, create) = if loc.is_standalone() {
            match self.log.bounds(&loc.session, loc.stream).await {
                Ok(b) => (b.head, false),
                Err(LogError::NoSession(_)) => (0, true),
                Err(e) => return Err(log_err("bounds", loc, e)),
            }
        } else if self.closed.has(&loc.session) {
            return Err(failed(loc, "its session closed"));
        } else {
            (0, true)
        };
        let made = Arc::new(Queue {
            loc: loc.clone(),
            state: Mutex::new(State {
                next: head + 1,
                pending: Vec::new(),
                flushing: false,
                create,
                ended: false,
                meta: Bytes::new(),
                awaits_owner: owned && create && !loc.is_standalone(),
                started: false,
                failed: false,
                session: None,
            }),
            committed: watch::Sender::new(Committed { head, failed: None }),
            owned: Notify::new(),
        });
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        Ok(map.entry(loc.session.clone()).or_insert(made).clone())
    }

    /// Commits what `queue` holds, a batch at a time, until it is empty; a
    /// flush that ends any other way (its log backend panicked, the runtime
    /// dropped it) fails the stream ([`guard::FailOnDrop`]).
    async fn flush(self, queue: Arc<Queue>) {
        let mut guard = guard::FailOnDrop::new(self.map.clone(), queue.clone());
        self.commit_all(queue).await;
        guard.disarm();
    }

    /// The flush's work: every batch, in order, until nothing is queued.
    async fn commit_all(self, queue: Arc<Queue>) {
        let awaits = {
            let st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
            st.awaits_owner && !st.started
        };
        if awaits {
            let _ = tokio::time::timeout(OWNER_WAIT, queue.owned.notified()).await;
        }
        loop {
            let (batch, first, create, meta) = {
                let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
                if st.pending.is_empty() {
                    st.flushing = false;
                    let done = st.ended;
                    drop(st);
                    if done {
                        self.remove(&queue);
                    }
                    return;
                }
                let batch = std::mem::take(&mut st.pending);
                let first = st.next - batch.len() as Seq;
                st.started = true;
                (batch, first, st.create, st.meta.clone())
            };
            let last = first + batch.len() as Seq - 1;
            match self.append(&queue.loc, batch, create, meta).await {
                Ok(head) if head == last => {
                    let (idle, ended) = {
                        let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
                        st.create = false;
                        let idle = st.pending.is_empty();
                        if idle {
                            st.flushing = false;
                        }
                        (idle, st.ended)
                    };
                    if idle {
                        // Done before the commit is published: whoever it
                        // wakes finds no flush holding the log.
                        if ended {
                            self.remove(&queue);
                        }
                        drop(self);
                        queue.committed.send_modify(|c| c.head = head);
                        return;
                    }
                    queue.committed.send_modify(|c| c.head = head);
                }
                Ok(head) if queue.loc.is_standalone() => {
                    // Another instance appended too: its numbers were never
                    // shown, so number on from where the log put the batch.
                    tracing::debug!(stream = %queue.loc.session, first, head, "the session stream has another writer; numbering on from the log's head");
                    let mut st = queue.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.create = false;
                    st.next = head + 1 + st.pending.len() as Seq;
                    drop(st);
                    queue.committed.send_modify(|c| c.head = head);
                }
                outcome => {
                    let why: Arc<str> = match outcome {
                        Ok(head) => format!(
                            "the log put events {first}..={last} at ..={head}: another writer appends to this stream"
                        )
                        .into(),
                        Err(e) => e.to_string().into(),
                    };
                    guard::fail(&self.map, &queue, why);
                    return;
                }
            }
        }
    }

    /// Appends one record to `loc` now, outside any queue: the seq the log
    /// gives (a stream whose numbers another instance may also take).
    pub(crate) async fn append_now(
        &self,
        loc: &Location,
        record: Bytes,
    ) -> Result<Seq, StoreError> {
        self.append(loc, vec![record], true, Bytes::new())
            .await
            .map_err(|e| log_err("append", loc, e))
    }

    /// One batch into the log, creating the stream's log session first
    /// where it may not exist (in the same commit where the log can), with
    /// `meta` as its record.
    async fn append(
        &self,
        loc: &Location,
        batch: Vec<Bytes>,
        create: bool,
        meta: Bytes,
    ) -> Result<Seq, LogError> {
        if !create {
            return self.log.append(&loc.session, loc.stream, batch).await;
        }
        match self
            .log
            .append_or_create(&loc.session, loc.stream, batch.clone(), meta.clone())
            .await
        {
            Err(LogError::NoSession(_)) => {
                // An ended session is never re-created (the log answers
                // SessionExists and the append NoSession): nothing is
                // resurrected.
                match self.log.create_session(&loc.session, meta).await {
                    Ok(()) | Err(LogError::SessionExists(_)) => {}
                    Err(e) => return Err(e),
                }
                self.log.append(&loc.session, loc.stream, batch).await
            }
            other => other,
        }
    }

    /// Drops `queue` from the map if it is still the one there.
    fn remove(&self, queue: &Arc<Queue>) {
        guard::remove(&self.map, queue);
    }
}

fn failed(loc: &Location, why: &str) -> StoreError {
    StoreError::NotCommitted {
        stream: loc.session.clone(),
        why: why.to_owned(),
    }
}

fn log_err(op: &'static str, loc: &Location, source: LogError) -> StoreError {
    StoreError::Log {
        op,
        session: loc.session.clone(),
        source,
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
