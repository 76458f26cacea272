//! The cursor-safe upgrade of the session stream to WebSocket (docs/protocol.md 5).
//!
//! The decision runs before any byte of the response, in the order of 5.2;
//! the commit point is the log's `subscribe`; the 101 echoes the committed
//! cursor `C`; the socket task replays `prior+1 ..= C` and lets nothing above
//! `C` out until the client acks `C` (the [`Gate`]).

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use futures_util::SinkExt;
use mcp_resume_log::{LogError, Seq, StreamKey, Subscription};
use mcp_resume_proto::frame::{encode_cursor, encode_event, encode_heartbeat};
use mcp_resume_proto::{
    close, headers as h, ClientFrame, Gate, GateError, GateVerdict, SUBPROTOCOL,
};

use super::pin_guard::PinGuard;
use super::{live_session, session_cursor, CursorQuery, Principal, Want};
use crate::auth::offered_protocols;
use crate::error::ApiError;
use crate::route::state::AppState;
use crate::sse::REPLAY_CHUNK;

/// Client `message` frames of one socket handled at once.
const MESSAGE_TASKS: usize = 64;
/// Initial read buffer of a socket.
const READ_BUFFER: usize = 4 * 1024;
/// Bytes gathered before a write goes to the socket (replays are flushed per chunk anyway).
const WRITE_BUFFER: usize = 8 * 1024;

