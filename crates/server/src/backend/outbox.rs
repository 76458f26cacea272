//! Where a session's backend sends: the session's commit queue.
//!
//! A send is queued in call order and resolves as soon as it is queued, not
//! once it is committed: a handler that sends a thousand notifications does
//! not wait for a thousand commits, and the route's commit loop puts
//! whatever is queued into one append. Clients still see only committed
//! events, since they read the log, never the queue. What bounds memory is
//! back-pressure: a send resolves only while at most `MAX_UNCOMMITTED` (1,024)
//! sends of the session wait for their commit. A backend that must know
//! "the log has it" awaits [`Outbox::flush`].
//!
//! One message skips the queue: a response that a POST awaits as JSON,
//! sent while nothing the session sent before waits in the queue (so
//! nothing it must follow is uncommitted). It needs no commit, and handing
//! it over at once saves the commit loop's round trip on the hottest path
//! (a `tools/call` answered as JSON).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mcp_resume_log::LogError;
use tokio::sync::{oneshot, Notify};

use serde_json::Value;

use super::queue::Queue;
use super::{Message, Outbound};

/// Sends of one session queued but not yet committed, past which a send
/// waits.
pub(crate) const MAX_UNCOMMITTED: usize = 1024;

/// An outgoing message in the session's commit queue.
pub(crate) enum Queued {
    /// A message to route and commit.
    Message(Outbound),
    /// A call's answer (a response or error to client request `id`): to the
    /// POST that awaits it, or committed to the call's stream.
    Answer { id: Value, message: Message },
    /// Answered once everything queued before it is committed (or could not be).
    Flush(oneshot::Sender<Result<(), LogError>>),
    /// The backend is gone for good (a child process exited): once what is
    /// queued before it is committed, calls in flight are answered with an
    /// error and the session ends.
    EndSession(String),
    /// One notification already encoded as JSON text, bound for the session
    /// stream (routed nowhere else): committed with the run it falls in,
    /// like a [`Queued::Message`], without being parsed again.
    Raw(bytes::Bytes),
    /// Messages already encoded as JSON text for the session stream,
    /// committed in one append after everything queued before them (at most
    /// once per `key` when given); `done` learns the last one's position.
    /// The built-in tools' notifications (`emit` commits thousands at once).
    Encoded {
        messages: Vec<bytes::Bytes>,
        key: Option<u64>,
        done: oneshot::Sender<Result<mcp_resume_log::Seq, LogError>>,
    },
}

/// What a session's outbox and its commit loop share: the queue, how many
/// sends wait for their commit, and the first commit that failed.
#[derive(Default)]
pub(crate) struct Pending {
    /// What the backend sent, for the commit loop to take.
    pub(crate) queue: Queue<Queued>,
    uncommitted: AtomicUsize,
    /// Items queued and not yet fully handled by the commit loop (of every
    /// kind): while it is not 0, nothing may skip the queue.
    queued: AtomicUsize,
    drained: Notify,
    failed: Mutex<Option<LogError>>,
    /// `failed` may hold an error: read on every send, so the lock is taken
    /// only when there is something to take.
    failing: AtomicBool,
    /// The commit loop ended: nothing queued now will be committed.
    closed: AtomicBool,
}

impl Pending {
    /// `n` queued messages were committed (or dropped, or failed): senders
    /// waiting for room may go on.
    pub(crate) fn done(&self, n: usize) {
        self.uncommitted.fetch_sub(n, Ordering::AcqRel);
        self.drained.notify_waiters();
    }

