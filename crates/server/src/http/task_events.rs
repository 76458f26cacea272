//! `GET P/tasks/{taskId}/events`: a task's event stream (SEP-2694's
//! `tasks/stream`, docs/protocol.md 3.9) read by `GET`, from the cursor in
//! `Last-Event-ID` (or `?last_event_id=`), the draft's `seq`, as `after`:
//! as SSE (what `tasks/stream` answers a POST with, the events' SSE ids
//! being their seqs, for an `EventSource`), or upgraded to a WebSocket with
//! the cursor-safe handshake of section 5: the `101` echoes the task
//! stream's latest seq `C` in `X-MCP-Resume-Cursor` (and, for a client that
//! offered `mcp.resume.cursor-frame`, in a first `cursor` frame), the events
//! up to `C` are replayed at once, and none above `C` leaves before the
//! client's `{"type":"cursor-ack","cursor":C}`.
//!
//! A frame is `{"type":"event","seq":S,"message":M}` with `M` the
//! `notifications/tasks/event` itself. The socket closes with 1000 after the
//! terminal event; with 1001 when the server stops or the log is
//! unavailable (resume from the last seq); 4404 when the task expired; 4409
//! on a gap or a wrong ack; 4408 without an ack in time. Refusals before the
//! upgrade are those of `tasks/stream` (`events_gone`, `after` ahead,
//! another principal's task), as JSON.

use std::collections::VecDeque;

use axum::extract::rejection::QueryRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use mcp_resume_proto::frame::{encode_cursor, encode_event, encode_heartbeat};
use mcp_resume_proto::sse::{SseParser, KEEPALIVE};
use mcp_resume_proto::{close, headers as h, ClientFrame, Gate, GateVerdict, SUBPROTOCOL};
use serde_json::{json, Value};

use super::guard::{guard, query};
use super::CursorQuery;
use crate::error::ApiError;
use crate::route::state::AppState;
use crate::tasks::{self, Caller, TaskStore};

/// Serves `GET P/tasks/{taskId}/events`.
pub async fn task_events(
    State(state): State<AppState>,
    Path(task): Path<String>,
    q: Result<Query<CursorQuery>, QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    let (mut parts, _) = req.into_parts();
    let upgrade = parts.headers.contains_key(header::UPGRADE);
    let principal = guard(&state, &parts.headers, upgrade).await?;
    let q = query(q)?;
    let Some(store) = state.task_store.clone() else {
        return Err(ApiError::NoSession(task));
    };
    let header = parts
        .headers
        .get(h::LAST_EVENT_ID)
        .map(|v| v.to_str().unwrap_or("?"));
    let after = match header.or_else(|| q.raw()) {
        None => None,
        Some(v) => Some(mcp_resume_proto::task::parse_wire_cursor(v).ok_or_else(|| {
            ApiError::bad(
                "invalid-cursor",
                "a task stream's cursor is the seq of its last event read (a non-negative integer)",
            )
        })?),
    };
    // The request `tasks/stream` would be, checked and admitted the same way.
    let mut params = json!({"taskId": task, "_meta": {
        mcp_resume_proto::meta::PROTOCOL_VERSION: mcp_resume_proto::STATELESS_PROTOCOL_VERSIONS[0],
        // Reading a task's events is using the tasks extension.
        mcp_resume_proto::meta::CLIENT_CAPABILITIES: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}});
    if let Some(a) = after {
        params["after"] = json!(a);
    }
    let message = json!({"jsonrpc": "2.0", "id": 0, "method": "tasks/stream", "params": params});
    let opened =
        match tasks::stream::open(&store, &Caller(principal), &HeaderMap::new(), &message).await {
            Ok(o) => o,
            Err((status, reply)) => return Ok((status, axum::Json(reply)).into_response()),
        };
    if !upgrade {
        return Ok(sse(&state, store, opened));
    }
    let cursor_frame = super::ws::safe_upgrade_offered(&state, &parts.headers)?;
    // The session socket's limits on what a client may send (section 3.5),
    // not tungstenite's defaults (64 MiB messages, 16 MiB frames).
    let ws = WebSocketUpgrade::from_request_parts(&mut parts, &())
        .await
        .map_err(|e| ApiError::bad("invalid-upgrade", e.body_text()))?
        .max_message_size(state.config.max_frame_bytes)
        .max_frame_size(state.config.max_frame_bytes)
        .protocols([SUBPROTOCOL]);
    // On the wire, seq is the log's less one (the draft counts from 0).
    let (prior, committed) = opened.positions();
    let ack_deadline = tokio::time::Instant::now() + state.config.upgrade_timeout;
    let socket_state = state.clone();
    let mut resp = ws.on_upgrade(move |socket| async move {
        let token = socket_state.tasks.token();
        let conn = TaskSocket {
            gate: Gate::new(prior, committed),
            held: VecDeque::new(),
            socket,
            task: opened.task().to_owned(),
            store: store.clone(),
        };
        conn.run(socket_state, store, opened, cursor_frame, ack_deadline)
            .await;
        drop(token);
    });
    resp.headers_mut().insert(
        h::RESUME_CURSOR,
        HeaderValue::from(committed.saturating_sub(1)),
    );
    Ok(resp)
}

