//! CORS for browser clients of the allowed origins (tower-http): the
//! preflight of `POST`, `GET` and `DELETE`, the MCP request headers allowed,
//! and the headers a page must read exposed.
//!
//! The origin check itself ([`origin_allowed`]) is also the request guard's:
//! a request from an origin that is not allowed gets 403 whatever CORS says;
//! this layer only tells the browser what an allowed origin may do.
//!
//! Only requests with an `Origin` (or preflights) go through tower-http's
//! layer: for every other request it built a header map, joined the `Vary`
//! names into a new value and merged both into the response
//! (benches/results/echo-ceiling.md). Those responses get the same `Vary` as
//! a constant instead, so that a cache still never serves one to a browser's
//! request.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method, Request, Response};
use futures_util::future::{Either, FutureExt, Map};
use mcp_resume_proto::headers as h;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
use tower_layer::Layer as _;
use tower_service::Service;

use crate::names::SESSION_ID;
use crate::route::state::AppState;

/// What tower-http's CORS layer says responses vary by (its default).
const VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

/// The request headers a page of an allowed origin may send (lower case):
/// the MCP transport's (sections 3.3, 3.6: SEP-2243's `Mcp-Method` and
/// `Mcp-Name`) and W3C trace context. Any `Mcp-Param-*` too
/// ([`allowed_request_header`]).
const ALLOWED_HEADERS: &[&str] = &[
    "content-type",
    "authorization",
    "accept",
    h::MCP_SESSION_ID,
    h::MCP_PROTOCOL_VERSION,
    h::LAST_EVENT_ID,
    h::MCP_METHOD,
    h::MCP_NAME,
    "traceparent",
    "tracestate",
];

/// The prefix of SEP-2243's tool parameter headers (`Mcp-Param-{Name}`).
const PARAM_PREFIX: &str = "mcp-param-";

/// Whether a page may send request header `name` (any case).
fn allowed_request_header(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    ALLOWED_HEADERS.contains(&n.as_str())
        || n.strip_prefix(PARAM_PREFIX).is_some_and(|p| !p.is_empty())
}

/// A preflight's `Access-Control-Request-Headers` with only the names a
/// page may send: what the mirrored `Access-Control-Allow-Headers` grants.
/// A browser refuses the request if it asked for one more. None for an
/// origin that is not allowed (`origin_ok` false): it is granted nothing.
fn allowed_only<B>(req: &mut Request<B>, origin_ok: bool) {
    let asked: Vec<String> = req
        .headers()
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| origin_ok && allowed_request_header(n))
        .collect();
    let h = req.headers_mut();
    h.remove(header::ACCESS_CONTROL_REQUEST_HEADERS);
    if let Ok(v) = HeaderValue::from_str(&asked.join(",")) {
        if !asked.is_empty() {
            h.insert(header::ACCESS_CONTROL_REQUEST_HEADERS, v);
        }
    }
}

/// The CORS layer for the MCP routes of `state`'s server.
pub(crate) fn layer(state: &AppState) -> ForOrigins {
    let cors = cors(state);
    // tower-http checks its rules (it panics on ones a browser would refuse)
    // when it wraps a service: here, at start-up, not at a first request.
    let _ = cors.layer(());
    ForOrigins(Arc::new(Configured {
        cors,
        config: state.config.clone(),
    }))
}

/// tower-http's CORS layer as this server configures it.
fn cors(state: &AppState) -> CorsLayer {
    let config = state.config.clone();
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin.to_str().is_ok_and(|o| origin_allowed(&config, o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        // The preflight's own list, once [`allowed_only`] has taken out
        // every name not in [`ALLOWED_HEADERS`] or `Mcp-Param-*`: a fixed
        // list cannot name the parameter headers a tool defines.
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            SESSION_ID,
            HeaderName::from_static(h::RESUME_CURSOR),
            HeaderName::from_static(h::RESUME_LISTEN),
            header::WWW_AUTHENTICATE,
        ])
        .max_age(Duration::from_secs(600))
}

/// CORS ([`Cors`]) for the requests that carry `Origin` and for preflights;
/// the constant [`VARY`] on the responses to the others.
#[derive(Clone)]
pub(crate) struct ForOrigins(Arc<Configured>);

/// tower-http's layer, and the configuration whose origins it allows.
pub(crate) struct Configured {
    cors: CorsLayer,
    config: Arc<crate::ServerConfig>,
}

impl<S> tower_layer::Layer<S> for ForOrigins {
    type Service = ForOriginsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ForOriginsService {
            cors: self.0.clone(),
            inner,
        }
    }
}

/// The service of [`ForOrigins`]. Cloned for every request (axum's routes
/// are), so it holds the CORS configuration behind one `Arc` and builds
/// tower-http's service only for a request that needs it.
#[derive(Clone)]
pub(crate) struct ForOriginsService<S> {
    cors: Arc<Configured>,
    inner: S,
}

/// What a wrapped service answers.
type Answer<R, E> = Result<Response<R>, E>;

/// Appends the constant `Vary` to an answer (tower-http appends its own too).
type AddVary<R, E> = fn(Answer<R, E>) -> Answer<R, E>;

/// A wrapped service's future, with [`AddVary`].
type WithVary<F, R, E> = Map<F, AddVary<R, E>>;

fn with_vary<R, E>(r: Answer<R, E>) -> Answer<R, E> {
    r.map(|mut resp| {
        resp.headers_mut().append(header::VARY, VARY);
        resp
    })
}

impl<S, B, R> Service<Request<B>> for ForOriginsService<S>
where
    S: Service<Request<B>, Response = Response<R>> + Clone,
    R: Default,
{
    type Response = Response<R>;
    type Error = S::Error;
    /// tower-http's future is boxed: at 192 bytes (it carries the headers
    /// it will add) it made every request's future that large, a request
    /// without an `Origin` too, and hyper moves a request's future into its
    /// connection. A request with an `Origin` (a browser's) pays this one
    /// allocation more; not measured, as the benches send no `Origin`.
    type Future = Either<
        Pin<Box<tower_http::cors::ResponseFuture<S::Future>>>,
        WithVary<S::Future, R, S::Error>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if req.method() == Method::OPTIONS {
            let origin_ok = req
                .headers()
                .get(header::ORIGIN)
                .and_then(|o| o.to_str().ok())
                .is_some_and(|o| origin_allowed(&self.cors.config, o));
            allowed_only(&mut req, origin_ok);
        }
        if req.method() == Method::OPTIONS || req.headers().contains_key(header::ORIGIN) {
            // The service made ready goes into tower-http's; a clone stays.
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            Either::Left(Box::pin(self.cors.cors.layer(ready).call(req)))
        } else {
            let add: AddVary<R, S::Error> = with_vary;
            Either::Right(self.inner.call(req).map(add))
        }
    }
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
