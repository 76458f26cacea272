//! The tail half of the commit point.
//!
//! A [`Feed`] (the backend's half) hands committed events to a
//! [`Subscription`] (the reader's half) through a bounded buffer of its own: a
//! lock over a `VecDeque` that holds nothing while the reader is caught up, and
//! the reader's waker. A full buffer never skips: it ends the subscription as
//! lagged at the reader's cursor, and the reader resubscribes from there. Why
//! not a tokio channel: every open reader has one for as long as it is open,
//! idle ones included (an idle session's GET stream, for hours), and a bounded
//! channel allocates its padded state and a first block of slots when it is
//! made (benches/results/paths.md); this holds nothing while idle.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};

use crate::{Event, LogError, Seq};

/// Why the hub stopped feeding a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndReason {
    Lagged,
    SessionEnded,
    Closed,
    /// The backend went away under the tail (Redis down): resume elsewhere or later.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    Unavailable,
}

/// Room a caught-up reader keeps for the next events; past it, the buffer's
/// memory goes back once it is empty.
const KEEP: usize = 8;

/// What the two halves share.
struct Shared {
    state: Mutex<State>,
    /// Set once, before the feed is dropped, so the reader can tell a lag
    /// from an end.
    end: OnceLock<EndReason>,
    /// Events buffered past which the subscription lags.
    capacity: usize,
}

