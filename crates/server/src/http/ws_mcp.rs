//! MCP over a plain WebSocket at the endpoint `P` (subprotocol `mcp`, the
//! SEP-1288 draft's framing, which the official TypeScript SDK 1.x's
//! `WebSocketClientTransport` speaks): every text frame, both ways, is one
//! JSON-RPC message. The client's first message is `initialize`, which
//! creates the session as a POST's would; what it sends after goes to the
//! session's route as a `message` frame of the cursor-safe socket does
//! (`relay::socket_message`: a request is answered on the session stream);
//! what the server sends is the session stream, read from the log from its
//! first event, each event's message as one frame. So even here nothing
//! reaches the client before it is committed.
//!
//! The draft leaves the session's lifetime open; here the socket is the
//! session (no `Mcp-Session-Id` travels, the client cannot resume): the
//! session ends when the socket closes, from either side. A client that
//! wants a resumable socket offers `mcp.resume.v1` on `P/session/{id}/events`
//! (docs/protocol.md 5).
//!
//! Bounded: a message or frame over the server's `max_frame_bytes` closes
//! with 1009; at most [`MESSAGE_TASKS`] client messages are handled at once
//! (the socket is not read while all are busy); a client that does not read
//! holds one bounded write buffer.

use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::http::{header, HeaderMap};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use mcp_resume_log::StreamKey;
use mcp_resume_proto::close;
use serde_json::Value;

use super::guard::Principal;
use crate::jsonrpc;
use crate::route::state::AppState;

/// The subprotocol of MCP over WebSocket (SEP-1288 draft).
pub(crate) const SUBPROTOCOL: &str = "mcp";

/// Client messages handled at once per socket.
const MESSAGE_TASKS: usize = 64;

/// RFC 6455's close code for a condition the server did not expect (the
/// log handed over an event out of order).
const INTERNAL: u16 = 1011;

/// Events read from the log per replay step.
const REPLAY_CHUNK: usize = 512;

/// Whether `headers` ask for the plain MCP subprotocol.
pub(crate) fn offered(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == SUBPROTOCOL)
}

/// Accepts the upgrade (`Sec-WebSocket-Protocol: mcp`) and serves the
/// socket as a session of `principal`.
pub(crate) fn accept(state: AppState, principal: Principal, ws: WebSocketUpgrade) -> Response {
    let max = state.config.max_frame_bytes;
    ws.protocols([SUBPROTOCOL])
        .max_message_size(max)
        .max_frame_size(max)
        .on_upgrade(move |socket| serve(state, principal, socket))
}

/// Why a socket closes, and the code it closes with.
struct Closing(u16, String);

async fn serve(state: AppState, principal: Principal, socket: WebSocket) {
    let _reader = state.metrics.reader("websocket");
    let (mut tx, mut rx) = socket.split();
    let mut shutdown = state.shutdown.clone();
    let opened = tokio::select! {
        opened = open(&state, principal, &mut rx) => opened,
        _ = crate::route::state::stopped(&mut shutdown) => Err(Closing(close::GOING_AWAY, "the server is stopping".into())),
    };
    let sid = match opened {
        Ok((sid, reply)) => {
            let sent = tx.send(Message::Text(reply.to_string().into())).await;
            match (sid, sent) {
                (Some(sid), Ok(())) => sid,
                (Some(sid), Err(_)) => {
                    end(&state, &sid).await;
                    return;
                }
                // Refused by the backend: its error went out; nothing to serve.
                (None, _) => {
                    let _ = tx
                        .send(close_frame(close::NORMAL, "initialize was refused"))
                        .await;
                    return;
                }
            }
        }
        Err(Closing(code, why)) => {
            let _ = tx.send(close_frame(code, &why)).await;
            return;
        }
    };
    let why = run(&state, &sid, &mut tx, &mut rx).await;
    end(&state, &sid).await;
    let _ = tx.send(close_frame(why.0, &why.1)).await;
}

