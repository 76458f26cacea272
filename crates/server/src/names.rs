//! The MCP request headers as [`HeaderName`]s, for lookups on every
//! request: a lookup by `&str` parses and classifies the name first.

use axum::http::HeaderName;
use mcp_resume_proto::headers as h;

/// `Mcp-Session-Id`.
pub(crate) const SESSION_ID: HeaderName = HeaderName::from_static(h::MCP_SESSION_ID);
/// `MCP-Protocol-Version`.
pub(crate) const PROTOCOL_VERSION: HeaderName = HeaderName::from_static(h::MCP_PROTOCOL_VERSION);
