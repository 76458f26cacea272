//! Which stateless requests [`super::Stateless`] serves itself: those for
//! which every check rmcp's stateless `handle_post` makes before serving a
//! request plainly passes. Each check here is rmcp's, or stricter; what
//! fails one goes to rmcp, which answers or refuses it.

use axum::body::HttpBody;
use axum::http::uri::Authority;
use axum::http::{header, HeaderMap, HeaderName, Uri};
use mcp_resume_proto::headers as h;
use mcp_resume_server::backend::{Body, Request};
use rmcp::model::{
    ClientRequest, GetMeta, JsonObject, JsonRpcMessage, JsonRpcRequest, ProtocolVersion,
};
use rmcp::ServerHandler;
use serde_json::Value;

/// `request`'s body (`message`, as the transport parsed it) typed, with the
/// protocol version it states, when rmcp's checks of the request plainly
/// pass ([`direct`], [`plain_host`], the body within rmcp's limit).
pub(super) fn served_directly(
    request: &Request<Body>,
    message: Value,
) -> Option<(JsonRpcRequest<ClientRequest>, ProtocolVersion)> {
    let small = HttpBody::size_hint(request.body())
        .upper()
        .is_some_and(|n| n <= RMCP_BODY_LIMIT as u64);
    if !small || !plain_host(request.uri(), request.headers()) {
        return None;
    }
    direct(request.headers(), message)
}

/// The largest body rmcp's service reads (its default); a larger one goes
/// to rmcp to be refused there.
const RMCP_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// `MCP-Protocol-Version`, as a header name made once.
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static(h::MCP_PROTOCOL_VERSION);
/// `Mcp-Method` (SEP-2243), as a header name made once.
const METHOD: HeaderName = HeaderName::from_static(h::MCP_METHOD);
/// `Mcp-Name` (SEP-2243), as a header name made once.
const NAME: HeaderName = HeaderName::from_static(h::MCP_NAME);

/// `message` typed, when every check rmcp's stateless service makes before
/// serving it plainly passes: an `Accept` of both media types without
/// parameters, a JSON `Content-Type`, a request
/// (not `initialize`) whose `_meta` has every field 2026-07-28 requires,
/// its protocol version the same in `MCP-Protocol-Version` and at least
/// the revision of SEP-2243's headers, and `Mcp-Method` (and `Mcp-Name`,
/// for a method that names something) given once and equal to the body's,
/// not Base64-wrapped. `None` sends the request to rmcp, which answers it
/// (or refuses it) itself.
fn direct(
    headers: &HeaderMap,
    message: Value,
) -> Option<(JsonRpcRequest<ClientRequest>, ProtocolVersion)> {
    if !accepts_both(headers) || !json_content(headers) {
        return None;
    }
    let version = single(headers, &PROTOCOL_VERSION)?;
    if version < ProtocolVersion::STANDARD_HEADERS.as_str() {
        return None;
    }
    let method = message.get("method")?.as_str()?;
    if single(headers, &METHOD)? != method {
        return None;
    }
    let params = message.get("params");
    if let Some(expected) = named(method, params) {
        let name = single(headers, &NAME)?;
        if name.starts_with("=?base64?") || name != expected.as_str()? {
            return None;
        }
    }
    let JsonRpcMessage::Request(request) = crate::inbound::typed(message).ok()? else {
        return None;
    };
    if matches!(request.request, ClientRequest::InitializeRequest(_)) {
        return None;
    }
    let meta = request.request.get_meta();
    let stated = meta.protocol_version()?;
    let complete = meta
        .missing_required_keys(&ProtocolVersion::V_2026_07_28)
        .is_empty();
    (complete && stated.as_str() == version).then_some((request, stated))
}

/// Whether rmcp's `Host` check (with every host allowed) plainly passes: one
/// `Host` that reads as an authority, or none and an authority in the URI
/// (HTTP/2).
fn plain_host(uri: &Uri, headers: &HeaderMap) -> bool {
    match single(headers, &header::HOST) {
        Some(host) => Authority::try_from(host).is_ok(),
        None => !headers.contains_key(header::HOST) && uri.authority().is_some(),
    }
}

/// The one value of header `name`, if it has exactly one and it is text.
fn single<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    match values.next() {
        None => first.to_str().ok(),
        Some(_) => None,
    }
}

/// The body value SEP-2243's `Mcp-Name` must equal for `method`, if the
/// method names something. rmcp's table, not
/// `mcp_resume_proto::meta::standard_headers`: that one (what a proxy must
/// send) leaves out `resources/subscribe` and `resources/unsubscribe`, which
/// rmcp checks, so a request to them would pass here unchecked.
fn named<'a>(method: &str, params: Option<&'a Value>) -> Option<&'a Value> {
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return None,
    };
    params?.get(key).filter(|v| v.is_string())
}

