//! An MCP server over Streamable HTTP whose every connection is a reader of
//! the session log from a cursor.
//!
//! What a library user needs is exported, nothing else: [`McpServer`] (the
//! routes, maintenance and a clean shutdown), [`ServerConfig`], the tool API
//! ([`tools`]; [`demo`] is one user of it), the [`backend`] seam, [`auth`]
//! and [`accept`]. Inside, dependencies point one way: `http` (`POST`/`GET`/
//! `DELETE` on the base path, the WebSocket upgrade `http/ws.rs`) and `sse`
//! (the replay-then-live reader) over `route` (each session's route to its
//! backend, the commit queue, the server's shared state, the orphan sweep)
//! over `backend` and the log; docs/architecture.md follows a message through
//! them and `scripts/module-deps` checks that no cycle comes back.
//!
//! What it promises (docs/protocol.md): a message reaches a client only once
//! the log committed it; every reader, SSE or WebSocket, on any instance,
//! reads from a cursor and is refused loudly (409, 426, a close code) where
//! continuity cannot be proven; a call's request stream always ends with an
//! answer, even after a crash. A session belongs to the principal that
//! created it: any other gets 404, as for a session that does not exist.
//! Shared by every principal: the log, the routes table and maintenance,
//! and the limits that bound them ([`ServerConfig`]: sessions, request
//! streams per session, body size, uncommitted sends per session (1,024),
//! tools and background tasks per session for the built-in tools, message
//! frames in flight per socket, header-read and keep-alive timeouts).
//!
//! Mount it in your own axum application:
//!
//! ```no_run
//! use std::sync::Arc;
//! use mcp_resume_log::MemoryLog;
//! use mcp_resume_server::{demo::demo_tools, McpServer, ServerConfig};
//!
//! # async fn run() -> std::io::Result<()> {
//! let server = McpServer::new(Arc::new(MemoryLog::default()), demo_tools(), ServerConfig::default());
//! let app = axum::Router::new().merge(server.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```
#![deny(missing_docs)]

pub mod accept;
pub mod auth;
pub mod backend;
mod chunks;
mod config;
mod cors;
pub mod demo;
mod error;
mod http;
mod jsonrpc;
mod maintenance;
mod mcp;
mod metrics;
mod names;
mod retry;
mod route;
mod session;
mod sse;
pub mod tasks;
pub mod tools;
mod trace;

use std::future::Future;
use std::sync::Arc;

use axum::handler::{Handler, HandlerService};
use axum::routing::{get, MethodRouter};
use axum::Router;
use mcp_resume_log::Log;
use tokio::sync::{watch, Mutex};

pub use accept::{tls_config, ConnLimits, ListenError};
pub use config::ServerConfig;
pub use error::ApiError;
use route::state::AppState;
pub use tools::{ToolContext, ToolError, ToolRegistry};

/// What serves a server's sessions.
enum Backing {
    /// The built-in tool API's registry.
    Tools(ToolRegistry),
    /// Any other backend.
    Given(Arc<dyn backend::Backend>),
}

/// One MCP server: its state, its routes and its shutdown switch.
pub struct McpServer {
    state: AppState,
    stop: watch::Sender<bool>,
}

impl McpServer {
    /// A server over `log` offering `tools`: the registry is served to
    /// every session as its backend, through the same route as any other.
    pub fn new(log: Arc<dyn Log>, tools: ToolRegistry, config: ServerConfig) -> Self {
        Self::build(log, Backing::Tools(tools), config)
    }

    /// A server over `log` whose sessions are served by `backend` (for
    /// example an rmcp `ServerHandler` through `mcp-resume-rmcp`): every
    /// MCP message goes to the session's backend, and everything it sends
    /// is committed to the log before any client sees it.
    pub fn with_backend(
        log: Arc<dyn Log>,
        backend: Arc<dyn backend::Backend>,
        config: ServerConfig,
    ) -> Self {
        Self::build(log, Backing::Given(backend), config)
    }

    fn build(log: Arc<dyn Log>, backing: Backing, config: ServerConfig) -> Self {
        let (stop, shutdown) = watch::channel(false);
        let metrics = Arc::new(metrics::Metrics::default());
        metrics.damaged_streams.set(config.damaged_streams as i64);
        let config = Arc::new(config);
        let record_lock = Arc::new(Mutex::new(()));
        let tasks = tokio_util::task::TaskTracker::new();
        let backend: Arc<dyn backend::Backend> = match backing {
            Backing::Given(backend) => backend,
            Backing::Tools(registry) => Arc::new(tools::ToolsBackend::new(tools::Shared::new(
                registry,
                log.clone(),
                config.clone(),
                record_lock.clone(),
                tasks.clone(),
                shutdown.clone(),
            ))),
        };
        let state = AppState::new(route::state::ServerState {
            log,
            config,
            shutdown,
            record_lock,
            tasks,
            metrics,
            orphan_locks: Arc::new(std::array::from_fn(|_| Mutex::new(()))),
            backend,
            routes: Default::default(),
            task_store: None,
            drain: Default::default(),
            heads: Default::default(),
        });
        Self { state, stop }
    }

