//! One connection: hyper's HTTP/1.1 connection with upgrades or its HTTP/2
//! one (which, [`super::sniff`] decides), watched by a timer that knows
//! whether a request is in flight.
//!
//! hyper's own HTTP/1 header timer also runs while a keep-alive connection
//! waits for its next request, and knows nothing of the time spent telling
//! HTTP/1 from HTTP/2, so the watch is ours and protocol-agnostic:
//! the I/O wrapper notes when bytes arrive, the service notes when requests
//! start and their responses end.
//!
//! An HTTP/1.1 connection whose GET is answered with an SSE stream is handed
//! over once the head is flushed: hyper's state is dropped and
//! [`super::handoff`] writes the rest (see [`crate::sse::feed`] for why).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use futures_util::future::Either;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;

use super::sniff::Proto;
use crate::sse::feed::{Feed, FeedHandle};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tower_service::Service;

use super::due::State;
use super::ConnLimits;

/// The shared activity record of one connection, and the bell that rings
/// the watch when a change makes the connection due before it would look
/// again.
struct Activity {
    state: Mutex<State>,
    limits: ConnLimits,
    changed: Notify,
    /// The SSE answer this HTTP/1.1 connection takes over once its head is
    /// flushed: at most one, as the connection ends with it (looked at on
    /// every flush, without a lock).
    offer: OnceLock<Arc<Feed>>,
    /// Rung when the offered answer's head is on the wire.
    handoff: Notify,
}

/// What the watch decided.
enum Expiry {
    /// A request header did not arrive in time: close at once.
    HeaderTimeout,
    /// Nothing in flight and nothing received for too long: close gracefully.
    Idle,
}

impl Activity {
    /// A connection made at `since` (its first request's header is due
    /// from then), held to `limits`.
    fn new(since: Instant, limits: ConnLimits) -> Self {
        Self {
            state: Mutex::new(State {
                active: 0,
                idle_since: since,
                read_since_request: None,
                body_pending: false,
                served: false,
                h2: false,
                armed: None,
            }),
            limits,
            changed: Notify::new(),
            offer: OnceLock::new(),
            handoff: Notify::new(),
        }
    }

    /// Arms `resp`'s SSE feed, when it has one and is a `200`, to be taken
    /// over once its head is flushed; its head then says `connection: close`.
    fn offer(&self, resp: &mut axum::response::Response) {
        // The chunks go to the socket as the pump encoded them: not when a
        // layer declared an encoding of the body (compression), or made it
        // something other than an event stream.
        let h = resp.headers();
        let event_stream = h
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if resp.status() != hyper::StatusCode::OK
            || !event_stream
            || h.contains_key(hyper::header::CONTENT_ENCODING)
        {
            return;
        }
        let Some(FeedHandle(feed)) = resp.extensions_mut().remove::<FeedHandle>() else {
            return;
        };
        if feed.arm() && self.offer.set(feed).is_ok() {
            resp.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
        }
    }

    /// hyper flushed: if it has polled the offered answer's body, its head
    /// (all hyper will write of it) is on the wire now.
    fn on_flushed(&self) {
        if self.offer.get().is_some_and(|f| f.parked()) {
            self.handoff.notify_one();
        }
    }