fn header_has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Step 2 of the decision, for every cursor-safe upgrade (a session's or a
/// task's stream): WebSocket version 13, our subprotocol offered, WebSockets
/// on; else 426 and nothing changes. `Ok(true)` when the client also offered
/// the cursor frame (it cannot read the 101's headers).
pub(super) fn safe_upgrade_offered(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<bool, ApiError> {
    let version_ok = headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v == "13");
    if !version_ok
        || !offered_protocols(headers).any(|p| p == SUBPROTOCOL)
        || !state.config.websocket
    {
        return Err(ApiError::UpgradeRequired);
    }
    Ok(offered_protocols(headers).any(|p| p == mcp_resume_proto::CURSOR_FRAME_SUBPROTOCOL))
}

/// Steps 1 to 5 of the decision; on success the 101, with the socket task spawned.
pub(crate) async fn upgrade(
    state: AppState,
    id: String,
    q: &CursorQuery,
    principal: Principal,
    parts: &mut Parts,
) -> Result<Response, ApiError> {
    let headers = &parts.headers;
    // 1. A valid WebSocket upgrade request at all.
    if parts.method != axum::http::Method::GET
        || !header_has_token(headers, header::CONNECTION, "upgrade")
        || !header_has_token(headers, header::UPGRADE, "websocket")
        || !headers.contains_key(header::SEC_WEBSOCKET_KEY)
    {
        return Err(ApiError::bad("invalid-upgrade", "a WebSocket upgrade needs GET, Connection: Upgrade, Upgrade: websocket and Sec-WebSocket-Key"));
    }
    // 2. Version 13 and our subprotocol, else 426 and nothing changes.
    let cursor_frame = safe_upgrade_offered(&state, headers)?;
    // 3. The session and the cursor.
    let prior = session_cursor(headers, q)?;
    if !live_session(&state, &id, headers, &principal, Want::Check)
        .await?
        .plain
    {
        super::subs::end_if_orphaned(&state, &id).await?;
    }
    let ws = WebSocketUpgrade::from_request_parts(parts, &())
        .await
        .map_err(|e| ApiError::bad("invalid-upgrade", e.body_text()))?
        .protocols([SUBPROTOCOL])
        .max_message_size(state.config.max_frame_bytes)
        .max_frame_size(state.config.max_frame_bytes)
        // tungstenite reserves 128 KiB per socket for reading by default; an idle
        // reader needs a few KiB, and the buffer grows for a large frame.
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(WRITE_BUFFER);
    // 4. The commit point: C and a tail after C, in one atomic step of the log,
    // with retention already pinned at the reader's first wanted event so that
    // no count trim can pass it between the decision and the 101 (a trim in
    // between would turn the 409 this decision owes into a 101 and a 4409).
    let unavailable = |e: LogError| match e {
        LogError::Unavailable(m) | LogError::Storage(m) => ApiError::Unavailable(m),
        other => other.into(),
    };
    let pin_at = match prior {
        Some(p) => p.saturating_add(1),
        None => {
            state
                .log
                .bounds(&id, StreamKey::Session)
                .await
                .map_err(unavailable)?
                .floor
        }
    };
    let pin = if state.config.unsafe_legacy_upgrade {
        None
    } else {
        Some(
            state
                .log
                .pin(
                    &id,
                    StreamKey::Session,
                    pin_at,
                    state.config.upgrade_timeout,
                )
                .await
                .map_err(unavailable)?,
        )
    };
    // Released on every way out: dropped with a refusal, or by the socket.
    let pin = PinGuard::new(&state, &id, pin);
    let (bounds, sub) = state
        .log
        .subscribe(&id, StreamKey::Session)
        .await
        .map_err(unavailable)?;
    let committed = bounds.head;
    if state.config.unsafe_legacy_upgrade {
        // docs/protocol.md 9: no echo, no replay, no gate; live from the head at the 101.
        state.metrics.upgrade("legacy");
        let token = state.tasks.token();
        let resp = ws.on_upgrade(move |socket| async move {
            legacy(state, id, sub, socket).await;
            drop(token);
        });
        return Ok(resp);
    }
    let prior = prior.unwrap_or(bounds.floor - 1);
    if let Err(d) = bounds.admit(prior) {
        state.metrics.upgrade("refused");
        return Err(ApiError::Discontinuity(d));
    }
    // The client's time to ack runs from the 101, not from the end of the replay.
    let ack_deadline = tokio::time::Instant::now() + state.config.upgrade_timeout;
    // 5. The 101, echoing C.
    let task_state = state.clone();
    let task_id = id.clone();
    let mut resp = ws
        .on_failed_upgrade({
            // The pin goes with the upgrade closure, dropped unused.
            let id = id.clone();
            move |e| tracing::info!(session = %id, error = %e, "WebSocket upgrade failed after the 101")
        })
        .on_upgrade(move |socket| {
            // axum spawns this task; the token makes shutdown wait for it too.
            let token = task_state.tasks.token();
            let conn = Conn {
                state: task_state,
                id: task_id,
                pin,
                gate: Gate::new(prior, committed),
                ack_deadline,
                cursor_frame,
                message_tasks: std::sync::Arc::new(tokio::sync::Semaphore::new(MESSAGE_TASKS)),
                socket,
            };
            async move {
                conn.run(sub).await;
                drop(token);
            }
        });
    resp.headers_mut()
        .insert(h::RESUME_CURSOR, HeaderValue::from(committed));
    state.metrics.upgrade("upgraded");
    tracing::debug!(session = %id, prior, committed, "upgraded");
    Ok(resp)
}

/// Why the socket task ended: a close code and a reason for the client.
pub(super) struct Closing(pub(super) u16, pub(super) String);

impl From<GateError> for Closing {
    fn from(e: GateError) -> Self {
        let code = match e {
            GateError::AckTimeout => close::ACK_TIMEOUT,
            _ => close::CURSOR_MISMATCH,
        };
        Closing(code, e.to_string())
    }
}

struct Conn {
    state: AppState,
    id: String,
    pin: PinGuard,
    gate: Gate,
    ack_deadline: tokio::time::Instant,
    /// Send `C` as the first frame (the client cannot read the 101's headers).
    cursor_frame: bool,
    message_tasks: std::sync::Arc<tokio::sync::Semaphore>,
    socket: WebSocket,
}

impl Conn {
    async fn run(mut self, sub: Subscription) {
        let _reader = self.state.metrics.reader("websocket");
        let outcome = self.serve(sub).await;
        self.pin.release().await;
        if let Err(Closing(code, reason)) = outcome {
            tracing::debug!(session = %self.id, code, %reason, "closing WebSocket");
            let frame = CloseFrame {
                code,
                reason: close_reason(&reason).into(),
            };
            let _ = self.socket.send(Message::Close(Some(frame))).await;
        }
    }

    async fn send_text(&mut self, text: String) -> Result<(), Closing> {
        self.socket
            .send(Message::Text(text.into()))
            .await
            .map_err(|_| Closing(close::NORMAL, String::new()))
    }

    /// The replay `prior+1 ..= C`, from the log.
    async fn replay(&mut self) -> Result<(), Closing> {
        while !self.gate.replay_done() {
            let after = self.gate.last_sent();
            let events = self
                .state
                .log
                .read(&self.id, StreamKey::Session, after, REPLAY_CHUNK)
                .await
                .map_err(log_close)?;
            if events.is_empty() {
                return Err(Closing(
                    close::CURSOR_MISMATCH,
                    format!("replay after {after} came back empty"),
                ));
            }
            for e in events {
                if e.seq > self.gate.committed() {
                    break;
                }
                if self.gate.offer(e.seq)? == GateVerdict::Send {
                    self.socket
                        .feed(Message::Text(
                            encode_event(e.seq, std::str::from_utf8(&e.message).unwrap_or("null"))
                                .into(),
                        ))
                        .await
                        .map_err(|_| Closing(close::NORMAL, String::new()))?;
                }
            }
            self.socket
                .flush()
                .await
                .map_err(|_| Closing(close::NORMAL, String::new()))?;
        }
        Ok(())
    }

    async fn serve(&mut self, mut sub: Subscription) -> Result<(), Closing> {
        if self.cursor_frame {
            self.send_text(encode_cursor(self.gate.committed())).await?;
        }
        self.replay().await?;
        let ack_deadline = self.ack_deadline;
        let mut shutdown = self.state.shutdown.clone();
        let keepalive = self.state.config.keepalive;
        let mut silence = tokio::time::Instant::now() + keepalive;
        let mut pending_heartbeat: Option<Seq> = None;
        let touch_every = self.state.config.reader_touch_every();
        let mut touched = tokio::time::Instant::now();
        loop {
            crate::sse::touch_every(&self.state, &self.id, touch_every, keepalive, &mut touched)
                .await;
            let open = self.gate.is_open();
            tokio::select! {
                frame = self.socket.recv() => match frame {
                    Some(Ok(Message::Text(text))) => self.on_client_frame(text.as_str()).await?,
                    Some(Ok(Message::Binary(_))) => return Err(Closing(close::UNSUPPORTED_DATA, "binary frames are not allowed".into())),
                    Some(Ok(Message::Close(_))) | None => return Ok(()),
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(read_error(e)),
                },
                ev = sub.next(), if open => {
                    // Whatever else is already buffered goes out in the same flush.
                    let mut next = Some(ev.map_err(log_close)?);
                    let mut sent = 0;
                    while let Some(ev) = next.take() {
                        self.gate.offer(ev.seq)?;
                        let frame = encode_event(ev.seq, std::str::from_utf8(&ev.message).unwrap_or("null"));
                        self.socket.feed(Message::Text(frame.into())).await.map_err(|_| Closing(close::NORMAL, String::new()))?;
                        sent += 1;
                        if sent < REPLAY_CHUNK {
                            next = sub.try_next();
                        }
                    }
                    self.socket.flush().await.map_err(|_| Closing(close::NORMAL, String::new()))?;
                    silence = tokio::time::Instant::now() + keepalive;
                    if pending_heartbeat.is_some_and(|hb| self.gate.heartbeat_allowed(hb)) {
                        self.send_text(encode_heartbeat(pending_heartbeat.take().unwrap_or_default())).await?;
                    }
                }
                _ = tokio::time::sleep_until(ack_deadline), if !open => {
                    self.gate.on_timeout()?;
                }
                _ = tokio::time::sleep_until(silence), if open => {
                    silence = tokio::time::Instant::now() + keepalive;
                    let head = self.state.log.bounds(&self.id, StreamKey::Session).await.map_err(log_close)?.head;
                    if self.gate.heartbeat_allowed(head) {
                        self.send_text(encode_heartbeat(head)).await?;
                    } else {
                        pending_heartbeat = Some(head);
                    }
                }
                _ = crate::route::state::stopped(&mut shutdown) => {
                    return Err(Closing(close::GOING_AWAY, "server shutting down; resume from your cursor".into()));
                }
            }
        }
    }

    async fn on_client_frame(&mut self, text: &str) -> Result<(), Closing> {
        match ClientFrame::parse(text) {
            Ok(ClientFrame::CursorAck { cursor }) => {
                self.gate.ack(cursor)?;
                self.pin.release().await;
                Ok(())
            }
            Ok(ClientFrame::Message { message }) => {
                let value: serde_json::Value = serde_json::from_str(message.get())
                    .map_err(|e| Closing(close::MALFORMED, e.to_string()))?;
                // At most MESSAGE_TASKS handled at once per socket: past that the
                // socket is not read until one finishes (back-pressure, nothing dropped).
                let permit = self
                    .message_tasks
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| Closing(close::GOING_AWAY, "server shutting down".into()))?;
                let (state, id) = (self.state.clone(), self.id.clone());
                self.state.spawn(async move {
                    super::relay::socket_message(&state, &id, value).await;
                    drop(permit);
                });
                Ok(())
            }
            Err(e) => Err(Closing(close::MALFORMED, e.to_string())),
        }
    }
}

