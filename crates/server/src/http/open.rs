//! `initialize`: a new session, created in the log with the client's params
//! (so that any instance can restore its backend later), its route opened
//! under a lease, and the backend's answer awaited as JSON.

use axum::http::HeaderValue;
use axum::response::Response;
use mcp_resume_proto::headers as h;
use serde_json::Value;

use super::guard::Principal;
use super::post::answer;
use super::relay::call_json;
use crate::error::ApiError;
use crate::mcp;
use crate::route;
use crate::route::state::AppState;
use crate::session::{new_session_id, SessionRecord};

/// `initialize` through the backend.
pub(super) async fn initialize(
    state: &AppState,
    principal: Principal,
    json: bool,
    message: Value,
) -> Result<Response, ApiError> {
    let (sid, reply) = open_session(state, principal, message).await?;
    let mut resp = answer(json, &[reply]);
    if let Some(sid) = sid {
        resp.headers_mut().insert(
            h::MCP_SESSION_ID,
            HeaderValue::from_str(&sid).map_err(|e| ApiError::Internal(e.to_string()))?,
        );
    }
    Ok(resp)
}

/// Creates a session for `initialize` request `message` and has its
/// backend answer it: the session's id (none when the backend refused: no
/// session is left behind) and the answer. For a POST's `initialize` and a
/// plain MCP WebSocket's first message (`ws_mcp`).
pub(super) async fn open_session(
    state: &AppState,
    principal: Principal,
    message: Value,
) -> Result<(Option<String>, Value), ApiError> {
    if state.log.live_sessions().await >= state.config.max_sessions {
        return Err(ApiError::TooMany(format!(
            "the server holds its maximum of {} sessions; end one (DELETE) or retry later",
            state.config.max_sessions
        )));
    }
    // The params are lent to the record while it is encoded, then handed
    // back to the message for the backend (not copied twice).
    let mut message = message;
    let params = message
        .get_mut("params")
        .map(Value::take)
        .unwrap_or(Value::Null);
    let sid = new_session_id();
    let mut record = SessionRecord {
        protocol_version: mcp::negotiate(&params).to_owned(),
        dynamic_tools: Vec::new(),
        principal,
        init: Some(params),
        task: None,
        listen: None,
    };
    let encoded = record.encode();
    if let Some(slot) = message.get_mut("params") {
        *slot = record.init.take().unwrap_or(Value::Null);
    }
    state.log.create_session(&sid, encoded).await?;
    let opened = match route::lease::claim_new(state, &sid).await {
        Ok(lease) => match state.routes.follow_bell(state).await {
            Ok(()) => state.routes.open(state, &sid, None, lease),
            Err(e) => return Err(e.into()),
        },
        Err(e) => Err(crate::backend::BackendError::Failed(e.to_string())),
    };
    let route = match opened {
        Ok(r) => r,
        Err(e) => {
            let _ = state.log.end_session(&sid).await;
            return Err(e.into());
        }
    };
    let id = message["id"].clone();
    let reply = call_json(state, &sid, &route, message)
        .await
        .into_value(&id);
    let Some(result) = reply.get("result") else {
        // The backend refused: no session is left behind.
        state.routes.close(&sid);
        let _ = state.log.end_session(&sid).await;
        return Ok((None, reply));
    };
    let version = result.get("protocolVersion").and_then(Value::as_str);
    if let Some(v) = version.filter(|v| *v != record.protocol_version) {
        state
            .update_record(&sid, |r| {
                r.protocol_version = v.to_owned();
                true
            })
            .await?;
    }
    // The next requests here are checked against what the record now
    // says without reading it (its `notifications/initialized` first).
    route.remember_head(
        record.principal.as_deref(),
        version.unwrap_or(&record.protocol_version),
    );
    tracing::debug!(session = %sid, "session initialized by the backend");
    Ok((Some(sid), reply))
}