struct State {
    events: VecDeque<Event>,
    /// The reader waiting for the next event.
    waker: Option<Waker>,
    /// The feed was dropped: after what is buffered, the subscription ends.
    feed_gone: bool,
    /// The subscription was dropped: the feed hands nothing more on.
    reader_gone: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The backend's half of a [`Subscription`]: every backend feeds its
/// subscribers the same way, and a full one ends lagged, never skipped.
pub(crate) struct Feed {
    shared: Arc<Shared>,
}

impl Feed {
    /// A subscription whose commit point is `cursor`, and the feed that fills it.
    pub fn pair(capacity: usize, cursor: Seq) -> (Feed, Subscription) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                events: VecDeque::new(),
                waker: None,
                feed_gone: false,
                reader_gone: false,
            }),
            end: OnceLock::new(),
            capacity: capacity.max(1),
        });
        (
            Feed {
                shared: shared.clone(),
            },
            Subscription {
                shared,
                last: cursor,
            },
        )
    }

    /// Hands one event on; `false` once this subscriber is done: it went
    /// away, or its buffer is full and it now ends with [`LogError::Lagged`].
    pub fn offer(&self, ev: &Event) -> bool {
        let waker = {
            let mut s = self.shared.lock();
            if s.reader_gone {
                return false;
            }
            if s.events.len() >= self.shared.capacity {
                let _ = self.shared.end.set(EndReason::Lagged);
                return false;
            }
            s.events.push_back(ev.clone());
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// Whether the subscription was dropped.
    pub fn is_closed(&self) -> bool {
        self.shared.lock().reader_gone
    }

    /// Ends the subscription for `why` (after what it has buffered).
    pub fn end(self, why: EndReason) {
        let _ = self.shared.end.set(why);
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.shared.lock();
            s.feed_gone = true;
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Every committed event after the commit point, in order, until it ends.
///
/// It ends with an error, never by skipping: [`LogError::Lagged`] carries the
/// cursor to resume from.
pub struct Subscription {
    shared: Arc<Shared>,
    last: Seq,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("last", &self.last)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The seq of the last event delivered (the commit point's `C` at first).
    pub fn cursor(&self) -> Seq {
        self.last
    }

    /// The next event, or why there is none.
    pub async fn next(&mut self) -> Result<Event, LogError> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`Subscription::next`] as a poll.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Event, LogError>> {
        let mut s = self.shared.lock();
        if let Some(ev) = Self::pop(&mut s) {
            self.last = ev.seq;
            return Poll::Ready(Ok(ev));
        }
        if s.feed_gone {
            return Poll::Ready(Err(self.ended()));
        }
        match &mut s.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// An event already buffered, without waiting.
    pub fn try_next(&mut self) -> Option<Event> {
        let ev = Self::pop(&mut self.shared.lock())?;
        self.last = ev.seq;
        Some(ev)
    }

    /// The next buffered event; the buffer's room goes back once a burst
    /// is read.
    fn pop(s: &mut State) -> Option<Event> {
        let ev = s.events.pop_front()?;
        if s.events.is_empty() && s.events.capacity() > KEEP {
            s.events = VecDeque::new();
        }
        Some(ev)
    }

    /// Why the feed ended, as the reader's error.
    fn ended(&self) -> LogError {
        match self.shared.end.get() {
            Some(EndReason::Lagged) => LogError::Lagged { cursor: self.last },
            Some(EndReason::SessionEnded) => LogError::SessionEnded,
            Some(EndReason::Unavailable) => LogError::Unavailable(format!(
                "the connection to the log backend was lost; resume from {}",
                self.last
            )),
            Some(EndReason::Closed) | None => LogError::Closed,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut s = self.shared.lock();
        s.reader_gone = true;
        s.events = VecDeque::new();
        s.waker = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn ev(seq: Seq) -> Event {
        Event {
            seq,
            at_ms: 0,
            message: Bytes::from(format!("{{\"n\":{seq}}}")),
        }
    }

    #[tokio::test]
    async fn events_arrive_in_order_then_the_end_after_what_is_buffered() {
        let (feed, mut sub) = Feed::pair(16, 4);
        assert_eq!(sub.cursor(), 4);
        for s in 5..=9 {
            assert!(feed.offer(&ev(s)));
        }
        feed.end(EndReason::SessionEnded);
        for s in 5..=9 {
            assert_eq!(sub.next().await.expect("buffered").seq, s);
        }
        assert_eq!(sub.cursor(), 9);
        assert!(matches!(sub.next().await, Err(LogError::SessionEnded)));
    }

    #[tokio::test]
    async fn a_full_buffer_ends_lagged_with_the_cursor_to_resume_from() {
        let (feed, mut sub) = Feed::pair(3, 0);
        assert!(feed.offer(&ev(1)) && feed.offer(&ev(2)) && feed.offer(&ev(3)));
        assert!(!feed.offer(&ev(4)), "the fourth does not fit");
        drop(feed);
        assert_eq!(sub.try_next().map(|e| e.seq), Some(1));
        assert_eq!(sub.next().await.expect("2").seq, 2);
        assert_eq!(sub.next().await.expect("3").seq, 3);
        match sub.next().await {
            Err(LogError::Lagged { cursor }) => assert_eq!(cursor, 3),
            other => panic!("expected a lag, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_waiting_reader_wakes_for_an_offer_and_for_the_feed_going() {
        let (feed, mut sub) = Feed::pair(8, 0);
        let reader = tokio::spawn(async move {
            let first = sub.next().await.map(|e| e.seq);
            let second = sub.next().await.map(|e| e.seq);
            (first, second.is_err())
        });
        tokio::task::yield_now().await;
        assert!(feed.offer(&ev(1)));
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(feed);
        let (first, ended) = tokio::time::timeout(Duration::from_secs(5), reader)
            .await
            .expect("woken within 5 s")
            .expect("reader");
        assert_eq!(first.expect("an event"), 1);
        assert!(ended);
    }

    #[tokio::test]
    async fn a_dropped_reader_closes_the_feed_and_frees_its_buffer() {
        let (feed, sub) = Feed::pair(8, 0);
        assert!(feed.offer(&ev(1)));
        assert!(!feed.is_closed());
        drop(sub);
        assert!(feed.is_closed());
        assert!(!feed.offer(&ev(2)));
        assert_eq!(feed.shared.lock().events.capacity(), 0);
    }

    #[tokio::test]
    async fn a_burst_read_to_the_end_gives_its_room_back() {
        let (feed, mut sub) = Feed::pair(1000, 0);
        for s in 1..=500 {
            assert!(feed.offer(&ev(s)));
        }
        while sub.try_next().is_some() {}
        assert_eq!(sub.cursor(), 500);
        assert_eq!(feed.shared.lock().events.capacity(), 0);
    }
}