/// Reads the client's first message, which must be `initialize`, and
/// creates the session with it: its id (none if the backend refused) and
/// the answer to send.
async fn open(
    state: &AppState,
    principal: Principal,
    rx: &mut futures_util::stream::SplitStream<WebSocket>,
) -> Result<(Option<String>, Value), Closing> {
    let text = loop {
        match rx.next().await {
            Some(Ok(Message::Text(t))) => break t,
            Some(Ok(Message::Close(_))) | None => {
                return Err(Closing(close::NORMAL, String::new()))
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(read_error(e)),
        }
    };
    let message: Value = serde_json::from_str(text.as_str())
        .map_err(|e| Closing(close::MALFORMED, format!("not JSON: {e}")))?;
    if message.get("method").and_then(Value::as_str) != Some("initialize")
        || message.get("id").is_none()
    {
        return Err(Closing(
            close::MALFORMED,
            "the first message on an MCP WebSocket must be the initialize request".into(),
        ));
    }
    super::open::open_session(state, principal, message)
        .await
        .map_err(|e| Closing(close::GOING_AWAY, e.to_string()))
}

/// Serves an open session: the session stream out, client messages in,
/// until either side ends; why it ended.
async fn run(
    state: &AppState,
    sid: &str,
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    rx: &mut futures_util::stream::SplitStream<WebSocket>,
) -> Closing {
    let (bounds, mut sub) = match state.log.subscribe(sid, StreamKey::Session).await {
        Ok(b) => b,
        Err(e) => return Closing(close::GOING_AWAY, e.to_string()),
    };
    // What the backend sent while initializing, from the stream's start.
    let mut sent = bounds.floor.saturating_sub(1);
    while sent < bounds.head {
        let events = match state
            .log
            .read(sid, StreamKey::Session, sent, REPLAY_CHUNK)
            .await
        {
            Ok(e) if !e.is_empty() => e,
            Ok(_) => return Closing(INTERNAL, "the log returned no event below its head".into()),
            Err(e) => return Closing(close::GOING_AWAY, e.to_string()),
        };
        for ev in events {
            if let Err(c) = send_event(tx, &mut sent, ev.seq, ev.message).await {
                return c;
            }
        }
    }
    let tasks = Arc::new(tokio::sync::Semaphore::new(MESSAGE_TASKS));
    let mut shutdown = state.shutdown.clone();
    loop {
        tokio::select! {
            ev = sub.next() => match ev {
                Ok(ev) => {
                    if let Err(c) = send_event(tx, &mut sent, ev.seq, ev.message).await {
                        return c;
                    }
                }
                Err(e) => return Closing(close::GOING_AWAY, e.to_string()),
            },
            frame = rx.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = match serde_json::from_str(text.as_str()) {
                        Ok(v) => v,
                        Err(e) => return Closing(close::MALFORMED, format!("not JSON: {e}")),
                    };
                    if let Some(refusal) = refuse(&value) {
                        if tx.send(Message::Text(refusal.to_string().into())).await.is_err() {
                            return Closing(close::NORMAL, String::new());
                        }
                        continue;
                    }
                    let Ok(permit) = tasks.clone().acquire_owned().await else {
                        return Closing(close::GOING_AWAY, String::new());
                    };
                    let (state, sid) = (state.clone(), sid.to_owned());
                    state.clone().spawn(async move {
                        super::relay::socket_message(&state, &sid, value).await;
                        drop(permit);
                    });
                }
                Some(Ok(Message::Close(_))) | None => return Closing(close::NORMAL, String::new()),
                Some(Ok(_)) => {}
                Some(Err(e)) => return read_error(e),
            },
            _ = crate::route::state::stopped(&mut shutdown) => {
                return Closing(close::GOING_AWAY, "the server is stopping".into());
            }
        }
    }
}

/// Sends event `seq` (the next after `sent`) as a frame of its message.
async fn send_event(
    tx: &mut futures_util::stream::SplitSink<WebSocket, Message>,
    sent: &mut u64,
    seq: u64,
    message: bytes::Bytes,
) -> Result<(), Closing> {
    if seq != *sent + 1 {
        return Err(Closing(
            INTERNAL,
            format!("the log returned {seq} after {sent}"),
        ));
    }
    let text = Utf8Bytes::try_from(message)
        .map_err(|_| Closing(close::GOING_AWAY, "an event that is not UTF-8".into()))?;
    tx.send(Message::Text(text))
        .await
        .map_err(|_| Closing(close::NORMAL, String::new()))?;
    *sent = seq;
    Ok(())
}

/// The answer to a client message the socket does not take: a batch, a
/// second `initialize`. `None` for one it hands to the session.
fn refuse(message: &Value) -> Option<Value> {
    if message.is_array() {
        return Some(jsonrpc::error(
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            "batches are not taken over a WebSocket",
        ));
    }
    if message.get("method").and_then(Value::as_str) == Some("initialize") {
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        return Some(jsonrpc::error(
            &id,
            jsonrpc::INVALID_REQUEST,
            "this socket's session is initialized already",
        ));
    }
    None
}

/// Ends the socket's session: it cannot be resumed without one.
async fn end(state: &AppState, sid: &str) {
    state.routes.close(sid);
    if let Err(e) = state.log.end_session(sid).await {
        tracing::debug!(session = %sid, error = %e, "could not end a WebSocket's session");
    }
}

fn close_frame(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: super::ws::close_reason(reason).into(),
    }))
}

/// 1009 for a frame over the limit, else 1002.
fn read_error(e: axum::Error) -> Closing {
    let inner = e.into_inner();
    match inner.downcast_ref::<tungstenite::Error>() {
        Some(tungstenite::Error::Capacity(c)) => {
            Closing(close::TOO_BIG, format!("frame over the limit: {c}"))
        }
        _ => Closing(1002, inner.to_string()),
    }
}
