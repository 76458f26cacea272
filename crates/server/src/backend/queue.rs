//! A queue for one receiver that costs nothing while idle: a session's
//! commit queue (what its backend sent, in order, until the route's commit
//! loop takes it), and a hosted handler's inbox (`mcp-resume-rmcp`).
//!
//! Contract: items come out in the order they went in; the receiver learns
//! that every sender is gone as it would from a channel; it holds no
//! allocation while empty. It is unbounded itself: the bound on a session's
//! uncommitted sends (1,024) is the outbox's, which waits before it sends.
//!
//! Why not a tokio channel: every session has one for its whole life, idle or
//! not, and an unbounded channel allocates its padded state and a first block
//! of slots when it is made (benches/results/paths.md has the sizes). This
//! queue is a lock over a `VecDeque` that holds nothing while idle (so its
//! items need no box of their own), the one receiver's waker and a count of
//! the senders.
//!
//! Why a waker and not a `Notify`: rmcp's service loop makes a new `receive`
//! future on every turn of its `select!` (two turns a notification a hosted
//! handler sends) and drops it when another branch wins. A `Notify` waiter is
//! put on a locked list at the first poll and taken off under the lock at the
//! drop; registering a waker is one atomic swap, and dropping the future costs
//! nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::Poll;

use futures_util::task::AtomicWaker;

/// The queue; senders are counted by whoever clones them
/// ([`Queue::add_sender`], [`Queue::drop_sender`]), and whoever makes the
/// queue holds its first sender. One receiver: it takes items with
/// [`Queue::recv`] or [`Queue::recv_many`], never from two tasks at once
/// (only the last waker registered is woken).
pub struct Queue<T> {
    state: Mutex<State<T>>,
    /// The receiver's waker, while it waits: woken by a push, a close and
    /// the last sender leaving.
    ready: AtomicWaker,
    /// Counted outside the lock: a backend clones its sender for every call
    /// (the built-in tools' context), and calls of one session run at once.
    senders: AtomicUsize,
}

