//! CORS for browser clients of the allowed origins (tower-http): the
//! preflight of `POST`, `GET` and `DELETE`, the MCP request headers allowed,
//! and the headers a page must read exposed.
//!
//! The origin check itself ([`origin_allowed`]) is also the request guard's:
//! a request from an origin that is not allowed gets 403 whatever CORS says;
//! this layer only tells the browser what an allowed origin may do.

use std::time::Duration;

use axum::http::{header, HeaderName, Method};
use mcp_resume_proto::headers as h;
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::route::state::AppState;

/// The CORS layer for the MCP routes of `state`'s server.
pub(crate) fn layer(state: &AppState) -> CorsLayer {
    let config = state.config.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin.to_str().is_ok_and(|o| origin_allowed(&config, o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            header::ACCEPT,
            HeaderName::from_static(h::MCP_SESSION_ID),
            HeaderName::from_static(h::MCP_PROTOCOL_VERSION),
            HeaderName::from_static(h::LAST_EVENT_ID),
            HeaderName::from_static(h::MCP_METHOD),
            HeaderName::from_static(h::MCP_NAME),
        ])
        .expose_headers([
            HeaderName::from_static(h::MCP_SESSION_ID),
            HeaderName::from_static(h::RESUME_CURSOR),
            HeaderName::from_static(h::RESUME_LISTEN),
            header::WWW_AUTHENTICATE,
        ])
        .max_age(Duration::from_secs(600))
}

/// Whether a request from `origin` may be served: one of the configured
/// origins (`*` for any), or a loopback one when those are allowed.
pub(crate) fn origin_allowed(config: &crate::ServerConfig, origin: &str) -> bool {
    if config
        .allowed_origins
        .iter()
        .any(|o| o == "*" || o == origin)
    {
        return true;
    }
    if !config.allow_loopback_origins {
        return false;
    }
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = if rest.starts_with('[') {
        rest.split_once(']')
            .map(|(h, _)| &h[1..])
            .unwrap_or_default()
    } else {
        rest.split(':').next().unwrap_or_default()
    };
    matches!(host, "localhost" | "127.0.0.1" | "::1")
}