    /// The commit loop has handled `n` queued items of any kind (committed
    /// what they carried, handed answers over).
    pub(crate) fn handled(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::AcqRel);
    }

    /// Whether everything the backend sent is handled (committed, or handed
    /// over): what a graceful stop waits for.
    pub(crate) fn settled(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    /// The commit loop ended: every waiting and later send answers an error.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// A commit failed for good (after the route's retries): the next send
    /// or flush of the session answers this error, so the backend learns it.
    pub(crate) fn fail(&self, e: LogError) {
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        failed.get_or_insert(e);
        self.failing.store(true, Ordering::Release);
    }

    /// The failure not yet reported, taken: reported once.
    fn failure(&self) -> Option<LogError> {
        if !self.failing.load(Ordering::Acquire) {
            return None;
        }
        let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        self.failing.store(false, Ordering::Release);
        failed.take()
    }

    /// A send's answer without waiting, if it has one now: the commit loop
    /// ended, a commit failed, or there is room. `None`: it must wait.
    fn answer_now(&self) -> Option<Result<(), LogError>> {
        if let Some(e) = self.failure() {
            return Some(Err(e));
        }
        if self.closed.load(Ordering::Acquire) {
            return Some(Err(ended()));
        }
        (self.uncommitted.load(Ordering::Acquire) <= MAX_UNCOMMITTED).then_some(Ok(()))
    }
}

/// Where a session's backend sends its messages. Sends are ordered by call
/// time: [`Outbox::send`] queues before it returns, and its future resolves
/// once there is room in the queue (see the module's doc); the message is
/// committed (or handed to a waiting POST) after everything sent before it.
pub struct Outbox {
    pending: Arc<Pending>,
    shortcut: Option<Arc<dyn Shortcut>>,
}

/// Every clone is a sender of the queue: the commit loop ends once the last
/// one is dropped (the backend is gone) and what was queued is committed.
impl Clone for Outbox {
    fn clone(&self) -> Self {
        self.pending.queue.add_sender();
        Self {
            pending: self.pending.clone(),
            shortcut: self.shortcut.clone(),
        }
    }
}

impl Drop for Outbox {
    fn drop(&mut self) {
        self.pending.queue.drop_sender();
    }
}

/// What lets a message skip the commit queue (see the module doc): the
/// route's routing table.
pub(crate) trait Shortcut: Send + Sync {
    /// Hands `message`, the answer to call `id`, to the POST that awaits
    /// it if that POST awaits it as JSON; otherwise gives it back.
    fn try_hand(&self, id: &Value, message: Message) -> Result<(), Message>;
}

impl Outbox {
    /// A new outbox and what its commit loop shares with it (the queue is
    /// in it); with `shortcut`, JSON answers sent while the queue is empty
    /// skip it.
    pub(crate) fn new(shortcut: Option<Arc<dyn Shortcut>>) -> (Self, Arc<Pending>) {
        let pending = Arc::new(Pending::default());
        (
            Self {
                pending: pending.clone(),
                shortcut,
            },
            pending,
        )
    }

    /// Queues `item`, counted until the commit loop has handled it.
    fn queue(&self, item: Queued) -> Result<(), LogError> {
        self.pending.queued.fetch_add(1, Ordering::AcqRel);
        self.pending.queue.push(item).map_err(|_| {
            self.pending.queued.fetch_sub(1, Ordering::AcqRel);
            ended()
        })
    }

    /// Queues `out` now, in call order; the future resolves once at most
    /// 1,024 sends wait for their commit. An error when the
    /// route has ended, or when an earlier commit of this session failed
    /// (reported once; this message is queued all the same).
    pub fn send(
        &self,
        out: Outbound,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        let answer = match out.message.get("method") {
            None => out.message.get("id").cloned(),
            Some(_) => None,
        };
        let early = match answer {
            Some(id) => self.answer(id, Message::Value(out.message)),
            None => self.enqueue(Queued::Message(out)),
        };
        self.room(early)
    }

    /// [`Outbox::send`] of a call's answer (a response or error to client
    /// request `id`) already encoded as one JSON-RPC message in JSON text:
    /// handed to the POST that awaits it, or committed to the call's
    /// stream, as it is (not parsed and encoded again).
    pub fn send_answer(
        &self,
        id: Value,
        message: bytes::Bytes,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        let early = self.answer(id, Message::Text(message));
        self.room(early)
    }