fn log_close(e: LogError) -> Closing {
    match e {
        LogError::Lagged { cursor } => Closing(
            close::LAGGED,
            format!("reader too far behind; resume from {cursor}"),
        ),
        LogError::SessionEnded | LogError::NoSession(_) => {
            Closing(close::SESSION_ENDED, "the session ended".into())
        }
        LogError::Closed => Closing(
            close::GOING_AWAY,
            "server shutting down; resume from your cursor".into(),
        ),
        LogError::Truncated { .. } | LogError::DataLost { .. } => {
            Closing(close::CURSOR_MISMATCH, e.to_string())
        }
        // 1001: resume from the cursor, here or on another instance; a resume
        // meets 503 with Retry-After until the backend is back.
        LogError::Unavailable(m) => Closing(close::GOING_AWAY, format!("log unavailable: {m}")),
        other => Closing(close::GOING_AWAY, other.to_string()),
    }
}

/// A close reason fits in 123 bytes (RFC 6455 5.5.1: a control frame's
/// payload is at most 125 bytes, two of them the code); cut on a character boundary.
pub(super) fn close_reason(reason: &str) -> &str {
    const MAX: usize = 123;
    if reason.len() <= MAX {
        return reason;
    }
    let mut end = MAX;
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    &reason[..end]
}