    /// Durable tasks (MCP 2026-07-28's tasks extension): `tasks/get`,
    /// `tasks/update` and `tasks/cancel` are answered from `store`'s log on
    /// any instance; handlers create tasks with the same store
    /// ([`tasks::TaskStore::spawn`]). Build it on this server's log.
    pub fn with_tasks(mut self, store: tasks::TaskStore) -> Self {
        self.state.make_mut().task_store = Some(store);
        self
    }

    /// The log this server commits to and reads from, for an embedding
    /// application that wants to look at sessions itself.
    pub fn log(&self) -> &Arc<dyn Log> {
        &self.state.log
    }

    /// The routes under the base path, ready to merge into an application:
    /// the MCP endpoint with CORS for the allowed origins, and, unless
    /// [`ServerConfig::metrics_on_main`] is off, `/metrics`, `/healthz` and
    /// `/readyz`.
    pub fn router(&self) -> Router {
        self.routes(&Layered::new(&self.state))
    }

    /// [`McpServer::router`] with the layers `l` (which
    /// [`McpServer::serve`] also puts around the endpoint it calls directly).
    fn routes(&self, l: &Layered) -> Router {
        let p = self.state.config.base_path.clone();
        let mcp = Router::new()
            .route(
                &p,
                MethodRouter::new()
                    .get_service(l.handler(http::get))
                    .post_service(l.post())
                    .delete_service(l.handler(http::delete))
                    .fallback_service(l.handler(|| async { not_allowed("GET, POST, DELETE") })),
            )
            .route(
                &format!("{p}/session/{{id}}/events"),
                MethodRouter::new()
                    .get_service(l.handler(http::session_events))
                    .fallback_service(l.handler(|| async { not_allowed("GET") })),
            )
            .route(
                &format!("{p}/tasks/{{id}}/events"),
                MethodRouter::new()
                    .get_service(l.handler(http::task_events))
                    .fallback_service(l.handler(|| async { not_allowed("GET") })),
            );
        let mcp = match self.state.config.auth.metadata_router() {
            Some(metadata) => mcp.merge(metadata),
            None => mcp,
        };
        if self.state.config.metrics_on_main {
            mcp.merge(self.ops_router())
        } else {
            mcp
        }
    }

    /// `/metrics`, `/healthz` and `/readyz`, to serve on their own listener
    /// (`serve --metrics-listen`) or merge anywhere.
    pub fn ops_router(&self) -> Router {
        Router::new()
            .route("/metrics", get(http::ops::scrape))
            .route("/healthz", get(http::ops::healthz))
            .route("/readyz", get(http::ops::readyz))
            .with_state(self.state.clone())
    }

