//! An SSE response's chunks, which its HTTP/1.1 connection may take from
//! hyper once the response head is on the wire.
//!
//! Hyper keeps a read buffer and a header write buffer for every HTTP/1.1
//! connection for as long as the connection lives, and an idle session's GET
//! stream holds its connection for hours: most of the memory of an idle
//! session (benches/results/paths.md). A `200` SSE response to a GET carries
//! its [`Feed`] as a response extension ([`FeedHandle`]); the connection
//! (`crate::accept`) arms it before hyper sees the body, so hyper writes the
//! head and nothing else, then drops hyper's connection and writes the chunks
//! itself (`accept::handoff`). Anywhere else (HTTP/2, a test's router, a
//! POST's stream) nothing arms the feed and the body reads it as any channel
//! body.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use crate::chunks::Receiver;
use axum::body::HttpBody;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

/// The receiving end of an SSE response's chunks, shared by the response
/// body and the connection that may take it over.
pub(crate) struct Feed {
    state: Mutex<State>,
}

enum State {
    /// The body reads the chunks (and hands them to hyper).
    Live(Receiver),
    /// The connection will take the chunks once the head is out: the body
    /// yields nothing; `parked` once hyper has polled it (the head is then
    /// in hyper's write buffer, and its next flush puts it on the wire).
    Armed { rx: Receiver, parked: bool },
    /// The connection has the receiver.
    Taken,
}

/// A [`Feed`] as a response extension: the connection's way to find it.
#[derive(Clone)]
pub(crate) struct FeedHandle(pub(crate) Arc<Feed>);

impl Feed {
    /// A feed of `rx`, and the body that reads it.
    pub(crate) fn new(rx: Receiver) -> (Arc<Self>, FeedBody) {
        let feed = Arc::new(Self {
            state: Mutex::new(State::Live(rx)),
        });
        (feed.clone(), FeedBody(feed))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on the body yields nothing; the connection takes the chunks
    /// with [`Feed::take`] once the head is flushed. False when the body has
    /// already been read from (then it stays with hyper).
    pub(crate) fn arm(&self) -> bool {
        let mut s = self.lock();
        if !matches!(*s, State::Live(_)) {
            return false;
        }
        if let State::Live(rx) = std::mem::replace(&mut *s, State::Taken) {
            *s = State::Armed { rx, parked: false };
        }
        true
    }

    /// Whether hyper has polled the armed body: everything hyper will ever
    /// write of this response (its head) is in its write buffer.
    pub(crate) fn parked(&self) -> bool {
        matches!(*self.lock(), State::Armed { parked: true, .. })
    }

    /// The receiver, for the connection that writes the chunks from now on.
    pub(crate) fn take(&self) -> Option<Receiver> {
        let mut s = self.lock();
        match std::mem::replace(&mut *s, State::Taken) {
            State::Armed { rx, .. } | State::Live(rx) => Some(rx),
            State::Taken => None,
        }
    }
}

/// The response body of a [`Feed`].
pub(crate) struct FeedBody(Arc<Feed>);

impl HttpBody for FeedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let mut s = self.0.lock();
        match &mut *s {
            State::Live(rx) => rx.poll_recv(cx).map(|c| c.map(|c| Ok(Frame::data(c)))),
            // The connection takes over and drops hyper's side with this
            // body: nothing to wake.
            State::Armed { parked, .. } => {
                *parked = true;
                Poll::Pending
            }
            State::Taken => Poll::Pending,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
