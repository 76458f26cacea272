//! The tail half of the commit point.

use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;

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

/// Shared between the feed and the subscription: set once, before the
/// sender is dropped, so the receiver can tell a lag from an end.
type EndCell = Arc<OnceLock<EndReason>>;

/// The backend's half of a [`Subscription`]: every backend feeds its
/// subscribers the same way, and a full one ends lagged, never skipped.
///
/// Events travel boxed: a channel allocates its first block of 32 slots when
/// it is made, and every open reader, idle ones included (an idle session's
/// GET stream), has a subscription: 256 bytes of slots instead of 1.3 KiB.
pub(crate) struct Feed {
    tx: mpsc::Sender<Box<Event>>,
    end: EndCell,
}

impl Feed {
    /// A subscription whose commit point is `cursor`, and the feed that fills it.
    pub fn pair(capacity: usize, cursor: Seq) -> (Feed, Subscription) {
        let (tx, rx) = mpsc::channel(capacity);
        let end: EndCell = Arc::new(OnceLock::new());
        (
            Feed {
                tx,
                end: end.clone(),
            },
            Subscription::new(rx, end, cursor),
        )
    }

    /// Hands one event on; `false` once this subscriber is done: it went
    /// away, or its buffer is full and it now ends with [`LogError::Lagged`].
    pub fn offer(&self, ev: &Event) -> bool {
        match self.tx.try_send(Box::new(ev.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                let _ = self.end.set(EndReason::Lagged);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    /// Whether the subscription was dropped.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Ends the subscription for `why` (after what it has buffered).
    pub fn end(self, why: EndReason) {
        let _ = self.end.set(why);
    }
}

/// Every committed event after the commit point, in order, until it ends.
///
/// It ends with an error, never by skipping: [`LogError::Lagged`] carries the
/// cursor to resume from.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Box<Event>>,
    end: EndCell,
    last: Seq,
}

impl Subscription {
    fn new(rx: mpsc::Receiver<Box<Event>>, end: EndCell, last: Seq) -> Self {
        Self { rx, end, last }
    }

    /// The seq of the last event delivered (the commit point's `C` at first).
    pub fn cursor(&self) -> Seq {
        self.last
    }

    /// The next event, or why there is none.
    pub async fn next(&mut self) -> Result<Event, LogError> {
        match self.rx.recv().await {
            Some(ev) => {
                self.last = ev.seq;
                Ok(*ev)
            }
            None => Err(match self.end.get() {
                Some(EndReason::Lagged) => LogError::Lagged { cursor: self.last },
                Some(EndReason::SessionEnded) => LogError::SessionEnded,
                Some(EndReason::Unavailable) => LogError::Unavailable(format!(
                    "the connection to the log backend was lost; resume from {}",
                    self.last
                )),
                Some(EndReason::Closed) | None => LogError::Closed,
            }),
        }
    }

    /// An event already buffered, without waiting.
    pub fn try_next(&mut self) -> Option<Event> {
        let ev = self.rx.try_recv().ok()?;
        self.last = ev.seq;
        Some(*ev)
    }
}