/// The stream of `opened` as an SSE response, pumped by a task of the server's.
pub(super) fn sse(state: &AppState, store: TaskStore, opened: tasks::stream::Opened) -> Response {
    let (tx, rx) = crate::chunks::channel(8);
    state.spawn(tasks::stream::pump(
        store,
        opened,
        tx,
        state.shutdown.clone(),
        state.config.keepalive,
    ));
    crate::sse::channel_response(rx)
}

/// One upgraded task stream.
struct TaskSocket {
    /// In log seqs (the wire's plus one).
    gate: Gate,
    /// Frames above `C` waiting for the ack, with their log seqs.
    held: VecDeque<(u64, String)>,
    socket: WebSocket,
    /// The task's id, for the heartbeat's head.
    task: String,
    store: TaskStore,
}

/// How the socket ends: a close code and reason.
struct Closing(u16, String);

impl TaskSocket {
    async fn run(
        mut self,
        state: AppState,
        store: TaskStore,
        opened: tasks::stream::Opened,
        cursor_frame: bool,
        ack_deadline: tokio::time::Instant,
    ) {
        let _reader = state.metrics.reader("websocket");
        let (tx, rx) = crate::chunks::channel(8);
        state.spawn(tasks::stream::pump(
            store,
            opened,
            tx,
            state.shutdown.clone(),
            state.config.keepalive,
        ));
        let committed = self.gate.committed().saturating_sub(1);
        if cursor_frame
            && self
                .socket
                .send(Message::Text(encode_cursor(committed).into()))
                .await
                .is_err()
        {
            return;
        }
        let outcome = self.serve(rx, ack_deadline).await;
        let Closing(code, reason) = outcome;
        let reason: String = reason.chars().take(120).collect();
        let _ = self
            .socket
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
    }

