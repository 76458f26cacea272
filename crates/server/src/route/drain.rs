//! A graceful stop is a deploy step: drain, finish what was promised, give
//! the leases up, then stop.
//!
//! When the stop signal comes (SIGTERM, for [`crate::McpServer::serve`]),
//! the server *drains*:
//!
//! 1. `/readyz` answers 503 at once, so a balancer stops sending new work.
//!    For [`ConnLimits::drain_accept`](crate::ConnLimits::drain_accept) the
//!    server still accepts connections and serves requests, each HTTP/1.1
//!    answer with `Connection: close`, so a balancer that has not seen the
//!    503 yet (or reuses a kept-alive connection) loses nothing; then it stops
//!    accepting and lets every connection finish what it has in flight.
//! 2. [`settle`] waits, for at most the shutdown grace
//!    ([`ConnLimits::shutdown_grace`](crate::ConnLimits::shutdown_grace),
//!    counted from the signal), until nothing promised is left running here:
//!    no POST in flight (a call answered as JSON, or on its request stream to
//!    its last event), no call nor server request in any route's table,
//!    nothing a backend sent still uncommitted, no backend busy (a built-in
//!    tool's background work, a hosted handler that sent within the last
//!    poll), no durable task running. A route under an owner lease (a
//!    gateway's child process, an upstream session) that has settled gives
//!    its lease up at once ([`Leases::release`](mcp_resume_log::Leases::release))
//!    and closes: the next message of its session starts a child where it is
//!    claimed, without waiting for this instance's heartbeat to expire.
//! 3. Then the server stops: readers end (their clients resume elsewhere,
//!    or here after a restart: the log holds everything), sockets close with
//!    1001, work still running is cut off (logged with how much), the leases
//!    left are given up and the log is closed.
//!
//! A `kill -9` skips all of it: what was committed stays, and what only
//! this process held (a call's handler, a tool's background work) is lost;
//! calls it was running end as orphans (`-32603`, `server-restarted`) once
//! another instance, or this one restarted, sweeps them.
//!
//! Bounded: the drain ends at the grace whatever runs; nothing here waits
//! on a client.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::route::state::AppState;

/// How often [`settle`] looks again.
const POLL: Duration = Duration::from_millis(50);
/// Looks in a row that must find nothing running (a hosted handler counts
/// as busy if it sent anything since the look before).
const QUIET_LOOKS: u32 = 2;

/// Whether the server drains, and how many requests that must finish
/// before it stops are in flight.
#[derive(Default)]
pub(crate) struct Drain {
    draining: AtomicBool,
    in_flight: AtomicUsize,
}

/// One request the drain waits for, until dropped: a POST until its answer
/// is handed over, and a request stream's reader until its last event.
pub(crate) struct Hold(Arc<Drain>);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drain {
    /// Whether the server is stopping: `/readyz` answers 503.
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The stop began.
    pub(crate) fn begin(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Counts a request in flight until the [`Hold`] drops.
    pub(crate) fn hold(self: &Arc<Self>) -> Hold {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Hold(self.clone())
    }

    fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// Waits until nothing promised is left running on this instance (see the
/// module doc), giving up the leases of settled routes as it goes; `false`
/// when `deadline` came first (what still ran is logged).
pub(crate) async fn settle(state: &AppState, deadline: Instant) -> bool {
    let mut quiet = 0;
    loop {
        let requests = state.drain.in_flight();
        let routes = state.routes.settle(state).await;
        let tasks = state.task_store.as_ref().map_or(0, |t| t.running());
        if requests + routes + tasks == 0 {
            quiet += 1;
            if quiet >= QUIET_LOOKS {
                return true;
            }
        } else {
            quiet = 0;
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                requests,
                sessions = routes,
                tasks,
                "the shutdown grace is over with work still running here; it is cut off (its calls end with errors once swept)"
            );
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Gives up every lease this instance still holds (the stop goes on after
/// the grace): the next claim of each session takes it at once.
pub(crate) async fn release_all(state: &AppState) {
    for id in state.routes.leased() {
        if let Err(e) = state.log.release(&id, None).await {
            tracing::warn!(session = %id, error = %e, "could not give the session's lease up; another instance takes it once this one's heartbeat expires");
        }
    }
}

/// `resp` with its body holding `hold` until the body ends or is dropped:
/// an answer a backend streams itself (a stateless request's SSE answer),
/// which a graceful stop waits for to its end.
pub(crate) fn hold_body(resp: axum::response::Response, hold: Hold) -> axum::response::Response {
    resp.map(|body| axum::body::Body::new(Held { body, _hold: hold }))
}

/// A response body carrying a [`Hold`].
struct Held {
    body: axum::body::Body,
    _hold: Hold,
}

impl axum::body::HttpBody for Held {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