/// Whether `Accept` lists `application/json` and `text/event-stream`, each
/// bare (an entry with parameters, a weight among them, sends the request
/// to rmcp to be judged).
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',').map(str::trim) {
            if entry.contains([';', '"']) {
                return false;
            }
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// rmcp's `Content-Type` rule: the media type, before any parameter, is
/// `application/json`.
fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// Whether the called tool's input schema annotates an argument with
/// `x-mcp-header`, whose `Mcp-Param-*` header rmcp checks against the
/// body: such a call goes to rmcp.
pub(super) fn carries_param_headers<S: ServerHandler>(
    service: &S,
    request: &JsonRpcRequest<ClientRequest>,
) -> bool {
    let ClientRequest::CallToolRequest(call) = &request.request else {
        return false;
    };
    service
        .get_tool(&call.params.name)
        .is_some_and(|tool| names_header(&tool.input_schema))
}

/// Whether `x-mcp-header` is a key anywhere in `schema`.
fn names_header(schema: &JsonObject) -> bool {
    schema.contains_key("x-mcp-header") || schema.values().any(mentions_header)
}

/// [`names_header`] for any JSON value.
fn mentions_header(value: &Value) -> bool {
    match value {
        Value::Object(map) => names_header(map),
        Value::Array(items) => items.iter().any(mentions_header),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    /// A stateless `tools/call` as the SDK clients send it.
    fn call() -> (HeaderMap, Value) {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "echo"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"text": "hi"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
            }
        }});
        (headers, body)
    }

    #[test]
    fn a_request_that_meets_every_check_is_served_directly_with_its_meta() {
        let (headers, body) = call();
        let (request, _) = direct(&headers, body).expect("served directly");
        assert_eq!(request.id, rmcp::model::RequestId::Number(7));
        let meta = request.request.get_meta();
        assert_eq!(meta.protocol_version(), Some(ProtocolVersion::V_2026_07_28));
    }

    /// Every way a request can fall short of one of rmcp's checks sends it
    /// to rmcp, to be answered (or refused) there.
    #[test]
    fn anything_rmcp_might_refuse_goes_to_rmcp() {
        type Change = fn(&mut HeaderMap, &mut Value);
        let cases: &[(&str, Change)] = &[
            ("a weighted Accept", |h, _| {
                h.insert(
                    "accept",
                    HeaderValue::from_static("application/json;q=0, text/event-stream"),
                );
            }),
            ("no event stream accepted", |h, _| {
                h.insert("accept", HeaderValue::from_static("application/json"));
            }),
            ("a text body", |h, _| {
                h.insert("content-type", HeaderValue::from_static("text/plain"));
            }),
            ("no Mcp-Method", |h, _| {
                h.remove("mcp-method");
            }),
            ("a second Mcp-Method", |h, _| {
                h.append("mcp-method", HeaderValue::from_static("tools/call"));
            }),
            ("another method in Mcp-Method", |h, _| {
                h.insert("mcp-method", HeaderValue::from_static("tools/list"));
            }),
            ("another name", |h, _| {
                h.insert("mcp-name", HeaderValue::from_static("echo2"));
            }),
            ("a Base64 name", |h, _| {
                h.insert("mcp-name", HeaderValue::from_static("=?base64?ZWNobw==?="));
            }),
            ("no Mcp-Name", |h, _| {
                h.remove("mcp-name");
            }),
            ("no version header", |h, _| {
                h.remove("mcp-protocol-version");
            }),
            ("a version header that is not the body's", |h, _| {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static("2026-08-01"),
                );
            }),
            ("a revision before SEP-2243's headers", |h, b| {
                h.insert(
                    "mcp-protocol-version",
                    HeaderValue::from_static("2025-11-25"),
                );
                b["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] =
                    json!("2025-11-25");
            }),
            ("no client capabilities in _meta", |_, b| {
                let meta = b["params"]["_meta"].as_object_mut().unwrap();
                meta.remove("io.modelcontextprotocol/clientCapabilities");
            }),
            ("no _meta", |_, b| {
                b["params"].as_object_mut().unwrap().remove("_meta");
            }),
            ("a notification", |_, b| {
                b.as_object_mut().unwrap().remove("id");
            }),
            ("a message rmcp's types refuse", |_, b| {
                b["jsonrpc"] = json!("1.0");
            }),
        ];
        for (what, change) in cases {
            let (mut headers, mut body) = call();
            change(&mut headers, &mut body);
            assert!(
                direct(&headers, body).is_none(),
                "{what} was served directly"
            );
        }
        let (mut headers, _) = call();
        headers.insert("mcp-method", HeaderValue::from_static("initialize"));
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2026-07-28", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
            "_meta": call().1["params"]["_meta"].clone()
        }});
        assert!(
            direct(&headers, init).is_none(),
            "initialize was served directly"
        );
    }

    #[test]
    fn a_host_rmcp_might_refuse_goes_to_rmcp() {
        let uri: Uri = "/mcp".parse().unwrap();
        let with = |hosts: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for host in hosts {
                headers.append(header::HOST, HeaderValue::from_static(host));
            }
            headers
        };
        assert!(plain_host(&uri, &with(&["127.0.0.1:8080"])));
        assert!(plain_host(&uri, &with(&["example.com"])));
        assert!(!plain_host(&uri, &with(&[])), "no Host, no authority");
        assert!(!plain_host(&uri, &with(&["a b"])));
        assert!(!plain_host(&uri, &with(&["a:1", "b:2"])), "two Hosts");
        let absolute: Uri = "http://127.0.0.1:9/mcp".parse().unwrap();
        assert!(plain_host(&absolute, &with(&[])), "HTTP/2's :authority");
    }

    #[test]
    fn an_annotated_argument_anywhere_in_a_schema_is_found() {
        let nested = json!({"type": "object", "properties": {
            "where": {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
        }});
        let plain = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        assert!(names_header(nested.as_object().unwrap()));
        assert!(!names_header(plain.as_object().unwrap()));
    }
}
