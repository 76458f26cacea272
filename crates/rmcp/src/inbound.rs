//! A client message, already parsed by the transport, into rmcp's type.
//!
//! rmcp's own entry point for a message (`ClientJsonRpcMessage`'s
//! `Deserialize`) buffers it in an untagged enum over the four JSON-RPC shapes,
//! checks the shape through two flattened buffers, then tries an untagged enum
//! of 22 request types in order (`tools/call` is the 14th); what that cost a
//! hosted server is in benches/results/paths.md. A request of a hot method is
//! parsed straight into its own type instead. Everything else, and every
//! request its type refuses, takes rmcp's path, so the outcome (the type, or
//! the error) is always rmcp's: the untagged enum would have picked the same
//! type, as every request type before it accepts only its own method.

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, JsonObject,
    JsonRpcMessage, JsonRpcRequest, ListToolsRequest, RequestId, RequestMetaObject,
};
use serde::Deserialize;
use serde_json::Value;

/// `message` as rmcp's client message, or rmcp's own error for it.
pub(crate) fn typed(mut message: Value) -> Result<ClientJsonRpcMessage, serde_json::Error> {
    match hot_request(&mut message) {
        Some(typed) => Ok(typed),
        None => serde_json::from_value(message),
    }
}

/// The hot methods.
enum Hot {
    CallTool,
    ListTools,
}

/// A well-formed request of a hot method, typed; `None` leaves `message`
/// as it was, for rmcp's own path.
fn hot_request(message: &mut Value) -> Option<ClientJsonRpcMessage> {
    let object = message.as_object()?;
    // rmcp's shape check: a request has a method and an id, neither a
    // result nor an error.
    if object.contains_key("result") || object.contains_key("error") {
        return None;
    }
    if object.get("jsonrpc")? != "2.0" {
        return None;
    }
    let id = RequestId::deserialize(object.get("id")?).ok()?;
    let hot = match object.get("method")?.as_str()? {
        "tools/call" => Hot::CallTool,
        "tools/list" => Hot::ListTools,
        _ => return None,
    };
    let request: ClientRequest = match hot {
        Hot::CallTool => call_tool(message.get_mut("params")?)?.into(),
        Hot::ListTools => ListToolsRequest::deserialize(&*message).ok()?.into(),
    };
    Some(JsonRpcMessage::Request(JsonRpcRequest::new(id, request)))
}

/// A `tools/call` request from its `params`, as rmcp's `Request`
/// deserializer makes it (`_meta` in the extensions, not in the params)
/// without its `#[serde(flatten)]`, which buffers every field of the params
/// (the arguments too) before reading them again; `None` (the params
/// untouched) where they do not read as a `tools/call`'s.
///
/// Params of the usual form (a name, arguments and `_meta` as objects or
/// null, no retry of an input-required result) are taken apart, not
/// copied: their strings and maps move into the request.
fn call_tool(params: &mut Value) -> Option<CallToolRequest> {
    let fields = params.as_object_mut()?;
    let nullable_object = |v: &Value| v.is_object() || v.is_null();
    let usual = fields.get("name").is_some_and(Value::is_string)
        && fields.get("arguments").is_none_or(nullable_object)
        && fields.get("_meta").is_none_or(nullable_object)
        && !fields.contains_key("inputResponses")
        && !fields.contains_key("requestState");
    if !usual {
        return copied_call_tool(params);
    }
    // Checked above: a string.
    let Some(Value::String(name)) = fields.remove("name") else {
        return None;
    };
    let mut typed = CallToolRequestParams::new(name);
    if let Some(Value::Object(arguments)) = fields.remove("arguments") {
        typed = typed.with_arguments(arguments);
    }
    let mut request = CallToolRequest::new(typed);
    if let Some(Value::Object(meta)) = fields.remove("_meta") {
        request.extensions.insert(RequestMetaObject::from(meta));
    }
    Some(request)
}

