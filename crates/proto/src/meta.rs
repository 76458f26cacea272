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
///
/// A value in SEP-2243's Base64 form (`=?base64?…?=`, how a client sends a
/// name that is not plain ASCII) is decoded before it is compared
/// ([`decode_header_value`]); one that does not decode is a mismatch.
pub fn check_standard_headers<'a>(
    header: impl Fn(&str) -> Option<&'a str>,
    message: &serde_json::Value,
) -> Result<(), String> {
    for (name, want) in standard_headers(message) {
        let Some(raw) = header(name).map(|v| v.trim_matches([' ', '\t'])) else {
            return Err(format!(
                "the request has no {name} header (the body says {want:?})"
            ));
        };
        match decode_header_value(raw) {
            None => {
                return Err(format!(
                    "the {name} header ({raw:?}) is not canonical Base64 of UTF-8 text"
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

/// The prefix of a header value in SEP-2243's Base64 form.
const BASE64_PREFIX: &str = "=?base64?";
/// The suffix of a header value in SEP-2243's Base64 form.
const BASE64_SUFFIX: &str = "?=";

/// A SEP-2243 header value (`Mcp-Name`, `Mcp-Param-*`) as text: a value
/// `=?base64?B?=` is the UTF-8 text whose standard, padded Base64 is `B`
/// (how a client sends what is not plain ASCII); any other value is itself.
/// `None` for a value in that form that is not canonical Base64 or not
/// UTF-8: it names nothing, so it matches no body.
pub fn decode_header_value(value: &str) -> Option<std::borrow::Cow<'_, str>> {
    let Some(b64) = value
        .strip_prefix(BASE64_PREFIX)
        .and_then(|v| v.strip_suffix(BASE64_SUFFIX))
    else {
        return Some(std::borrow::Cow::Borrowed(value));
    };
    let bytes = decode_base64(b64)?;
    String::from_utf8(bytes).ok().map(std::borrow::Cow::Owned)
}

/// Standard Base64 (RFC 4648 section 4) with its padding, canonical only:
/// the unused bits of the last character are zero.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(b.len() / 4 * 3);
    for (i, quad) in b.chunks(4).enumerate() {
        let last = i == b.len() / 4 - 1;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // The bits a padded quad does not use must be zero (one spelling).
        if (pad == 1 && bytes[2] != 0) || (pad == 2 && (bytes[1] != 0 || bytes[2] != 0)) {
            return None;
        }
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
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

    #[test]
    fn a_base64_name_is_decoded_before_it_is_compared() {
        let m = json!({"method": "tools/call",
            "params": {"name": "héllo 世界", "_meta": {PROTOCOL_VERSION: "2026-07-28"}}});
        let with = |name: &'static str| {
            move |h: &str| match h {
                "mcp-protocol-version" => Some("2026-07-28"),
                "mcp-method" => Some("tools/call"),
                "mcp-name" => Some(name),
                _ => None,
            }
        };
        assert!(check_standard_headers(with("=?base64?aMOpbGxvIOS4lueVjA==?="), &m).is_ok());
        // Another name, a broken encoding, one not canonical: refused.
        for bad in [
            "=?base64?aMOpbGxv?=",
            "=?base64?%%%?=",
            "=?base64?aMOpbGxvIOS4lueVjB==?=",
            "=?base64?/w==?=",
        ] {
            assert!(check_standard_headers(with(bad), &m).is_err(), "{bad}");
        }
        assert_eq!(decode_header_value("plain").as_deref(), Some("plain"));
        assert_eq!(decode_header_value("=?base64??=").as_deref(), Some(""));
        assert_eq!(
            decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(),
            Some("Hello, 世界")
        );
        assert_eq!(decode_header_value("=?base64?YQ==?=").as_deref(), Some("a"));
        assert_eq!(
            decode_header_value("=?base64?YWI=?=").as_deref(),
            Some("ab")
        );
        assert_eq!(
            decode_header_value("=?base64?YWJj?=").as_deref(),
            Some("abc")
        );
        assert_eq!(decode_header_value("=?base64?YR==?="), None);
        assert_eq!(decode_header_value("=?base64?YQ=a?="), None);
    }
}
