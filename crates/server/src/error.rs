//! HTTP errors with the JSON bodies of docs/protocol.md 3.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_log::LogError;
use mcp_resume_proto::{CursorDiscontinuity, ErrorBody};

/// Everything the HTTP layer refuses, each with its status and code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// 400 with a kebab-case code.
    #[error("{message}")]
    BadRequest {
        /// Stable code, e.g. `invalid-cursor`.
        code: &'static str,
        /// What was wrong.
        message: String,
    },
    /// 401 or 403: the credentials (a bearer token, an OAuth access token) do
    /// not admit the request; the response carries the `WWW-Authenticate` challenge.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
    /// 403: the `Origin` is not allowed.
    #[error("origin {0:?} is not allowed")]
    Forbidden(String),
    /// 404: unknown, expired or deleted session.
    #[error("session {0:?} does not exist (unknown, expired or deleted)")]
    NoSession(String),
    /// 405: method not allowed on this path.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 406: `Accept` lacks what the method needs.
    #[error("{0}")]
    NotAcceptable(String),
    /// 409: the cursor cannot be honoured.
    #[error("{0}")]
    Discontinuity(CursorDiscontinuity),
    /// 413: body over the limit.
    #[error("the body is over the limit of {0} bytes")]
    TooLarge(usize),
    /// 415: not `application/json`.
    #[error("Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 426: not a `mcp.resume.v1` WebSocket upgrade.
    #[error("upgrade with Sec-WebSocket-Version 13 and subprotocol mcp.resume.v1")]
    UpgradeRequired,
    /// 429: a cap (sessions, streams) was reached.
    #[error("{0}")]
    TooMany(String),
    /// 503: the log cannot be reached.
    #[error("the session log is unavailable: {0}")]
    Unavailable(String),
    /// 500: a fault of ours.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// 400 `invalid-cursor`.
    pub fn invalid_cursor(e: impl std::fmt::Display) -> Self {
        Self::BadRequest {
            code: "invalid-cursor",
            message: e.to_string(),
        }
    }

    /// 400 with a code.
    pub fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    fn status_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            Self::Auth(e) => (e.status(), "unauthorized"),
            Self::Forbidden(_) => (StatusCode::FORBIDDEN, "origin-not-allowed"),
            Self::NoSession(_) => (StatusCode::NOT_FOUND, "session-not-found"),
            Self::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed"),
            Self::NotAcceptable(_) => (StatusCode::NOT_ACCEPTABLE, "not-acceptable"),
            Self::Discontinuity(_) => (StatusCode::CONFLICT, "cursor-discontinuity"),
            Self::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "body-too-large"),
            Self::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type")
            }
            Self::UpgradeRequired => (StatusCode::UPGRADE_REQUIRED, "upgrade-required"),
            Self::TooMany(_) => (StatusCode::TOO_MANY_REQUESTS, "limit-reached"),
            Self::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "log-unavailable"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal-error"),
        }
    }
}

/// A backend that could not start, as the HTTP answer: 429 at a limit
/// (children, sessions), 500 otherwise.
impl From<crate::backend::BackendError> for ApiError {
    fn from(e: crate::backend::BackendError) -> Self {
        match e {
            crate::backend::BackendError::Busy(why) => Self::TooMany(why),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl From<LogError> for ApiError {
    fn from(e: LogError) -> Self {
        if let Some(d) = e.discontinuity() {
            return Self::Discontinuity(d);
        }
        match e {
            LogError::NoSession(id) => Self::NoSession(id),
            LogError::SessionEnded => Self::NoSession(String::new()),
            LogError::NoStream { stream, .. } => Self::bad(
                "invalid-cursor",
                format!("request stream {stream} does not exist in this session"),
            ),
            LogError::Unavailable(m) => Self::Unavailable(m),
            LogError::TooManyStreams { max, .. } => Self::TooMany(format!(
                "this session opened its maximum of {max} request streams; start a new session"
            )),
            other => Self::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let Self::Auth(e) = self {
            return e.into_response();
        }
        let (status, code) = self.status_code();
        let body = match &self {
            Self::Discontinuity(d) => d.to_body(),
            Self::UpgradeRequired => ErrorBody::new(code, self.to_string())
                .with("subprotocols", vec![mcp_resume_proto::SUBPROTOCOL]),
            _ => ErrorBody::new(code, self.to_string()),
        };
        if status.is_server_error() {
            tracing::warn!(%status, error = %self, "request failed");
        }
        let mut resp = (status, axum::Json(body)).into_response();
        let headers = resp.headers_mut();
        match self {
            Self::UpgradeRequired => {
                headers.insert(
                    header::SEC_WEBSOCKET_VERSION,
                    HeaderValue::from_static("13"),
                );
                headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
            }
            Self::Unavailable(_) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        resp
    }
}
