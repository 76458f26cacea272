//! Header names of the protocol, spelled once.

/// Names the MCP session on every request after `initialize`.
pub const MCP_SESSION_ID: &str = "mcp-session-id";
/// The negotiated MCP revision, sent by clients after `initialize`.
pub const MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// The JSON-RPC method of a stateless-era request, repeated for proxies (SEP-2243).
pub const MCP_METHOD: &str = "mcp-method";
/// The tool, prompt, resource or task a stateless-era request names (SEP-2243).
pub const MCP_NAME: &str = "mcp-name";
/// Names the log session `L` of a resumable listen stream, on the answer to
/// `subscriptions/listen` (docs/protocol.md 3.7).
pub const RESUME_LISTEN: &str = "x-mcp-resume-listen";
/// The SSE resumption cursor (WHATWG name).
pub const LAST_EVENT_ID: &str = "last-event-id";
/// Query-string spelling of the cursor, for browsers' `EventSource`.
pub const LAST_EVENT_ID_QUERY: &str = "last_event_id";
/// The committed cursor echoed in the `101` of a safe upgrade.
pub const RESUME_CURSOR: &str = "x-mcp-resume-cursor";
