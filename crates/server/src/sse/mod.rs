//! The one SSE encoder, and the reader that streams a log from a cursor.

use crate::chunks;
use crate::route::state::AppState;
use axum::body::Body;
use axum::http::Response;
use bytes::Bytes;
use mcp_resume_log::{Event, LogError, Seq, StreamKey, Subscription};
use mcp_resume_proto::sse::{encode, ending, priming, KEEPALIVE};

pub(crate) mod feed;

/// Events replayed per log read, and the most live events sent in one write.
pub(crate) const REPLAY_CHUNK: usize = 512;

/// How to spell an event id of `stream`.
pub fn event_id(stream: StreamKey, seq: Seq) -> String {
    match stream {
        StreamKey::Session => seq.to_string(),
        StreamKey::Request(r) => format!("{r}/{seq}"),
    }
}

/// A `200 text/event-stream` response that reads `stream` of session `id`
/// after `cursor`: priming event, replay, then live from the subscription
/// (the commit point already taken by the caller), with keepalives.
///
/// Request streams end after their response; the session stream lives until
/// the client goes, the session ends, the reader lags, or the server stops.
pub fn respond(
    state: AppState,
    id: String,
    stream: StreamKey,
    cursor: Seq,
    head: Seq,
    sub: Subscription,
) -> Response<Body> {
    let (tx, rx) = chunks::channel(8);
    // A request stream ends with its call's answer, which a graceful stop
    // waits to deliver; a session stream lives until the stop ends it.
    let hold = matches!(stream, StreamKey::Request(_)).then(|| state.drain.hold());
    let pump = pump(state.clone(), id, stream, cursor, head, sub, tx);
    state.spawn(async move {
        pump.await;
        drop(hold);
    });
    channel_response(rx)
}

/// A `200 text/event-stream` response whose body is what `rx` receives. Its
/// [`feed::FeedHandle`] lets an HTTP/1.1 connection write the chunks itself
/// once the head is out (see [`feed`]).
pub(crate) fn channel_response(rx: chunks::Receiver) -> Response<Body> {
    let (feed, body) = feed::Feed::new(rx);
    let mut resp = crate::backend::sse_response(Body::new(body));
    resp.extensions_mut().insert(feed::FeedHandle(feed));
    resp
}

/// Where the pump is in its stream: the last seq sent, checked for contiguity.
struct Position {
    stream: StreamKey,
    last: Seq,
}

/// What the pump does after sending a chunk.
enum Next {
    /// Keep reading.
    More,
    /// The request stream's final response went out: the stream is done.
    Done,
    /// The log handed over a seq that is not the next one: end loudly, why.
    Gap(String),
}

impl Position {
    /// Encodes `events` while each is exactly the next seq. A seq that is not
    /// `last + 1` is a gap (or a repeat) in what the log handed over: what came
    /// before it is still sent, then the stream ends loudly rather than skip.
    fn encode(&mut self, events: &[Event]) -> (Bytes, Next) {
        let mut out = Vec::new();
        for e in events {
            if e.seq != self.last + 1 {
                let why = format!(
                    "the log returned {} after {}; resume from {}",
                    e.seq, self.last, self.last
                );
                return (out.into(), Next::Gap(why));
            }
            self.last = e.seq;
            encode(
                &mut out,
                Some(&event_id(self.stream, e.seq)),
                Some("message"),
                &e.message,
            );
            if matches!(self.stream, StreamKey::Request(_))
                && crate::jsonrpc::is_response(&e.message)
            {
                return (out.into(), Next::Done);
            }
        }
        (out.into(), Next::More)
    }

    /// Sends what [`Position::encode`] made; false when the pump must stop.
    async fn deliver(
        &mut self,
        events: &[Event],
        id: &str,
        tx: &chunks::Sender,
        shutdown: &mut tokio::sync::watch::Receiver<bool>,
    ) -> bool {
        let (chunk, next) = self.encode(events);
        if !chunk.is_empty() && !send(tx, shutdown, chunk).await {
            return false;
        }
        match next {
            Next::More => true,
            Next::Done => false,
            Next::Gap(why) => {
                tracing::warn!(session = %id, "{why}");
                let _ = send(tx, shutdown, Bytes::from(ending("log-gap", &why))).await;
                false
            }
        }
    }
}

/// Sends one chunk unless the client is gone or the server stops first (a
/// client that does not read must not hold a pump past shutdown).
async fn send(
    tx: &chunks::Sender,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
    chunk: Bytes,
) -> bool {
    tokio::select! {
        sent = tx.send(chunk) => sent.is_ok(),
        _ = crate::route::state::stopped(shutdown) => false,
    }
}

/// What woke an idle pump.
enum Woke {
    /// The subscription's next event, or why it ended.
    Event(Result<Event, LogError>),
    /// A keepalive's worth of silence.
    Quiet,
}

