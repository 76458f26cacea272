//! Reading what the upstream sends: a POST's answer (JSON or an SSE body,
//! resumed with `Last-Event-ID` when it drops) and the session's GET stream
//! of server-initiated messages.

use std::sync::Arc;
use std::time::Duration;

use mcp_resume_proto::sse::SseParser;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::{Sent, Shared};
use crate::backend::verbatim::Text;
use crate::backend::Outbound;

/// Most attempts to resume a POST's dropped SSE stream in a row without
/// getting an event (with backoff: about 8 s in all).
const RESUME_ATTEMPTS: u32 = 5;
/// The first wait before a resume; doubled after each failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between attempts to reopen the GET stream.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Where an SSE stream had got to, for resuming it.
#[derive(Default)]
struct Position {
    /// The id of the last event that had one.
    last_id: Option<String>,
    /// The server's `retry` advice.
    retry: Option<Duration>,
    /// The response to the call arrived.
    answered: bool,
    /// Events seen since the last (re)connect.
    events: u64,
}

/// Reads the answer to one POST and sends what it carries to the outbox;
/// `true` once the response to `sent`'s request came (always for a
/// notification or response). A dropped SSE stream is resumed from its last
/// event id, with backoff, for a bounded number of attempts.
pub(super) async fn read_answer(sh: &Arc<Shared>, resp: reqwest::Response, sent: &Sent) -> bool {
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if resp.status() == StatusCode::ACCEPTED {
        return sent.call.is_none();
    }
    if !is_sse {
        let body = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(session = %sh.session, error = %super::describe(e, &sh.url), "the upstream's answer broke off");
                return sent.call.is_none();
            }
        };
        if body.iter().all(u8::is_ascii_whitespace) {
            return sent.call.is_none();
        }
        let mut pos = Position::default();
        match Text::read(body) {
            Ok(Text::Message(Value::Array(items))) => {
                for m in items {
                    forward(sh, Text::Message(m), sent, &mut pos).await;
                }
            }
            Ok(m) => forward(sh, m, sent, &mut pos).await,
            Err(e) => {
                tracing::warn!(session = %sh.session, error = %e, "the upstream answered with a body that is not JSON")
            }
        }
        return pos.answered || sent.call.is_none();
    }
    let mut pos = Position::default();
    read_sse(sh, resp, sent, &mut pos).await;
    // A notification or response has no answer to wait for.
    let Some(call) = &sent.call else {
        return true;
    };
    let mut failures = 0;
    let mut wait = FIRST_BACKOFF;
    while !pos.answered {
        let Some(last) = pos.last_id.clone() else {
            return false;
        };
        if failures >= RESUME_ATTEMPTS {
            return false;
        }
        tokio::time::sleep(pos.retry.map_or(wait, |r| r.max(wait))).await;
        tracing::debug!(session = %sh.session, %call, %last, "resuming the upstream's stream for a call");
        let resp = sh
            .request(Method::GET)
            .header(ACCEPT, "text/event-stream")
            .header("last-event-id", last)
            .send()
            .await;
        pos.events = 0;
        match resp {
            Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                sh.end("the upstream ended the session");
                return false;
            }
            Ok(r) if r.status().is_success() => read_sse(sh, r, sent, &mut pos).await,
            Ok(r) => {
                tracing::debug!(session = %sh.session, status = %r.status(), "the upstream refused a resume")
            }
            Err(e) => {
                tracing::debug!(session = %sh.session, error = %super::describe(e, &sh.url), "a resume could not reach the upstream")
            }
        }
        if pos.events > 0 {
            failures = 0;
            wait = FIRST_BACKOFF;
        } else {
            failures += 1;
            wait *= 2;
        }
    }
    true
}

