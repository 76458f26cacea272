//! Keys of the `_meta` every MCP 2026-07-28 (stateless era) request carries,
//! spelled once: the transport reads them to tell the eras apart and to
//! check a request against its headers.

/// The request's MCP revision (`_meta` key).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The client's capabilities for this request (`_meta` key).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The client's name and version for this request (`_meta` key).
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";

/// The standard headers (SEP-2243) a stateless-era request must carry,
/// derived from its body: `MCP-Protocol-Version` from the `_meta`,
/// `Mcp-Method`, and `Mcp-Name` for the methods that name something (a
/// tool or prompt by `name`, a resource by `uri`, a task by `taskId`). A
/// proxy that re-sends a request it did not receive over HTTP (a gateway's
/// resumable listen) needs them, or the upstream refuses it. Empty for a
/// request without the stateless `_meta`.
pub fn standard_headers(message: &serde_json::Value) -> Vec<(&'static str, String)> {
    let text = |p: &str| message.pointer(p).and_then(serde_json::Value::as_str);
    let Some(version) = message
        .pointer("/params/_meta")
        .and_then(|m| m.get(PROTOCOL_VERSION))
        .and_then(serde_json::Value::as_str)
    else {
        return Vec::new();
    };
    let mut out = vec![(crate::headers::MCP_PROTOCOL_VERSION, version.to_owned())];
    let Some(method) = text("/method") else {
        return out;
    };
    out.push((crate::headers::MCP_METHOD, method.to_owned()));
    let name = match method {
        "tools/call" | "prompts/get" => text("/params/name"),
        "resources/read" => text("/params/uri"),
        m if m.starts_with("tasks/") => text("/params/taskId"),
        _ => None,
    };
    if let Some(name) = name {
        out.push((crate::headers::MCP_NAME, name.to_owned()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stateless_call_names_its_method_and_tool() {
        let m = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        assert_eq!(
            standard_headers(&m),
            vec![
                ("mcp-protocol-version", "2026-07-28".to_owned()),
                ("mcp-method", "tools/call".to_owned()),
                ("mcp-name", "echo".to_owned()),
            ]
        );
        let read = json!({"method": "resources/read",
            "params": {"uri": "file:///a", "_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        assert_eq!(
            standard_headers(&read)[2],
            ("mcp-name", "file:///a".to_owned())
        );
        let list =
            json!({"method": "tools/list", "params": {"_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        assert_eq!(standard_headers(&list).len(), 2);
        let session = json!({"method": "tools/list", "params": {}});
        assert!(standard_headers(&session).is_empty());
    }
}

/// Checks a stateless-era request's standard headers against its body
/// (SEP-2243): each header [`standard_headers`] derives must be present,
/// and equal once the optional whitespace around a field value is taken
/// off (RFC 9110 5.5). `header` looks a header up by its lower-case name.
/// The error says which header and why, for the -32020 (header mismatch)
/// a server answers with 400.
pub fn check_standard_headers<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    message: &serde_json::Value,
) -> Result<(), String> {
    for (name, want) in standard_headers(message) {
        match header(name).map(|v| v.trim_matches([' ', '\t'])) {
            None => {
                return Err(format!(
                    "the request has no {name} header (the body says {want:?})"
                ))
            }
            Some(got) if got != want => {
                return Err(format!(
                    "the {name} header ({got:?}) differs from the body ({want:?})"
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod check_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whitespace_around_a_value_is_not_part_of_it_but_case_is() {
        let m = json!({"method": "tools/call",
            "params": {"name": "echo", "_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        let with = |name: &'static str| {
            move |h: &str| match h {
                "mcp-protocol-version" => Some("2026-07-28"),
                "mcp-method" => Some("tools/call"),
                "mcp-name" => Some(name),
                _ => None,
            }
        };
        assert!(check_standard_headers(with("  echo \t"), &m).is_ok());
        assert!(check_standard_headers(with("Echo"), &m).is_err());
        let missing = |h: &str| (h == "mcp-protocol-version").then_some("2026-07-28");
        assert!(check_standard_headers(missing, &m)
            .unwrap_err()
            .contains("mcp-method"));
    }
}