    /// Hands the answer to call `id` over at once where it may skip the
    /// queue (see the module doc), else queues it.
    fn answer(&self, id: Value, message: Message) -> Option<Result<(), LogError>> {
        let message = match &self.shortcut {
            Some(s) if self.pending.queued.load(Ordering::Acquire) == 0 => {
                match s.try_hand(&id, message) {
                    // Handed over: nothing waits for a commit.
                    Ok(()) => return Some(self.pending.failure().map_or(Ok(()), Err)),
                    Err(message) => message,
                }
            }
            _ => message,
        };
        self.enqueue(Queued::Answer { id, message })
    }

    /// [`Outbox::send`] of a notification for the session stream (any
    /// method but `notifications/progress` and `notifications/cancelled`,
    /// which the route directs) already encoded as one JSON-RPC message in
    /// JSON text: it is committed as it is, not parsed and encoded again.
    pub fn send_session_notification(
        &self,
        message: bytes::Bytes,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        let early = self.enqueue(Queued::Raw(message));
        self.room(early)
    }

    /// Queues `item`, one message waiting for its commit; an answer now
    /// (an error) or `None` to wait for room.
    fn enqueue(&self, item: Queued) -> Option<Result<(), LogError>> {
        self.pending.uncommitted.fetch_add(1, Ordering::AcqRel);
        match self.queue(item) {
            Err(e) => {
                self.pending.done(1);
                Some(Err(e))
            }
            // Whether it must wait, or a failure answers it, is `room`'s.
            Ok(()) => None,
        }
    }

    /// Resolves with `early` if given, else once at most 1,024 sends wait
    /// for their commit. The answer is looked for before a future is made:
    /// a send with room (nearly every one) resolves at its first poll
    /// without a waiter put on `Pending::drained` (a lock to put it there,
    /// another to take it off) or a count of the shared state moved.
    fn room(
        &self,
        early: Option<Result<(), LogError>>,
    ) -> impl std::future::Future<Output = Result<(), LogError>> + Send + 'static {
        match early.or_else(|| self.pending.answer_now()) {
            Some(r) => futures_util::future::Either::Left(std::future::ready(r)),
            None => futures_util::future::Either::Right(Self::wait_room(self.pending.clone())),
        }
    }

    /// Resolves once at most 1,024 sends wait for their commit, or with the
    /// error that ends the wait.
    async fn wait_room(pending: Arc<Pending>) -> Result<(), LogError> {
        loop {
            let drained = pending.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if let Some(r) = pending.answer_now() {
                return r;
            }
            drained.await;
        }
    }

    /// Resolves once everything sent before it is committed: for the rare
    /// backend that must know the log has it before it goes on.
    pub async fn flush(&self) -> Result<(), LogError> {
        let (ack, done) = oneshot::channel();
        self.queue(Queued::Flush(ack))?;
        done.await.unwrap_or_else(|_| Err(ended()))?;
        self.pending.failure().map_or(Ok(()), Err)
    }

    /// Commits `messages` (each one JSON-RPC message as JSON text) to the
    /// session stream after everything sent before, in one append (at most
    /// once per `key`), and resolves once they are committed, with the last
    /// one's position.
    pub(crate) async fn commit_session(
        &self,
        messages: Vec<bytes::Bytes>,
        key: Option<u64>,
    ) -> Result<mcp_resume_log::Seq, LogError> {
        let (done, committed) = oneshot::channel();
        let queued = Queued::Encoded {
            messages,
            key,
            done,
        };
        self.queue(queued)?;
        committed.await.unwrap_or_else(|_| Err(ended()))
    }

    /// Ends the session for good, saying `why` in the server's log: what was
    /// sent before is committed, calls in flight get a JSON-RPC error, then
    /// the session answers 404. For a backend that cannot be restored (a
    /// child process that exited by itself).
    pub fn end_session(&self, why: impl Into<String>) {
        let _ = self.queue(Queued::EndSession(why.into()));
    }
}

