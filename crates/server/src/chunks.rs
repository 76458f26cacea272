//! The pipe between an SSE stream's pump and whatever writes its body: a
//! bounded, single-producer, single-consumer queue of encoded chunks.
//!
//! Bounded: a pump that is ahead of its writer waits for room, so a slow
//! client holds at most the pipe's few chunks, never a growing backlog. Why
//! not a tokio channel: every open SSE stream has one for as long as it is
//! open, an idle session's GET stream for hours, and a bounded channel
//! allocates its padded state and a first block of slots when it is made
//! (benches/results/paths.md). This one is a lock over a `VecDeque` that holds
//! nothing while the writer keeps up, and a waker for each side. A module of
//! its own, below both `sse` and `tasks` (whose task streams are SSE bodies
//! too), so neither depends on the other.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

/// One chunk of an SSE body: events already encoded.
pub(crate) type Chunk = Bytes;

/// A pipe of at most `capacity` chunks.
pub(crate) fn channel(capacity: usize) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            chunks: VecDeque::new(),
            receiver: None,
            room: None,
            gone: None,
            sender_gone: false,
            receiver_gone: false,
        }),
        capacity: capacity.max(1),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

struct Shared {
    state: Mutex<State>,
    capacity: usize,
}

struct State {
    chunks: VecDeque<Chunk>,
    /// The receiver waiting for a chunk.
    receiver: Option<Waker>,
    /// The sender waiting for room.
    room: Option<Waker>,
    /// The sender waiting for the receiver to go ([`Sender::closed`]).
    gone: Option<Waker>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Stores `cx`'s waker in `slot` unless the one there wakes the same task.
fn park(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        slot => *slot = Some(cx.waker().clone()),
    }
}

/// The pump's end.
pub(crate) struct Sender {
    shared: Arc<Shared>,
}

impl Sender {
    /// Queues `chunk` once there is room; gives it back if the receiver is
    /// gone.
    pub(crate) async fn send(&self, chunk: Chunk) -> Result<(), Chunk> {
        let mut chunk = Some(chunk);
        poll_fn(|cx| {
            let waker = {
                let mut s = self.shared.lock();
                if s.receiver_gone {
                    return Poll::Ready(Err(chunk.take().unwrap_or_default()));
                }
                if s.chunks.len() >= self.shared.capacity {
                    park(&mut s.room, cx);
                    return Poll::Pending;
                }
                s.chunks.push_back(chunk.take().unwrap_or_default());
                s.receiver.take()
            };
            if let Some(w) = waker {
                w.wake();
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Whether the receiver is gone.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().receiver_gone
    }

    /// Resolves once the receiver is gone (the client went).
    pub(crate) async fn closed(&self) {
        poll_fn(|cx| {
            let mut s = self.shared.lock();
            if s.receiver_gone {
                return Poll::Ready(());
            }
            park(&mut s.gone, cx);
            Poll::Pending
        })
        .await
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.sender_gone = true;
            s.receiver.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// The body's end (or the connection's, once it writes the body itself).
pub(crate) struct Receiver {
    shared: Arc<Shared>,
}

impl Receiver {
    /// The next chunk; `None` once the sender is gone and every chunk it
    /// sent was taken.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Chunk>> {
        let (out, waker) = {
            let mut s = self.shared.lock();
            match Self::pop(&mut s) {
                Some(chunk) => (Poll::Ready(Some(chunk)), s.room.take()),
                None if s.sender_gone => (Poll::Ready(None), None),
                None => {
                    park(&mut s.receiver, cx);
                    (Poll::Pending, None)
                }
            }
        };
        // Room was made: a sender waiting for it may go on.
        if let Some(w) = waker {
            w.wake();
        }
        out
    }

    /// [`Receiver::poll_recv`] as a future.
    pub(crate) async fn recv(&mut self) -> Option<Chunk> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// A chunk already queued, without waiting.
    pub(crate) fn try_recv(&mut self) -> Option<Chunk> {
        let (chunk, waker) = {
            let mut s = self.shared.lock();
            let chunk = Self::pop(&mut s)?;
            (chunk, s.room.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        Some(chunk)
    }

    /// The next chunk; the queue's room goes back once it is empty.
    fn pop(s: &mut State) -> Option<Chunk> {
        let chunk = s.chunks.pop_front()?;
        if s.chunks.is_empty() {
            s.chunks = VecDeque::new();
        }
        Some(chunk)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let (room, gone) = {
            let mut s = self.shared.lock();
            s.receiver_gone = true;
            s.chunks = VecDeque::new();
            (s.room.take(), s.gone.take())
        };
        for w in [room, gone].into_iter().flatten() {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn chunk(n: u32) -> Chunk {
        Bytes::from(n.to_string())
    }

    #[tokio::test]
    async fn chunks_arrive_in_order_with_the_sender_held_to_the_capacity() {
        let (tx, mut rx) = channel(2);
        let sender = tokio::spawn(async move {
            for n in 0..100 {
                tx.send(chunk(n)).await.expect("the receiver is there");
            }
        });
        let mut got = Vec::new();
        while let Some(c) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a chunk or the end within 5 s")
        {
            assert!(
                rx.shared.lock().chunks.len() <= 2,
                "never past the capacity"
            );
            got.push(String::from_utf8(c.to_vec()).expect("text"));
        }
        sender.await.expect("sender");
        let want: Vec<String> = (0..100).map(|n| n.to_string()).collect();
        assert_eq!(got, want);
    }

    #[tokio::test]
    async fn a_gone_receiver_wakes_a_waiting_sender_and_refuses_what_follows() {
        let (tx, rx) = channel(1);
        tx.send(chunk(1)).await.expect("room for one");
        let waiting = tokio::spawn(async move {
            let full = tx.send(chunk(2)).await;
            tx.closed().await;
            full.is_err()
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(rx);
        let refused = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken within 5 s")
            .expect("sender task");
        assert!(refused);
    }

    #[tokio::test]
    async fn the_receiver_takes_what_was_sent_then_learns_the_end() {
        let (tx, mut rx) = channel(8);
        tx.send(chunk(1)).await.expect("sent");
        tx.send(chunk(2)).await.expect("sent");
        drop(tx);
        assert_eq!(rx.try_recv(), Some(chunk(1)));
        assert_eq!(rx.recv().await, Some(chunk(2)));
        assert_eq!(rx.recv().await, None);
        assert_eq!(rx.shared.lock().chunks.capacity(), 0);
    }
}
