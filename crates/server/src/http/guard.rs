//! What every endpoint checks before it acts: credentials, `Origin`,
//! `MCP-Protocol-Version`, `Accept`, the session and its principal, the cursor.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_proto::{
    headers as h, EventId, STATELESS_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS,
};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::jsonrpc;
use crate::names::{PROTOCOL_VERSION, SESSION_ID};
use crate::route::state::AppState;
use crate::route::SessionRoute;
use crate::session::{valid_session_id_bytes, SessionRecord};

/// The `last_event_id` query parameter.
#[derive(Debug, Deserialize, Default)]
pub struct CursorQuery {
    last_event_id: Option<String>,
}

/// Credentials (bearer token or OAuth access token), then `Origin` and
/// `MCP-Protocol-Version`, before anything else; returns who is calling.
pub(crate) async fn guard(
    state: &AppState,
    headers: &HeaderMap,
    token_in_subprotocol: bool,
) -> Result<Principal, ApiError> {
    let principal = credentials(state, headers, token_in_subprotocol).await?;
    check_version(headers)?;
    Ok(principal)
}

/// `GET P` or `DELETE P` without a session from a client of the stateless
/// era (its `MCP-Protocol-Version` names one): it has no session stream to
/// read and no session to end, 405. (A resumable listen stream is read with
/// its id as the session.)
pub(crate) fn refuse_stateless(headers: &HeaderMap) -> Result<(), ApiError> {
    let stateless = headers
        .get(h::MCP_PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| STATELESS_PROTOCOL_VERSIONS.contains(&v));
    if stateless && !headers.contains_key(h::MCP_SESSION_ID) {
        return Err(ApiError::MethodNotAllowed);
    }
    Ok(())
}

/// Credentials, then `Origin`: what every request, of either era, passes first.
pub(crate) async fn credentials(
    state: &AppState,
    headers: &HeaderMap,
    token_in_subprotocol: bool,
) -> Result<Principal, ApiError> {
    // Boxed where it runs: checking a token is a large future, and every
    // request's future (moved into a box per request) would be as large.
    let auth = &state.config.auth;
    let principal = if auth.is_enabled() {
        Box::pin(auth.authenticate(headers, token_in_subprotocol))
            .await?
            .map(|p| p.subject)
    } else {
        None
    };
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        if !crate::cors::origin_allowed(&state.config, origin) {
            return Err(ApiError::Forbidden(origin.to_owned()));
        }
    }
    Ok(principal)
}

/// A request's `MCP-Protocol-Version`, if any, must be one this server
/// speaks (a session's must then equal its negotiated one, [`live_session`]).
pub(crate) fn check_version(headers: &HeaderMap) -> Result<(), ApiError> {
    if let Some(v) = headers.get(PROTOCOL_VERSION) {
        let v = v.to_str().unwrap_or_default();
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&v) && !STATELESS_PROTOCOL_VERSIONS.contains(&v) {
            return Err(ApiError::bad(
                "unsupported-protocol-version",
                format!("MCP-Protocol-Version {v:?} is not supported; use one of {SUPPORTED_PROTOCOL_VERSIONS:?}"),
            ));
        }
    }
    Ok(())
}

/// What an `Accept` header allows.
#[derive(Clone, Copy)]
pub(super) struct Accepts {
    pub(super) json: bool,
    pub(super) sse: bool,
}

pub(super) fn accepts(headers: &HeaderMap) -> Accepts {
    // A value that is not visible ASCII counts as none.
    let Some(v) = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::as_bytes)
    else {
        return Accepts {
            json: true,
            sse: true,
        };
    };
    // One pass over the media ranges, on bytes (this runs on every request;
    // `str`'s pattern searchers cost more than the bytes they search).
    let mut a = Accepts {
        json: false,
        sse: false,
    };
    for range in v.split(|&b| b == b',') {
        let t = media_type(range);
        if t.eq_ignore_ascii_case(b"*/*") {
            return Accepts {
                json: true,
                sse: true,
            };
        }
        a.json |=
            t.eq_ignore_ascii_case(b"application/json") || t.eq_ignore_ascii_case(b"application/*");
        a.sse |= t.eq_ignore_ascii_case(b"text/event-stream") || t.eq_ignore_ascii_case(b"text/*");
    }
    a
}