    async fn serve(
        &mut self,
        mut rx: crate::chunks::Receiver,
        ack_deadline: tokio::time::Instant,
    ) -> Closing {
        let mut parser = SseParser::new();
        let deadline = tokio::time::sleep_until(ack_deadline);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                chunk = rx.recv() => {
                    let Some(bytes) = chunk else {
                        return Closing(close::GOING_AWAY, "the task stream stopped; resume from the last seq".into());
                    };
                    if bytes.as_ref() == KEEPALIVE {
                        // The pump's keepalive (every keepalive of silence)
                        // is this socket's heartbeat, as on the session socket.
                        if let Err(c) = self.heartbeat().await {
                            return c;
                        }
                        continue;
                    }
                    for ev in parser.feed(&bytes) {
                        if ev.data.trim().is_empty() {
                            continue;
                        }
                        match ev.id.as_deref().map(str::parse::<u64>) {
                            Some(Ok(seq)) => {
                                let Some(at) = mcp_resume_proto::task::log_seq(seq) else {
                                    return Closing(close::CURSOR_MISMATCH, "an event past the last seq".into());
                                };
                                if let Err(c) = self.offer(at, encode_event(seq, &ev.data)).await {
                                    return c;
                                }
                            }
                            Some(Err(_)) => return Closing(close::CURSOR_MISMATCH, "an event without a seq".into()),
                            // The request's response: how the stream ended.
                            None => return self.ended(&ev.data).await,
                        }
                    }
                }
                msg = self.socket.recv() => match msg {
                    Some(Ok(Message::Text(text))) => match ClientFrame::parse(text.as_str()) {
                        Ok(ClientFrame::CursorAck { cursor }) => {
                            if let Err(c) = self.ack(cursor).await {
                                return c;
                            }
                        }
                        Ok(ClientFrame::Message { .. }) => {
                            return Closing(close::MALFORMED, "a task stream takes no messages; call tasks/* by POST".into())
                        }
                        Err(e) => return Closing(close::MALFORMED, e.to_string()),
                    },
                    Some(Ok(Message::Binary(_))) => return Closing(close::UNSUPPORTED_DATA, "text frames only".into()),
                    Some(Ok(Message::Close(_))) | None => return Closing(close::NORMAL, String::new()),
                    Some(Ok(_)) => {}
                    // 1009 for a message or frame over the limit, as on the session socket.
                    Some(Err(e)) => {
                        let super::ws::Closing(code, reason) = super::ws::read_error(e);
                        return Closing(code, reason);
                    }
                },
                _ = &mut deadline, if !self.gate.is_open() => {
                    return Closing(close::ACK_TIMEOUT, "no cursor-ack within the upgrade timeout".into());
                }
            }
        }
    }

    /// Sends event `seq` (a log seq) now, or holds it until the ack.
    async fn offer(&mut self, seq: u64, frame: String) -> Result<(), Closing> {
        if !self.held.is_empty() {
            self.held.push_back((seq, frame));
            return Ok(());
        }
        match self.gate.offer(seq) {
            Ok(GateVerdict::Send) => self.send(frame).await,
            Ok(GateVerdict::Hold) => {
                self.held.push_back((seq, frame));
                Ok(())
            }
            Err(e) => Err(Closing(close::CURSOR_MISMATCH, e.to_string())),
        }
    }

    /// Takes the client's `cursor-ack` of `cursor` (a wire seq), then sends
    /// what was held, in order.
    async fn ack(&mut self, cursor: u64) -> Result<(), Closing> {
        // A cursor no event can have (u64::MAX) is a wrong ack: 4409, never
        // a wrap (or, in a debug build, a panic of this socket's task).
        let at = mcp_resume_proto::task::log_seq(cursor).ok_or_else(|| {
            Closing(
                close::CURSOR_MISMATCH,
                format!("cursor-ack {cursor} is past every seq"),
            )
        })?;
        self.gate
            .ack(at)
            .map_err(|e| Closing(close::CURSOR_MISMATCH, e.to_string()))?;
        while let Some((seq, frame)) = self.held.pop_front() {
            match self.gate.offer(seq) {
                Ok(GateVerdict::Send) => self.send(frame).await?,
                Ok(GateVerdict::Hold) => unreachable!("the gate is open"),
                Err(e) => return Err(Closing(close::CURSOR_MISMATCH, e.to_string())),
            }
        }
        Ok(())
    }

    /// `{"type":"heartbeat","head":N}` with `N` the task stream's latest
    /// seq read from the log now, once the client acked and has been sent
    /// every event up to `N` (section 5.3); otherwise none this time.
    async fn heartbeat(&mut self) -> Result<(), Closing> {
        if !self.gate.is_open() || !self.held.is_empty() {
            return Ok(());
        }
        let log = self.store.log().clone();
        let head = match log.bounds(&self.task, tasks::events::EVENTS).await {
            Ok(b) => b.head,
            // The pump names what went wrong with the log.
            Err(_) => return Ok(()),
        };
        match head.checked_sub(1) {
            Some(wire) if self.gate.heartbeat_allowed(head) => {
                self.send(encode_heartbeat(wire)).await
            }
            _ => Ok(()),
        }
    }

    async fn send(&mut self, frame: String) -> Result<(), Closing> {
        self.socket
            .send(Message::Text(frame.into()))
            .await
            .map_err(|_| Closing(close::NORMAL, String::new()))
    }

    /// The end the stream's response names: 1000 after the terminal event
    /// (once the client has it: the held frames wait for the ack first).
    async fn ended(&mut self, response: &str) -> Closing {
        let v: Value = serde_json::from_str(response).unwrap_or_default();
        if v.get("result").is_some() {
            let deadline = tokio::time::sleep(std::time::Duration::from_secs(30));
            tokio::pin!(deadline);
            while !self.held.is_empty() {
                tokio::select! {
                    msg = self.socket.recv() => match msg {
                        Some(Ok(Message::Text(text))) => match ClientFrame::parse(text.as_str()) {
                            Ok(ClientFrame::CursorAck { cursor }) => {
                                if let Err(c) = self.ack(cursor).await {
                                    return c;
                                }
                            }
                            _ => return Closing(close::MALFORMED, "expected cursor-ack".into()),
                        },
                        Some(Ok(_)) => {}
                        _ => return Closing(close::NORMAL, String::new()),
                    },
                    _ = &mut deadline => return Closing(close::ACK_TIMEOUT, "no cursor-ack within the upgrade timeout".into()),
                }
            }
            return Closing(close::NORMAL, "the task ended".into());
        }
        let error = &v["error"];
        let why = error["message"]
            .as_str()
            .unwrap_or("the task stream ended")
            .to_owned();
        let code = match error["data"]["reason"].as_str() {
            Some("task-expired") => close::SESSION_ENDED,
            // Events the log lost or dropped under the replay: a gap, never
            // a "resume" into the same hole (1001).
            Some("log-gap" | "events_gone") => close::CURSOR_MISMATCH,
            _ => close::GOING_AWAY,
        };
        Closing(code, why)
    }
}