/// What a failed read means for the close code: 1009 for a message or frame
/// over the limit (told by the WebSocket library's own error type), else 4400.
pub(super) fn read_error(e: axum::Error) -> Closing {
    let inner = e.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(c)) => {
            Closing(close::TOO_BIG, format!("frame over the limit: {c}"))
        }
        _ => Closing(close::MALFORMED, inner.to_string()),
    }
}

/// docs/protocol.md 9, on purpose: the failure mcp-resume exists to prevent.
async fn legacy(state: AppState, id: String, mut sub: Subscription, mut socket: WebSocket) {
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            ev = sub.next() => {
                let Ok(ev) = ev else { break };
                let text = encode_event(ev.seq, std::str::from_utf8(&ev.message).unwrap_or("null"));
                if socket.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            frame = socket.recv() => match frame {
                Some(Ok(Message::Text(text))) => {
                    if let Ok(ClientFrame::Message { message }) = ClientFrame::parse(text.as_str()) {
                        if let Ok(value) = serde_json::from_str(message.get()) {
                            let (task_state, id) = (state.clone(), id.clone());
                            state.spawn(async move { super::relay::socket_message(&task_state, &id, value).await });
                        }
                    }
                }
                Some(Ok(_)) => {}
                _ => break,
            },
            _ = crate::route::state::stopped(&mut shutdown) => break,
        }
    }
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code: close::GOING_AWAY,
            reason: "".into(),
        })))
        .await;
}