/// Streams `stream` of session `id` to `tx`: the priming event, the replay
/// up to `head`, then live. Every session with an open GET stream has one of
/// these waiting for hours, so what it awaits only now and then (the replay,
/// a delivery, a keepalive, an ending) is boxed and the task itself stays
/// small.
async fn pump(
    state: AppState,
    id: String,
    stream: StreamKey,
    cursor: Seq,
    head: Seq,
    mut sub: Subscription,
    tx: chunks::Sender,
) {
    let _reader = state.metrics.reader("sse");
    let mut shutdown = state.shutdown.clone();
    let mut pos = Position {
        stream,
        last: cursor,
    };
    if !Box::pin(start(&state, &id, head, &mut pos, &tx, &mut shutdown)).await {
        return;
    }
    let mut touched = tokio::time::Instant::now();
    loop {
        // An open reader is activity: its session does not idle out under it.
        if touched.elapsed() >= state.config.reader_touch_every() {
            Box::pin(touch_every(
                &state,
                &id,
                state.config.reader_touch_every(),
                state.config.keepalive,
                &mut touched,
            ))
            .await;
        }
        let woke = tokio::select! {
            ev = sub.next() => Woke::Event(ev),
            _ = tokio::time::sleep(state.config.keepalive) => Woke::Quiet,
            _ = crate::route::state::stopped(&mut shutdown) => return,
            _ = tx.closed() => return,
        };
        let first = match woke {
            Woke::Event(Ok(first)) => first,
            Woke::Event(Err(e)) => {
                Box::pin(end_with(&id, e, &tx, &mut shutdown)).await;
                return;
            }
            Woke::Quiet => {
                if !Box::pin(quiet(&state, &id, stream, &tx, &mut shutdown)).await {
                    return;
                }
                continue;
            }
        };
        let mut batch = vec![first];
        while batch.len() < REPLAY_CHUNK {
            match sub.try_next() {
                Some(e) => batch.push(e),
                None => break,
            }
        }
        if !Box::pin(pos.deliver(&batch, &id, &tx, &mut shutdown)).await {
            return;
        }
    }
}

/// The priming event, then the replay of `pos.last+1 ..= head` from the log;
/// false when the stream is over (the client went, or the replay ended it).
async fn start(
    state: &AppState,
    id: &str,
    head: Seq,
    pos: &mut Position,
    tx: &chunks::Sender,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let primer = priming(
        &event_id(pos.stream, pos.last),
        state.config.retry.as_millis(),
    );
    if !send(tx, shutdown, primer.into()).await {
        return false;
    }
    // Every event up to `head` is committed, so a short or empty read below
    // it is a fault, never the end.
    while pos.last < head {
        let events = match state.log.read(id, pos.stream, pos.last, REPLAY_CHUNK).await {
            Ok(events) if !events.is_empty() => events,
            Ok(_) => {
                let why = format!(
                    "the log returned nothing after {} below the head {head}; resume from {}",
                    pos.last, pos.last
                );
                tracing::warn!(session = %id, "{why}");
                let _ = send(tx, shutdown, Bytes::from(ending("log-gap", &why))).await;
                return false;
            }
            Err(e) => {
                // Trimmed under us (the resume gets its 409) or the log went away.
                tracing::info!(session = %id, error = %e, "SSE replay ended");
                let _ = send(
                    tx,
                    shutdown,
                    Bytes::from(ending(log_code(&e), &e.to_string())),
                )
                .await;
                return false;
            }
        };
        let upto: Vec<Event> = events.into_iter().take_while(|e| e.seq <= head).collect();
        if !pos.deliver(&upto, id, tx, shutdown).await {
            return false;
        }
    }
    true
}

/// A keepalive's worth of silence: a request stream's handler may have died
/// with another instance since this reader began (a shared log), so the call
/// is ended then (its error arrives through the subscription); then the
/// keepalive comment. False when the client is gone.
async fn quiet(
    state: &AppState,
    id: &str,
    stream: StreamKey,
    tx: &chunks::Sender,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    if let StreamKey::Request(r) = stream {
        if let Err(e) = crate::route::orphans::end_if_orphaned(state, id, r).await {
            tracing::debug!(session = %id, stream = r, error = %e, "orphan check failed");
        }
    }
    send(tx, shutdown, Bytes::from_static(KEEPALIVE)).await
}

/// Ends the stream with the comment that says why the log ended it.
async fn end_with(
    id: &str,
    e: LogError,
    tx: &chunks::Sender,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) {
    if let LogError::Lagged { cursor } = e {
        tracing::info!(session = %id, cursor, "SSE reader lagged; ending its stream so it resumes");
    } else {
        tracing::info!(session = %id, error = %e, "SSE stream ended by the log");
    }
    let why = match e {
        LogError::Lagged { cursor } => format!("reader too far behind; resume from {cursor}"),
        LogError::SessionEnded => "the session ended".into(),
        ref other => other.to_string(),
    };
    let _ = send(tx, shutdown, Bytes::from(ending(log_code(&e), &why))).await;
}

/// The code in an ending comment for a log error.
fn log_code(e: &LogError) -> &'static str {
    match e {
        LogError::Lagged { .. } => "reader-lagged",
        LogError::Unavailable(_) => "log-unavailable",
        LogError::SessionEnded | LogError::NoSession(_) => "session-ended",
        LogError::Truncated { .. } => "cursor-truncated",
        LogError::DataLost { .. } => "data-lost",
        _ => "log-error",
    }
}

/// Marks session `id` as used when `every` has passed since `touched`: an
/// open reader (SSE or WebSocket, of a session or a listen stream) keeps its
/// session from idle expiry, at one touch per `every` whatever the traffic
/// (`every` is [`crate::ServerConfig::reader_touch_every`]). A touch that
/// fails is tried again `retry` later (the keepalive), not a whole `every`.
pub(crate) async fn touch_every(
    state: &AppState,
    id: &str,
    every: std::time::Duration,
    retry: std::time::Duration,
    touched: &mut tokio::time::Instant,
) {
    if touched.elapsed() < every {
        return;
    }
    *touched = tokio::time::Instant::now();
    if let Err(e) = state.log.touch(id).await {
        tracing::debug!(session = %id, error = %e, "an open reader could not keep its session alive");
        if let Some(sooner) = touched.checked_sub(every.saturating_sub(retry)) {
            *touched = sooner;
        }
    }
}
