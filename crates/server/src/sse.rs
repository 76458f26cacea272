//! The one SSE encoder, and the reader that streams a log from a cursor.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use bytes::{BufMut, Bytes, BytesMut};
use mcp_resume_log::{Event, LogError, Seq, StreamKey, Subscription};
use tokio::sync::mpsc;

use crate::state::AppState;

/// Events replayed per log read.
const REPLAY_CHUNK: usize = 512;

/// Appends one SSE event to `out`: `id`, optional `event`, `data` split on newlines.
pub fn encode(out: &mut BytesMut, id: &str, event: Option<&str>, data: &[u8]) {
    out.reserve(data.len() + id.len() + 32);
    out.put_slice(b"id: ");
    out.put_slice(id.as_bytes());
    out.put_u8(b'\n');
    if let Some(ev) = event {
        out.put_slice(b"event: ");
        out.put_slice(ev.as_bytes());
        out.put_u8(b'\n');
    }
    for line in data.split(|b| *b == b'\n') {
        out.put_slice(b"data: ");
        out.put_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.put_u8(b'\n');
    }
    out.put_u8(b'\n');
}

/// A comment line that says why the server ends a stream. SSE clients
/// ignore comments, so it is safe for every client and plain for a human (and
/// our own client logs it); the reader resumes from its cursor as after any end.
pub fn ending(code: &str, why: &str) -> Bytes {
    Bytes::from(format!(": error {code}: {}\n\n", why.replace('\n', " ")))
}

/// The priming event of PROTOCOL.md 4: the cursor, the retry advice, empty data.
pub fn priming(id: &str, retry: Duration) -> Bytes {
    Bytes::from(format!(
        "id: {id}\nretry: {}\ndata: \n\n",
        retry.as_millis()
    ))
}

/// How to spell an event id of `stream`.
pub fn event_id(stream: StreamKey, seq: Seq) -> String {
    match stream {
        StreamKey::Session => seq.to_string(),
        StreamKey::Request(r) => format!("{r}/{seq}"),
    }
}

/// Whether a request-stream message is the final response (it has `result` or `error`).
fn is_response(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(message)
        .map(|p| p.result.is_some() || p.error.is_some())
        .unwrap_or(false)
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
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(pump(state.clone(), id, stream, cursor, head, sub, tx));
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

async fn pump(
    state: AppState,
    id: String,
    stream: StreamKey,
    cursor: Seq,
    head: Seq,
    mut sub: Subscription,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let request_stream = matches!(stream, StreamKey::Request(_));
    let send_events = |events: &[Event]| -> (Bytes, bool) {
        let mut out = BytesMut::new();
        let mut done = false;
        for e in events {
            encode(
                &mut out,
                &event_id(stream, e.seq),
                Some("message"),
                &e.message,
            );
            if request_stream && is_response(&e.message) {
                done = true;
                break;
            }
        }
        (out.freeze(), done)
    };
    if tx
        .send(Ok(priming(&event_id(stream, cursor), state.config.retry)))
        .await
        .is_err()
    {
        return;
    }
    // Replay `cursor+1 ..= head` from the log.
    let mut after = cursor;
    while after < head {
        match state.log.read(&id, stream, after, REPLAY_CHUNK).await {
            Ok(events) if !events.is_empty() => {
                let upto: Vec<Event> = events.into_iter().take_while(|e| e.seq <= head).collect();
                after = upto.last().map(|e| e.seq).unwrap_or(head);
                let (chunk, done) = send_events(&upto);
                if tx.send(Ok(chunk)).await.is_err() || done {
                    return;
                }
            }
            Ok(_) => break,
            Err(e) => {
                // Trimmed under us: end the stream; the client's resume gets the 409.
                tracing::info!(session = %id, error = %e, "SSE replay ended");
                return;
            }
        }
    }
    let mut shutdown = state.shutdown.clone();
    loop {
        let next = tokio::select! {
            ev = sub.next() => ev,
            _ = tokio::time::sleep(state.config.keepalive) => {
                if tx.send(Ok(Bytes::from_static(b": keepalive\n\n"))).await.is_err() {
                    return;
                }
                continue;
            }
            _ = crate::state::stopped(&mut shutdown) => return,
            _ = tx.closed() => return,
        };
        match next {
            Ok(first) => {
                let mut batch = vec![first];
                while batch.len() < REPLAY_CHUNK {
                    match sub.try_next() {
                        Some(e) => batch.push(e),
                        None => break,
                    }
                }
                let (chunk, done) = send_events(&batch);
                if tx.send(Ok(chunk)).await.is_err() || done {
                    return;
                }
            }
            Err(LogError::Lagged { cursor }) => {
                tracing::info!(session = %id, cursor, "SSE reader lagged; ending its stream so it resumes");
                let why = format!("reader too far behind; resume from {cursor}");
                let _ = tx.send(Ok(ending("reader-lagged", &why))).await;
                return;
            }
            Err(e @ LogError::Unavailable(_)) => {
                tracing::warn!(session = %id, error = %e, "SSE stream ended: log unavailable");
                let _ = tx.send(Ok(ending("log-unavailable", &e.to_string()))).await;
                return;
            }
            Err(LogError::SessionEnded) => {
                let _ = tx
                    .send(Ok(ending("session-ended", "the session ended")))
                    .await;
                return;
            }
            Err(_) => return,
        }
    }
}
