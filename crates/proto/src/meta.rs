//! Keys of the `_meta` every MCP 2026-07-28 (stateless era) request carries,
//! spelled once: the transport reads them to tell the eras apart and to
//! check a request against its headers.

/// The request's MCP revision (`_meta` key).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The client's capabilities for this request (`_meta` key).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