    /// The offered answer's chunks, for the writer that takes over.
    fn take_offer(&self) -> Option<crate::chunks::Receiver> {
        self.offer.get()?.take()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rings the watch if the change just made (under `s`) makes the
    /// connection due before the watch would look again.
    fn ring_if_due_sooner(&self, s: MutexGuard<'_, State>) {
        if s.due_sooner(&self.limits) {
            drop(s);
            self.changed.notify_one();
        }
    }

    /// Bytes arrived. Those read while a request in flight still reads its
    /// body are that body (a POST's body often comes in a read of its own);
    /// any others begin the next request's header (a pipelined one may
    /// arrive before the response ends: it is timed from that end).
    fn on_read(&self) {
        let mut s = self.lock();
        if !(s.active > 0 && s.body_pending) && s.read_since_request.is_none() {
            s.read_since_request = Some(Instant::now());
            self.ring_if_due_sooner(s);
        }
    }

    /// A request began: nothing is due while it is in flight, so the watch
    /// is not rung (it finds that out when it next looks).
    fn on_request(&self, h2: bool, body_pending: bool) {
        let mut s = self.lock();
        s.active += 1;
        s.served = true;
        s.h2 |= h2;
        s.body_pending = body_pending;
        s.read_since_request = None;
    }

    /// The request in flight has read its whole body.
    fn on_body_end(&self) {
        self.lock().body_pending = false;
    }

    fn on_response_end(&self) {
        let mut s = self.lock();
        s.active -= 1;
        if s.active == 0 {
            s.idle_since = Instant::now();
            self.ring_if_due_sooner(s);
        }
    }

    /// The verdict now, or the instant to look again, which the changes
    /// that follow compare with. It is never further off than the shorter
    /// of the two limits: any deadline a later read or response end makes
    /// is at least that far from it, so those never ring the watch (a
    /// connection's watch wakes once per that limit, instead of at each of
    /// its requests).
    fn check(&self) -> Result<Option<Instant>, Expiry> {
        let mut s = self.lock();
        let (header_due, idle_at) = s.deadlines(&self.limits);
        let now = Instant::now();
        if header_due.is_some_and(|due| now >= due) {
            return Err(Expiry::HeaderTimeout);
        }
        if idle_at.is_some_and(|at| now >= at) {
            return Err(Expiry::Idle);
        }
        let horizon = now
            + self
                .limits
                .header_read_timeout
                .min(self.limits.keep_alive_idle);
        let due = match (header_due, idle_at) {
            (Some(due), Some(at)) => due.min(at),
            (due, at) => due.or(at).unwrap_or(horizon),
        };
        s.armed = Some(due.min(horizon));
        Ok(s.armed)
    }

    /// Resolves when the connection has expired.
    async fn watch(&self) -> Expiry {
        loop {
            // A ring after the check is kept (`notify_one` leaves a permit
            // when nobody waits yet).
            let wake = self.changed.notified();
            match self.check() {
                Err(e) => return e,
                Ok(Some(at)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = wake => {}
                    }
                }
                Ok(None) => wake.await,
            }
        }
    }
}

/// The connection's I/O, noting every read in the activity record.
struct Watched<S> {
    io: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.on_read();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            self.activity.on_flushed();
        }
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// hyper-util's auto builder (it reads the first bytes to tell HTTP/1 from
/// HTTP/2), for a TLS connection that negotiated no ALPN protocol or a
/// cleartext one whose HTTP/2 preface has only partly arrived. Its settings
/// are the two per-protocol builders' in [`serve_one`]: change them together.
fn builder(limits: &ConnLimits) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    // Our watch times headers; hyper's would also end keep-alive waits early.
    b.http1().header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.h2_ping_interval);
    b
}