/// [`call_tool`] for params of any other form: read through their type's
/// own `Deserialize`, which copies them.
fn copied_call_tool(params: &Value) -> Option<CallToolRequest> {
    let meta = match params.get("_meta") {
        None | Some(Value::Null) => None,
        Some(meta) => Some(JsonObject::deserialize(meta).ok()?),
    };
    let mut typed = CallToolRequestParams::deserialize(params).ok()?;
    typed.meta = None;
    let mut request = CallToolRequest::new(typed);
    if let Some(meta) = meta {
        request.extensions.insert(RequestMetaObject::from(meta));
    }
    Some(request)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Which request type a message is (a `CustomRequest` named
    /// `tools/call` writes out as a `CallToolRequest` does).
    fn variant(m: &ClientJsonRpcMessage) -> Option<std::mem::Discriminant<ClientRequest>> {
        match m {
            JsonRpcMessage::Request(r) => Some(std::mem::discriminant(&r.request)),
            _ => None,
        }
    }

    /// The `_meta` a request carries in its extensions, where handlers
    /// read it (the progress token among it).
    fn meta_of(m: &ClientJsonRpcMessage) -> Option<RequestMetaObject> {
        use rmcp::model::GetExtensions;
        match m {
            JsonRpcMessage::Request(r) => {
                r.request.extensions().get::<RequestMetaObject>().cloned()
            }
            _ => None,
        }
    }

    /// The message as rmcp's own path types it, and as the fast one does,
    /// both written back out (which includes `_meta`, kept in extensions);
    /// where both typed it, they chose the same request type.
    fn both(message: Value) -> (Option<Value>, Value) {
        let fast = hot_request(&mut message.clone());
        let rmcp: ClientJsonRpcMessage = serde_json::from_value(message).expect("rmcp parses it");
        if let Some(fast) = &fast {
            assert_eq!(variant(fast), variant(&rmcp));
            // Debug shows the params' own `meta`: written out, rmcp merges
            // it with the extensions', so only this tells where `_meta` is.
            assert_eq!(format!("{fast:?}"), format!("{rmcp:?}"));
            assert_eq!(meta_of(fast), meta_of(&rmcp));
        }
        (
            fast.map(|m| serde_json::to_value(m).unwrap()),
            serde_json::to_value(rmcp).unwrap(),
        )
    }

    #[test]
    fn hot_requests_come_out_as_rmcp_types_them() {
        for message in [
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "hi"}}}),
            json!({"jsonrpc": "2.0", "id": "a-1", "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"text": "hi"},
                              "_meta": {"progressToken": 3, "x/y": [1]}}}),
            json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                   "params": {"name": "echo", "_meta": null, "x-extra": {"kept": "no"}}}),
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                   "params": {"name": "echo", "requestState": "s", "arguments": null,
                              "_meta": {"progressToken": "t"}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "c"}}),
        ] {
            let (fast, rmcp) = both(message.clone());
            assert_eq!(fast.as_ref(), Some(&rmcp), "{message}");
            assert!(matches!(
                typed(message).unwrap(),
                JsonRpcMessage::Request(JsonRpcRequest {
                    request: ClientRequest::CallToolRequest(_) | ClientRequest::ListToolsRequest(_),
                    ..
                })
            ));
        }
    }

    #[test]
    fn everything_else_takes_rmcps_path() {
        for message in [
            // tools/call whose params its type refuses: rmcp types it as it will.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
        ] {
            let (fast, rmcp) = both(message.clone());
            assert_eq!(fast, None, "{message}");
            assert_eq!(serde_json::to_value(typed(message).unwrap()).unwrap(), rmcp);
        }
        for bad in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e"}, "result": {}}),
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "e"}}),
            json!({"jsonrpc": "2.0", "id": null, "method": "tools/call", "params": {"name": "e"}}),
            // tools/call params its type refuses (rmcp's untagged enum may
            // still read some as another request): the same outcome as rmcp's.
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e", "_meta": 5}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "e", "arguments": [1]}}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": "e"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        ] {
            let mut left = bad.clone();
            assert!(hot_request(&mut left).is_none(), "{bad}");
            assert_eq!(left, bad, "refused, and left as it was");
            assert_eq!(
                typed(bad.clone()).map_err(|e| e.to_string()).err(),
                serde_json::from_value::<ClientJsonRpcMessage>(bad)
                    .map_err(|e| e.to_string())
                    .err(),
            );
        }
    }
}