/// The media type of one media range or `Content-Type` value: what comes
/// before its parameters (`;`), without the whitespace around it.
pub(super) fn media_type(value: &[u8]) -> &[u8] {
    let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
    value[..end].trim_ascii()
}

/// The session named by `Mcp-Session-Id`, which must exist.
pub(super) fn session_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(SESSION_ID) else {
        return Ok(None);
    };
    // An id this server made is lowercase hex, so visible ASCII: only
    // another value needs the ASCII check, for its error.
    if valid_session_id_bytes(v.as_bytes()) {
        return Ok(Some(String::from_utf8_lossy(v.as_bytes()).into_owned()));
    }
    let id = v
        .to_str()
        .map_err(|_| ApiError::bad("invalid-session-id", "Mcp-Session-Id must be visible ASCII"))?;
    Err(ApiError::NoSession(id.to_owned()))
}

/// Who is calling: the principal the guard authenticated (none when the
/// server asks for no credentials).
pub(crate) type Principal = Option<String>;

/// What a caller of [`live_session`] wants besides its verdict.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// The check alone (a GET, a DELETE, an upgrade): none of these counts
    /// as the session's handler being used, so none delays its parking.
    Check,
    /// The session's record too (a batch reads its revision).
    Record,
    /// The session's route here too, taken (counted as used) for a message
    /// the route is about to be given.
    Route,
}

/// What [`live_session`] found besides its verdict.
#[derive(Default)]
pub(crate) struct Live {
    /// The session's record, with [`Want::Record`].
    pub(crate) record: Option<SessionRecord>,
    /// With [`Want::Route`], the session's route on this instance if the
    /// check took it without waiting on anything (it is then counted as
    /// used): the message goes on with it instead of looking it up again
    /// (`route::lease::locate`). `None` sends the message to `locate`.
    pub(crate) route: Option<Arc<SessionRoute>>,
    /// The session is known, from its route or its head, to be an MCP
    /// session: not a listen stream, which its feeding instance's death
    /// ends, so a reader needs no read of its record to rule that out
    /// ([`super::subs::end_if_orphaned`]).
    pub(crate) plain: bool,
    /// The session's record as the check read it (its head was not known
    /// here yet): a route opened here for the message takes it instead of
    /// reading it again (`route::lease::locate_read`).
    pub(crate) read: Option<bytes::Bytes>,
}

/// The session `id`, live, touched, and fit for this request: created by the
/// same principal (any other gets 404, as if it did not exist) and, when the
/// request names an `MCP-Protocol-Version`, on that revision (400 otherwise).
/// Reads the session's record only when something needs checking against it.
pub(crate) async fn live_session(
    state: &AppState,
    id: &str,
    headers: &HeaderMap,
    principal: &Principal,
    want: Want,
) -> Result<Live, ApiError> {
    if let Err(e) = state.log.touch(id).await {
        state.heads.forget(id);
        return Err(e.into());
    }
    let version = headers.get(PROTOCOL_VERSION).and_then(|v| v.to_str().ok());
    if want != Want::Record && version.is_none() && principal.is_none() {
        return Ok(Live::default());
    }
    if want != Want::Record {
        // A session routed here was checked once already: its creator and
        // revision are kept with its route (the touch above still finds a
        // session ended elsewhere).
        let route = match want {
            Want::Route => state.routes.get(id),
            _ => state.routes.peek(id),
        };
        if let Some(known) = route.as_ref().and_then(|r| r.head()) {
            fits(
                id,
                principal,
                version,
                known.principal.as_deref(),
                false,
                known.version,
            )?;
            // A route remembers the heads of MCP sessions only.
            return Ok(Live {
                record: None,
                route: route.filter(|_| want == Want::Route),
                plain: true,
                read: None,
            });
        }
        let mut read = None;
        let head = match state.heads.get(id) {
            Some(head) => head,
            None => {
                let meta = state.log.session(id).await?.meta;
                let head = Arc::new(crate::session::SessionHead::decode(&meta));
                state.heads.put(id, head.clone());
                read = Some(meta);
                head
            }
        };
        fits(
            id,
            principal,
            version,
            head.principal.as_deref(),
            head.is_task(),
            &head.protocol_version,
        )?;
        let plain = !head.is_task() && !head.is_listen();
        if let Some(route) = route.filter(|_| plain) {
            route.remember_head(head.principal.as_deref(), &head.protocol_version);
        }
        // The route was taken before the record's read, which may wait on
        // the network: `locate` takes it afresh (it may have closed since).
        return Ok(Live {
            plain,
            read,
            ..Live::default()
        });
    }
    let rec = state.record(id).await?;
    fits(
        id,
        principal,
        version,
        rec.principal.as_deref(),
        rec.task.is_some(),
        &rec.protocol_version,
    )?;
    Ok(Live {
        plain: rec.task.is_none() && rec.listen.is_none(),
        record: Some(rec),
        route: None,
        read: None,
    })
}