fn ended() -> LogError {
    LogError::Unavailable("the session's route has ended".into())
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};

    use futures_util::task::noop_waker_ref;

    use super::*;

    fn poll<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        f.poll(&mut Context::from_waker(noop_waker_ref()))
    }

    fn raw(outbox: &Outbox) -> impl Future<Output = Result<(), LogError>> {
        outbox.send_session_notification(bytes::Bytes::from_static(b"{}"))
    }

    #[test]
    fn a_send_past_the_bound_waits_for_a_commit_to_drain_the_queue() {
        let (outbox, pending) = Outbox::new(None);
        for n in 0..MAX_UNCOMMITTED {
            let send = pin!(raw(&outbox));
            assert!(
                matches!(poll(send), Poll::Ready(Ok(()))),
                "send {n} has room"
            );
        }
        let mut over = pin!(raw(&outbox));
        assert!(poll(over.as_mut()).is_pending(), "1,025 uncommitted: waits");
        assert!(poll(over.as_mut()).is_pending(), "still waits");
        pending.done(1);
        assert!(
            matches!(poll(over.as_mut()), Poll::Ready(Ok(()))),
            "room again"
        );
        assert_eq!(
            pending.queue.try_recv().map(|_| ()),
            Some(()),
            "queued at call time"
        );
    }

    #[test]
    fn a_failed_commit_is_reported_once_to_the_next_send_and_an_ended_loop_to_all() {
        let (outbox, pending) = Outbox::new(None);
        pending.fail(ended());
        assert!(
            matches!(poll(pin!(raw(&outbox))), Poll::Ready(Err(_))),
            "reported"
        );
        assert!(
            matches!(poll(pin!(raw(&outbox))), Poll::Ready(Ok(()))),
            "once"
        );
        // A failure while a send waits for room ends its wait.
        for _ in 0..MAX_UNCOMMITTED {
            drop(raw(&outbox));
        }
        let mut waiting = pin!(raw(&outbox));
        assert!(poll(waiting.as_mut()).is_pending());
        pending.fail(ended());
        pending.done(0);
        assert!(matches!(poll(waiting.as_mut()), Poll::Ready(Err(_))));
        pending.close();
        for _ in 0..2 {
            assert!(
                matches!(poll(pin!(raw(&outbox))), Poll::Ready(Err(_))),
                "ended"
            );
        }
    }

    /// A shortcut that takes every answer it is offered, and counts them.
    #[derive(Default)]
    struct Takes(std::sync::atomic::AtomicUsize);

    impl Shortcut for Takes {
        fn try_hand(&self, _: &Value, _: Message) -> Result<(), Message> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// An answer skips the queue only while nothing waits in it: one sent
    /// after a notification that is not committed yet is queued behind it,
    /// so the client never reads it first. A message that is no answer
    /// never skips.
    #[test]
    fn an_answer_skips_the_queue_only_while_it_is_empty() {
        let takes = Arc::new(Takes::default());
        let (outbox, pending) = Outbox::new(Some(takes.clone() as Arc<dyn Shortcut>));
        let answer = || outbox.send_answer(serde_json::json!(1), bytes::Bytes::from_static(b"{}"));
        assert!(matches!(poll(pin!(answer())), Poll::Ready(Ok(()))));
        assert_eq!(takes.0.load(Ordering::SeqCst), 1, "handed over");
        assert!(pending.queue.try_recv().is_none(), "nothing queued");
        let note = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/message"});
        assert!(matches!(
            poll(pin!(outbox.send(Outbound {
                message: note,
                related: None
            }))),
            Poll::Ready(Ok(()))
        ));
        assert!(matches!(poll(pin!(answer())), Poll::Ready(Ok(()))));
        assert_eq!(takes.0.load(Ordering::SeqCst), 1, "not handed over");
        assert!(matches!(pending.queue.try_recv(), Some(Queued::Message(_))));
        assert!(matches!(
            pending.queue.try_recv(),
            Some(Queued::Answer {
                message: Message::Text(_),
                ..
            })
        ));
    }
}
