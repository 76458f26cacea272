//! The bodies that tell a connection's watch ([`super::Activity`]) about
//! its requests: a request's body when it has been read whole, a response's
//! when it has ended (or been dropped).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};

use super::Activity;

/// Counts a request as in flight until its response body ends or is dropped.
pub(super) struct InFlight(pub(super) Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.on_response_end();
    }
}

/// An HTTP/1 request's body, telling the watch when it has been read whole
/// (what is read after that is the next request's header).
pub(super) struct Reading {
    body: Incoming,
    /// Taken once the end is told.
    activity: Option<Arc<Activity>>,
}

impl Reading {
    pub(super) fn new(body: Incoming, activity: Arc<Activity>) -> Self {
        Self {
            body,
            activity: Some(activity),
        }
    }
}

impl HttpBody for Reading {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || self.body.is_end_stream() {
            if let Some(activity) = self.activity.take() {
                activity.on_body_end();
            }
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body carrying its request's [`InFlight`].
pub(super) struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl Tracked {
    pub(super) fn new(body: Body, in_flight: InFlight) -> Self {
        Self {
            body,
            _in_flight: in_flight,
        }
    }
}

impl HttpBody for Tracked {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