/// Whether a request of `principal` naming revision `version` (if any) fits
/// session `id`, created by `owner` on revision `negotiated`: 404 for
/// another principal or a task's id, 400 for another revision.
fn fits(
    id: &str,
    principal: &Principal,
    version: Option<&str>,
    owner: Option<&str>,
    is_task: bool,
    negotiated: &str,
) -> Result<(), ApiError> {
    if owner != principal.as_deref() || is_task {
        return Err(ApiError::NoSession(id.to_owned()));
    }
    if let Some(v) = version {
        if v != negotiated {
            return Err(ApiError::bad(
                "protocol-version-mismatch",
                format!(
                    "MCP-Protocol-Version {v:?} differs from the session's negotiated {negotiated:?}"
                ),
            ));
        }
    }
    Ok(())
}

impl CursorQuery {
    /// The `last_event_id` parameter as given.
    pub(crate) fn raw(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }
}

/// The `last_event_id` query, parsed after the guard so that an anonymous
/// caller learns nothing, and refused with the JSON body of every other error.
pub(crate) fn query(
    q: Result<Query<CursorQuery>, QueryRejection>,
) -> Result<CursorQuery, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::bad("invalid-query", e.body_text()))
}

/// The cursor from `Last-Event-ID` or `last_event_id`, parsed once.
pub(crate) fn cursor(
    headers: &HeaderMap,
    query: &CursorQuery,
) -> Result<Option<EventId>, ApiError> {
    let raw = match headers.get(h::LAST_EVENT_ID) {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::invalid_cursor("Last-Event-ID is not ASCII"))?,
        ),
        None => query.last_event_id.as_deref(),
    };
    raw.map(|s| s.parse::<EventId>().map_err(ApiError::invalid_cursor))
        .transpose()
}

pub(super) fn jsonrpc_error(status: StatusCode, code: i64, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(jsonrpc::error(&Value::Null, code, message)),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(v: &[u8]) -> (bool, bool) {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_bytes(v).unwrap());
        let a = accepts(&h);
        (a.json, a.sse)
    }

    #[test]
    fn accept_is_read_range_by_range_with_parameters_case_and_wildcards() {
        assert_eq!(accept(b"application/json, text/event-stream"), (true, true));
        assert_eq!(accept(b"text/event-stream"), (false, true));
        assert_eq!(accept(b" Application/JSON ;q=0.9"), (true, false));
        assert_eq!(accept(b"text/*;q=0.1,application/*"), (true, true));
        assert_eq!(accept(b"*/*"), (true, true));
        assert_eq!(accept(b"text/html, image/png"), (false, false));
        // A media type that only starts like one of ours is not ours.
        assert_eq!(
            accept(b"application/jsonx, text/event-streams"),
            (false, false)
        );
        // A value with bytes that are not ASCII counts as no Accept at all.
        assert_eq!(
            accept(b"text/\xe9vent-stream, application/json"),
            (true, true)
        );
        assert_eq!(accept(b"text/html, \xe9"), (true, true));
        let none = accepts(&HeaderMap::new());
        assert!(none.json && none.sse, "no Accept allows both");
    }

    #[test]
    fn a_media_type_is_what_comes_before_its_parameters_trimmed() {
        assert_eq!(
            media_type(b" application/json ; charset=utf-8"),
            b"application/json"
        );
        assert_eq!(media_type(b"application/json"), b"application/json");
        assert_eq!(media_type(b";a=b"), b"");
        assert_eq!(media_type(b""), b"");
    }
}