/// Serves one (plain or TLS) connection, made at `since`, with `proto`
/// until it ends, expires, or shutdown (`stop`) has let its in-flight
/// requests finish; or until an SSE answer is handed over, whose writer it
/// returns (to run as a task of its own).
pub(super) async fn serve_one<S>(
    io: S,
    app: super::App,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    closing: Arc<std::sync::atomic::AtomicBool>,
    proto: Proto,
    since: Instant,
) -> super::Then
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new(since, limits));
    let io = TokioIo::new(Watched {
        io,
        activity: activity.clone(),
    });
    let service = hyper::service::service_fn({
        let activity = activity.clone();
        // The connection's own handle on the router, called in place: a
        // clone per request would count a reference up and down on a cache
        // line that every request of every connection shares.
        let app = std::sync::Mutex::new(app);
        move |req: hyper::Request<Incoming>| {
            let h2 = req.version() == hyper::Version::HTTP_2;
            let body_pending = !h2 && !req.body().is_end_stream();
            activity.on_request(h2, body_pending);
            // Only an HTTP/1.1 connection's GET hands its SSE answer over: a
            // POST's stream ends with its call, and the connection is worth
            // keeping alive after it.
            let hand_over = proto == Proto::Http1
                && req.method() == hyper::Method::GET
                && req.version() == hyper::Version::HTTP_11;
            let in_flight = InFlight(activity.clone());
            let activity = activity.clone();
            // Only a body still to be read has an end worth telling.
            let req = if body_pending {
                req.map(|body| Body::new(Reading::new(body, activity.clone())))
            } else {
                req.map(Body::new)
            };
            let answer = {
                let mut app = app
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                // The router's future (320 bytes) boxed: held unboxed, it
                // would size every request's future, the endpoint's too.
                match app.endpoint_for(&req) {
                    Some(post) => Either::Left(post.call(req)),
                    None => Either::Right(Box::pin(app.router.call(req))),
                }
            };
            // Mapped, not awaited in an `async` block, which would hold the
            // answer's future twice (as captured, and as awaited): hyper
            // moves this future into its connection for every request.
            let closing = closing.clone();
            answer.map(move |resp| {
                let mut resp = resp?;
                if !h2 && closing.load(std::sync::atomic::Ordering::Relaxed) {
                    // The server stops: the balancer sends its next request
                    // elsewhere (hyper closes the connection after this answer).
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                if hand_over {
                    activity.offer(&mut resp);
                }
                Ok::<_, std::convert::Infallible>(
                    resp.map(|body| Body::new(Tracked::new(body, in_flight))),
                )
            })
        }
    });
    // Each protocol's connection boxed at its own size: the task then holds
    // only what the one it serves needs (an idle session's GET stream keeps
    // its connection's task for hours). hyper's connection types share no
    // trait for a graceful shutdown, hence one closure per type.
    type Served<S> = Pin<Box<dyn std::future::Future<Output = Option<Handover<S>>> + Send>>;
    let watched = (activity.clone(), stop.clone());
    // A connection that is never handed over (HTTP/2, or not told yet).
    macro_rules! to_its_end {
        ($conn:expr) => {{
            let conn = $conn;
            Box::pin(async move {
                let (activity, stop) = watched;
                tokio::pin!(conn);
                drive(conn, |c| c.graceful_shutdown(), &activity, stop).await;
                None
            })
        }};
    }
    let served: Served<S> = match proto {
        Proto::Http1 => {
            let mut b = hyper::server::conn::http1::Builder::new();
            // Our watch times headers (hyper's would also end keep-alive waits early).
            b.header_read_timeout(None);
            let mut conn = b.serve_connection(io, service).with_upgrades();
            Box::pin(async move {
                let (activity, stop) = watched;
                let ended = drive(
                    Pin::new(&mut conn),
                    |c| c.graceful_shutdown(),
                    &activity,
                    stop,
                )
                .await;
                if !ended {
                    return None;
                }
                // hyper's connection and its buffers go here; the socket stays.
                let io = conn.into_parts()?.io.into_inner().io;
                Some((io, activity.take_offer()?))
            })
        }
        Proto::Http2 => {
            let mut b = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            b.timer(TokioTimer::new())
                .keep_alive_interval(limits.h2_ping_interval);
            to_its_end!(b.serve_connection(io, service))
        }
        Proto::Either => to_its_end!(builder(&limits)
            .serve_connection_with_upgrades(io, service)
            .into_owned()),
    };
    drop(activity);
    let (io, rx) = served.await?;
    Some(Box::pin(super::handoff::stream(io, rx, stop)))
}

/// An HTTP/1.1 connection's socket and the SSE answer it writes from now on.
type Handover<S> = (S, crate::chunks::Receiver);

/// Drives `conn` to its end, closing it at once when a request header is
/// late, and gracefully (`shutdown`) when it has idled too long or the
/// server stops. True when it stopped instead because an SSE answer's head
/// is flushed and the connection is to be handed over (HTTP/1.1 only: the
/// caller takes the socket out of `conn`).
async fn drive<C, E>(
    mut conn: Pin<&mut C>,
    shutdown: impl Fn(Pin<&mut C>),
    activity: &Activity,
    mut stop: watch::Receiver<bool>,
) -> bool
where
    C: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let watch = activity.watch();
    tokio::pin!(watch);
    let mut closing = false;
    let mut watching = true;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return false;
            }
            () = activity.handoff.notified() => return true,
            expiry = &mut watch, if watching => match expiry {
                Expiry::HeaderTimeout => {
                    tracing::debug!("request header not received in time; closing");
                    return false;
                }
                Expiry::Idle => {
                    watching = false;
                    if !closing {
                        closing = true;
                        shutdown(conn.as_mut());
                    }
                }
            },
            _ = stop.wait_for(|s| *s), if !closing => {
                closing = true;
                shutdown(conn.as_mut());
            }
        }
    }
}

#[path = "conn_bodies.rs"]
mod bodies;
use bodies::{InFlight, Reading, Tracked};

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