    /// Tells every stream to end and every socket to close with 1001.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits, at most the shutdown grace of [`ServerConfig::conn_limits`], for every task the
    /// server spawned (handlers, readers, sockets sending their 1001,
    /// background work) to finish; says how many were cut off.
    pub async fn drain(&self) {
        let tasks = &self.state.tasks;
        tasks.close();
        let grace = self.state.config.conn_limits.shutdown_grace;
        if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
            tracing::warn!(
                running = tasks.len(),
                ?grace,
                "shutdown grace over; tasks still running are cut off"
            );
        }
    }

    /// Runs retention, idle expiry and the orphan sweep until shutdown
    /// (the first pass at once): the module `maintenance`.
    pub fn spawn_maintenance(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(maintenance::run(self.state.clone()))
    }

    /// Serves until `signal` completes, then stops accepting, closes sockets
    /// with 1001, ends SSE streams and closes the log. TLS and the connection
    /// limits come from [`ServerConfig::tls`] and [`ServerConfig::conn_limits`].
    ///
    /// A POST to the endpoint is given to the route's own service (the same
    /// layers) without [`McpServer::router`] in front of it: matching the
    /// path and the route's boxing cost about 2,500 instructions of a
    /// 47,000-instruction call (benches/results/echo-ceiling.md).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let layered = Layered::new(&self.state);
        let app = accept::App::with_endpoint(
            self.routes(&layered),
            &self.state.config.base_path,
            layered.post(),
        );
        self.serve_with(listener, app, signal).await
    }

    /// As [`McpServer::serve`], for an application that merged [`McpServer::router`]
    /// with routes of its own: the same maintenance and clean shutdown.
    /// Every request passes `app` whole, so layers put around it see the
    /// endpoint's POSTs too.
    ///
    /// An HTTP/1.1 GET stream is written to its socket by the connection once
    /// its head is out, not through the response body (it frees hyper's
    /// buffers for the hours an idle stream lives): a layer of `app` that
    /// rewrites an event stream's bytes without setting `Content-Encoding`
    /// or changing its `Content-Type` would be bypassed. Compression sets
    /// the header, and the stream then stays with hyper.
    pub async fn serve_app(
        self,
        listener: tokio::net::TcpListener,
        app: Router,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_with(listener, accept::App::router(app), signal)
            .await
    }

    /// Serves `app` as [`McpServer::serve`] says, and stops gracefully
    /// ([`route::drain`]): from `signal` on `/readyz` answers 503; the work this
    /// instance promised finishes within the shutdown grace while routes
    /// under a lease give it up as they settle; then streams end, sockets
    /// close, the leases left are given up and the log is closed.
    async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        app: accept::App,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let maintenance = self.spawn_maintenance();
        let config = &self.state.config;
        let (began_tx, mut began) = watch::channel(false);
        let (ended_tx, mut ended) = watch::channel(false);
        let stopping = tokio::spawn({
            let (state, stop) = (self.state.clone(), self.stop.clone());
            let mut began = began.clone();
            async move {
                if began.wait_for(|b| *b).await.is_err() {
                    return; // the server ended without a stop signal
                }
                let limits = state.config.conn_limits;
                let deadline = tokio::time::Instant::now() + limits.shutdown_grace;
                state.drain.begin();
                state.metrics.draining.set(1);
                tracing::info!(grace = ?limits.shutdown_grace, "stopping: draining (readyz answers 503)");
                // New work may still arrive while the listener accepts.
                tokio::time::sleep(limits.drain_accept.min(limits.shutdown_grace)).await;
                if route::drain::settle(&state, deadline).await {
                    tracing::info!("stopping: nothing promised is left running here");
                }
                route::drain::release_all(&state).await;
                let _ = stop.send(true);
                let _ = ended_tx.send(true);
            }
        });
        accept::serve_app(
            listener,
            app,
            config.tls.clone(),
            config.conn_limits,
            async move {
                signal.await;
                let _ = began_tx.send(true);
            },
            async move {
                let _ = ended.wait_for(|e| *e).await;
            },
        )
        .await?;
        // Served to its end: the drain ran (or, without a signal, stop now).
        if *began.borrow_and_update() {
            let _ = stopping.await;
        }
        self.shutdown();
        maintenance.abort();
        self.wind_down().await;
        self.state.routes.close_all();
        self.state
            .log
            .close()
            .await
            .map_err(std::io::Error::other)?;
        Ok(())
    }

    /// After the stop: waits a moment for what the stop ended (readers,
    /// sockets sending their 1001, work past the grace being cut off).
    async fn wind_down(&self) {
        let tasks = &self.state.tasks;
        tasks.close();
        if tokio::time::timeout(WIND_DOWN, tasks.wait()).await.is_err() {
            tracing::warn!(
                running = tasks.len(),
                "tasks still running after the stop are cut off"
            );
        }
    }
}

/// How long the server's own tasks have, once it stopped its streams and
/// work, to end before the log is closed under them.
const WIND_DOWN: std::time::Duration = std::time::Duration::from_secs(2);

/// The layers of the MCP routes (CORS, then the request's span and the
/// refusals counted), put around each handler before axum boxes it.
///
/// Not `Router::layer`: that boxes each route again under the layer, so a
/// request paid two boxed services (each cloned into a new box, its future
/// boxed) instead of one, 1,434 instructions of a `tools/call` echo
/// (benches/results/echo-ceiling.md). The cost: a request to a path this
/// router does not serve (404) passes none of these layers. It passed them
/// before only where nothing was merged into this router (`metrics_on_main`
/// off, no OAuth metadata): `merge` kept the other router's fallback, which
/// had no layers.
struct Layered {
    state: AppState,
    layers: tower_layer::Stack<cors::ForOrigins, trace::RequestLayer>,
}

impl Layered {
    fn new(state: &AppState) -> Self {
        Self {
            state: state.clone(),
            layers: tower_layer::Stack::new(cors::layer(state), trace::layer(state)),
        }
    }

    /// The endpoint's POST under the layers: the route's service, and what
    /// [`McpServer::serve`]'s connections call without the router.
    fn post(&self) -> accept::Endpoint {
        use tower_layer::Layer as _;
        self.layers.layer(http::PostService(self.state.clone()))
    }

    /// `handler` with the server's state, under the layers.
    fn handler<H, T>(
        &self,
        handler: H,
    ) -> trace::Traced<cors::ForOriginsService<HandlerService<H, T, AppState>>>
    where
        H: Handler<T, AppState>,
        T: 'static,
    {
        use tower_layer::Layer as _;
        self.layers.layer(handler.with_state(self.state.clone()))
    }
}

/// 405 for a method the path does not serve, with the JSON error body every
/// other refusal has and the `Allow` header RFC 9110 asks for.
fn not_allowed(allow: &'static str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let mut resp = ApiError::MethodNotAllowed.into_response();
    resp.headers_mut().insert(
        axum::http::header::ALLOW,
        axum::http::HeaderValue::from_static(allow),
    );
    resp
}
