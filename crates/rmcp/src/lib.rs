//! Servers built on rmcp (the official Rust MCP SDK) on mcp-resume's log,
//! without changing their handlers, in two ways:
//!
//! - **on mcp-resume's transport**: [`RmcpBackend`] runs an rmcp
//!   `ServerHandler` as a session's backend of `mcp_resume_server::McpServer`
//!   (every message committed before a client sees it, the handler's requests
//!   on the call's resumable stream, both MCP eras at one URL), with
//!   [`DurableTasks`] for tasks whose state and events live in the log;
//! - **on rmcp's own `StreamableHttpService`**, with its pluggable stores on
//!   any [`Log`] (memory, disk, Redis):
//!   - [`LogEventStore`] (rmcp's `EventStore`): an event is committed to the
//!     log before its id is returned; the id (`SESSION/STREAM/SEQ`) names the
//!     stream and seq, so a replay is a range read of one stream, after which
//!     the replay stays open and tails what any instance appends later.
//!   - [`LogSessionStore`] (rmcp's `SessionStore`): the `initialize` params are
//!     the log session's metadata, so any instance restores the session.
//!   - [`DurableSessionManager`]: rmcp's `LocalSessionManager` with the store,
//!     plus the check that a `Last-Event-ID` belongs to the request's session,
//!     and commits queued off the handler's path (each stream's queue bounded:
//!     a sender waits past 1,024 uncommitted events).
//!
//! docs/server-author.md shows both; docs/rmcp.md says what differs from
//! `mcp-resume serve` (rmcp's refusals are empty `200`s, not `409`s).
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use mcp_resume_log::{Log, MemoryLog, Retention};
//! use mcp_resume_rmcp::{DurableSessionManager, LogSessionStore};
//! use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
//! let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
//! let manager = Arc::new(DurableSessionManager::new(log.clone()));
//! let mut config = StreamableHttpServerConfig::default();
//! config.session_store = Some(Arc::new(LogSessionStore::new(log)));
//! // StreamableHttpService::new(|| Ok(MyServer), manager, config)
//! ```
//!
//! [`Log`]: mcp_resume_log::Log

pub mod backend;
mod error;
pub mod event_id;
mod event_store;
mod gate;
mod inbound;
mod manager;
mod outbound;
mod owner;
mod queue;
mod recent;
mod session_store;
mod stateless;
pub mod tasks;

pub use backend::RmcpBackend;
pub use error::StoreError;
pub use event_store::LogEventStore;
pub use manager::{DurableSessionManager, ManagerError};
pub use session_store::LogSessionStore;
pub use tasks::{DurableTaskContext, DurableTasks};
