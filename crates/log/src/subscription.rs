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
    Unavailable,
}

/// Shared between the hub's sender and the subscription: set once, before
/// the sender is dropped, so the receiver can tell a lag from an end.
pub(crate) type EndCell = Arc<OnceLock<EndReason>>;

/// Every committed event after the commit point, in order, until it ends.
///
/// It ends with an error, never by skipping: [`LogError::Lagged`] carries the
/// cursor to resume from.
#[derive(Debug)]
pub struct Subscription {
    rx: mpsc::Receiver<Event>,
    end: EndCell,
    last: Seq,
}

impl Subscription {
    pub(crate) fn new(rx: mpsc::Receiver<Event>, end: EndCell, last: Seq) -> Self {
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
                Ok(ev)
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
        Some(ev)
    }
}