struct State<T> {
    items: VecDeque<T>,
    /// The receiver stopped taking: a push is refused.
    closed: bool,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Queue<T> {
    /// An empty queue with one sender.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State {
                items: VecDeque::new(),
                closed: false,
            }),
            ready: AtomicWaker::new(),
            senders: AtomicUsize::new(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `item` behind everything before it; gives it back once the
    /// receiver has closed the queue.
    pub fn push(&self, item: T) -> Result<(), T> {
        {
            let mut s = self.lock();
            if s.closed {
                return Err(item);
            }
            s.items.push_back(item);
        }
        self.ready.wake();
        Ok(())
    }

    /// One more sender.
    pub fn add_sender(&self) {
        self.senders.fetch_add(1, Ordering::Relaxed);
    }

    /// One sender fewer; once none is left, the receiver learns it after
    /// taking what is queued.
    pub fn drop_sender(&self) {
        // Release: what this sender pushed is seen by the receiver that
        // sees the count reach 0 (Acquire below).
        let before = self.senders.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a sender dropped twice");
        if before == 1 {
            self.ready.wake();
        }
    }

    /// Waits for at least one item and moves up to `limit` of them into
    /// `out`, in order; 0 once the queue is empty and every sender is gone
    /// (or the receiver closed it), as a channel's `recv_many`.
    pub async fn recv_many(&self, out: &mut Vec<T>, limit: usize) -> usize {
        self.wait(|s| {
            let n = limit.min(s.items.len());
            out.extend(s.items.drain(..n));
            n
        })
        .await
    }

    /// The next item, waiting for one; `None` once the queue is empty and
    /// every sender is gone (or the receiver closed it). Cancel-safe: an
    /// item is taken only by the poll that returns it. The queue's room is
    /// given back when it empties, so an idle receiver holds none.
    pub async fn recv(&self) -> Option<T> {
        self.wait(|s| {
            let item = s.items.pop_front();
            if s.items.is_empty() {
                s.items = VecDeque::new();
            }
            item
        })
        .await
    }

    /// Waits until something is queued and answers what `take` makes of
    /// it; `R::default()` (0, `None`) once the queue is empty and will stay
    /// so. Looks before registering the waker and again after, so a push in
    /// between is never missed.
    async fn wait<R: Default>(&self, mut take: impl FnMut(&mut State<T>) -> R) -> R {
        let mut look = || {
            let mut s = self.lock();
            if !s.items.is_empty() {
                return Some(take(&mut s));
            }
            let ended = s.closed || self.senders.load(Ordering::Acquire) == 0;
            ended.then(R::default)
        };
        std::future::poll_fn(|cx| {
            if let Some(r) = look() {
                return Poll::Ready(r);
            }
            self.ready.register(cx.waker());
            look().map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    /// If nothing is queued, gives back the room a burst took and says so
    /// (one lock for both, after every batch of the commit loop).
    pub fn release_if_empty(&self) -> bool {
        let mut s = self.lock();
        let empty = s.items.is_empty();
        if empty {
            s.items = VecDeque::new();
        }
        empty
    }

    /// Refuses every later push; what is queued can still be taken.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.wake();
    }

    /// The next queued item, without waiting.
    pub fn try_recv(&self) -> Option<T> {
        self.lock().items.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Queued;
    use std::sync::Arc;

    fn item(n: u8) -> Queued {
        Queued::Raw(bytes::Bytes::from(vec![n]))
    }

    fn byte(q: &Queued) -> u8 {
        match q {
            Queued::Raw(b) => b[0],
            _ => unreachable!(),
        }
    }

    #[tokio::test]
    async fn items_come_out_in_order_in_batches_then_none_once_the_senders_are_gone() {
        let q = Arc::new(Queue::new());
        q.add_sender();
        let producer = {
            let q = q.clone();
            tokio::spawn(async move {
                for n in 0..200u8 {
                    q.push(item(n)).map_err(|_| ()).expect("open");
                    if n % 7 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                q.drop_sender();
            })
        };
        let mut got = Vec::new();
        let mut out = Vec::new();
        loop {
            let n = q.recv_many(&mut out, 16).await;
            if n == 0 {
                // One sender (the first) is still counted.
                break;
            }
            assert!(n <= 16);
            got.extend(out.drain(..).map(|b| byte(&b)));
            if got.len() == 200 {
                q.drop_sender();
            }
        }
        producer.await.expect("producer");
        assert_eq!(got, (0..200u8).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_waiting_receiver_wakes_for_a_push_and_for_the_last_sender_leaving() {
        let q = Arc::new(Queue::new());
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                let first = q.recv_many(&mut out, 8).await;
                let second = q.recv_many(&mut out, 8).await;
                (first, second, out.len())
            })
        };
        tokio::task::yield_now().await;
        q.push(item(1)).map_err(|_| ()).expect("open");
        tokio::task::yield_now().await;
        q.drop_sender();
        let (first, second, len) = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken within 5 s")
            .expect("waiter");
        assert_eq!((first, second, len), (1, 0, 1));
    }

    #[tokio::test]
    async fn recv_takes_one_at_a_time_loses_nothing_when_cancelled_and_ends_with_the_senders() {
        let q = Arc::new(Queue::<u32>::new());
        // A recv cancelled while it waits takes nothing.
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(20), q.recv())
                .await
                .is_err()
        );
        q.push(1).expect("open");
        q.push(2).expect("open");
        assert_eq!(q.recv().await, Some(1));
        assert_eq!(q.recv().await, Some(2));
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { (q.recv().await, q.recv().await) })
        };
        tokio::task::yield_now().await;
        q.push(3).expect("open");
        q.drop_sender();
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken within 5 s")
            .expect("waiter");
        assert_eq!(got, (Some(3), None));
    }

    #[tokio::test]
    async fn a_closed_queue_refuses_pushes_and_keeps_what_it_holds() {
        let q = Queue::new();
        q.push(item(1)).map_err(|_| ()).expect("open");
        q.close();
        assert!(q.push(item(2)).is_err());
        assert_eq!(q.try_recv().map(|b| byte(&b)), Some(1));
        assert!(q.try_recv().is_none());
        let mut out = Vec::new();
        assert_eq!(q.recv_many(&mut out, 8).await, 0);
    }
}
