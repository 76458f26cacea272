//! JSON-RPC 2.0 envelopes: classify what arrives, build what leaves.

use serde_json::{json, Value};

/// Parse error.
pub const PARSE_ERROR: i64 = -32700;
/// Not a valid JSON-RPC object.
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Bad params.
pub const INVALID_PARAMS: i64 = -32602;
/// Server-side failure.
pub const INTERNAL_ERROR: i64 = -32603;

/// One incoming JSON-RPC message, classified.
#[derive(Debug, Clone)]
pub enum Incoming {
    /// Expects a response.
    Request {
        /// The request id (string or number).
        id: Value,
        /// Method name.
        method: String,
        /// Params, if any.
        params: Value,
    },
    /// Expects nothing.
    Notification,
    /// A response to a server-to-client request.
    Response,
}

impl Incoming {
    /// Classifies a parsed JSON value; the error is the message of a -32600.
    pub fn classify(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or("a JSON-RPC message must be an object")?;
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err("\"jsonrpc\" must be \"2.0\"".into());
        }
        let id = obj.get("id");
        if let Some(id) = id {
            if !(id.is_string() || id.is_i64() || id.is_u64()) {
                return Err("\"id\" must be a string or an integer".into());
            }
        }
        match (obj.get("method"), id) {
            (Some(Value::String(m)), Some(id)) => Ok(Self::Request {
                id: id.clone(),
                method: m.clone(),
                params: obj.get("params").cloned().unwrap_or(Value::Null),
            }),
            (Some(Value::String(_)), None) => Ok(Self::Notification),
            (Some(_), _) => Err("\"method\" must be a string".into()),
            (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {
                Ok(Self::Response)
            }
            _ => Err("not a request, notification or response".into()),
        }
    }
}

/// A success response.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// An error response with `data`.
pub fn error_with_data(id: &Value, code: i64, message: impl Into<String>, data: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into(), "data": data}})
}

/// Whether a message (JSON text) is a response: it has `result` or `error`.
/// A request stream ends with its response.
pub fn is_response(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(message)
        .map(|p| p.result.is_some() || p.error.is_some())
        .unwrap_or(false)
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}
