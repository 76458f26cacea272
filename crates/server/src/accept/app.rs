//! What every connection serves: the application's router and, where the
//! server serves its own router ([`crate::McpServer::serve`]), the MCP
//! endpoint's POST called without the router in front of it.
//!
//! A session's POST is most of what a busy server answers. Through the router
//! it pays for matching the path, the route's boxed service (cloned into a new
//! box, its future boxed again) and the response's length header, which hyper
//! writes itself for a body of known length (over HTTP/2 only for a body that
//! is not empty: a `202` then has no `content-length: 0`, which HTTP/2 does
//! not need); benches/results/echo-ceiling.md has what that cost. Called
//! directly, it is the same service under the same layers (CORS, the request's
//! span) that the router's route for it holds.
//!
//! The connection calls it without asking whether it is ready, as axum's route
//! would: every layer of it is always ready (`Traced`, `ForOriginsService`,
//! `PostService`). A layer that may not be (a limit, a buffer) must not be
//! added to it without that.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::Method;
use axum::Router;

use crate::cors::ForOriginsService;
use crate::http::PostService;
use crate::trace::Traced;

/// The MCP endpoint's POST under its layers, as the router's route has it.
pub(crate) type Endpoint = Traced<ForOriginsService<PostService>>;

/// The router, and the endpoint's POST where the router is the server's own.
#[derive(Clone)]
pub(crate) struct App {
    pub(super) router: Router,
    post: Option<(Arc<str>, Endpoint)>,
}

impl App {
    /// `router` alone: an application that merged the server's routes with
    /// its own may have put layers around the whole, which every request
    /// must pass.
    pub(crate) fn router(router: Router) -> Self {
        Self { router, post: None }
    }

    /// The server's own `router`, with its endpoint at `path` answered by
    /// `post` (the service the router's route for it holds).
    pub(crate) fn with_endpoint(router: Router, path: &str, post: Endpoint) -> Self {
        Self {
            router,
            post: Some((path.into(), post)),
        }
    }

    /// The endpoint's service, if `req` is a POST to it.
    pub(super) fn endpoint_for(&mut self, req: &Request) -> Option<&mut Endpoint> {
        match &mut self.post {
            Some((path, post)) if req.method() == Method::POST && req.uri().path() == &**path => {
                Some(post)
            }
            _ => None,
        }
    }
}