/// Reads one SSE body to its end, sending each event's message on.
async fn read_sse(sh: &Arc<Shared>, mut resp: reqwest::Response, sent: &Sent, pos: &mut Position) {
    let mut parser = SseParser::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(session = %sh.session, error = %super::describe(e, &sh.url), "the upstream's stream broke off");
                return;
            }
        };
        for ev in parser.feed(&chunk) {
            pos.events += 1;
            if ev.id.is_some() {
                pos.last_id = ev.id;
            }
            if let Some(ms) = ev.retry {
                pos.retry = Some(Duration::from_millis(ms));
            }
            // A priming event carries no message.
            if ev.data.trim().is_empty() {
                continue;
            }
            match Text::read(ev.data) {
                Ok(m) => forward(sh, m, sent, pos).await,
                Err(e) => {
                    tracing::warn!(session = %sh.session, error = %e, "an upstream event that is not JSON; ignored")
                }
            }
        }
        if pos.answered {
            // Its stream ends with the response; nothing more belongs to it.
            return;
        }
    }
}

/// Sends one upstream message to the outbox: a server request or progress
/// notification sent while `sent`'s request runs travels with that call; an
/// answer goes as the upstream wrote it.
async fn forward(sh: &Shared, message: Text, sent: &Sent, pos: &mut Position) {
    let message = match message {
        Text::Answer(id, text) => {
            answered(sh, sent, pos, &id, || {
                protocol_version(&serde_json::from_slice(&text).unwrap_or_default())
            });
            let _ = sh.outbox.send_answer(id, text).await;
            return;
        }
        Text::Message(message) => message,
    };
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id");
    let is_response = method.is_none()
        && id.is_some()
        && (message.get("result").is_some() || message.get("error").is_some());
    if method.is_none() && !is_response {
        // e.g. the empty object an event store replays for a priming event.
        tracing::debug!(session = %sh.session, "an upstream event that is no JSON-RPC message; ignored");
        return;
    }
    if let Some(id) = id.filter(|_| is_response) {
        answered(sh, sent, pos, id, || protocol_version(&message));
    }
    let related = match method {
        Some("notifications/progress") => sent.call.clone(),
        Some(_) if id.is_some() => sent.call.clone(),
        _ => None,
    };
    let _ = sh.outbox.send(Outbound { message, related }).await;
}

/// Notes an upstream answer to call `id`: if it answers `sent`, the call is
/// answered, and an `initialize` answer names the protocol version agreed
/// on (`version` reads it, only then).
fn answered(
    sh: &Shared,
    sent: &Sent,
    pos: &mut Position,
    id: &Value,
    version: impl FnOnce() -> Option<String>,
) {
    if Some(id) != sent.call.as_ref() {
        return;
    }
    pos.answered = true;
    if sent.initialize {
        sh.upstream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .version = version();
    }
}

/// The protocol version an `initialize` answer agreed on.
fn protocol_version(answer: &Value) -> Option<String> {
    answer
        .pointer("/result/protocolVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Follows the upstream's GET stream of server-initiated messages for as
/// long as the session lives, resuming it with `Last-Event-ID` (and
/// backoff) whenever it drops. `405` means the upstream has none.
pub(super) async fn listen(sh: Arc<Shared>) {
    let none = Sent {
        call: None,
        initialize: false,
    };
    let mut pos = Position::default();
    let mut wait = FIRST_BACKOFF;
    loop {
        let mut rb = sh.request(Method::GET).header(ACCEPT, "text/event-stream");
        if let Some(last) = &pos.last_id {
            rb = rb.header("last-event-id", last);
        }
        pos.events = 0;
        match rb.send().await {
            Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => {
                tracing::debug!(session = %sh.session, "the upstream has no GET stream");
                return;
            }
            Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                return sh.end("the upstream ended the session");
            }
            Ok(r) if r.status().is_success() => read_sse(&sh, r, &none, &mut pos).await,
            Ok(r)
                if r.status().is_client_error()
                    && !matches!(
                        r.status(),
                        StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS
                    ) =>
            {
                tracing::warn!(session = %sh.session, status = %r.status(), "the upstream refused its GET stream; server-initiated messages will not arrive");
                return;
            }
            Ok(r) => {
                tracing::debug!(session = %sh.session, status = %r.status(), "the upstream's GET stream could not open")
            }
            Err(e) => {
                tracing::debug!(session = %sh.session, error = %super::describe(e, &sh.url), "the upstream's GET stream could not open")
            }
        }
        wait = if pos.events > 0 {
            FIRST_BACKOFF
        } else {
            (wait * 2).min(MAX_BACKOFF)
        };
        tokio::time::sleep(pos.retry.map_or(wait, |r| r.max(wait))).await;
    }
}
