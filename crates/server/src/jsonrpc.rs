//! JSON-RPC 2.0 envelopes: classify what arrives, build what leaves.

use serde_json::{Map, Value};

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

/// One incoming JSON-RPC message, classified: borrowed from the message,
/// so that classifying copies nothing of it.
#[derive(Debug, Clone, Copy)]
pub enum Incoming<'a> {
    /// Expects a response.
    Request {
        /// The request id (string or number).
        id: &'a Value,
        /// Method name.
        method: &'a str,
        /// Params (`null` when it has none).
        params: &'a Value,
    },
    /// Expects nothing.
    Notification,
    /// A response to a server-to-client request.
    Response,
}

impl<'a> Incoming<'a> {
    /// Classifies a parsed JSON value; the error is the message of a -32600.
    pub fn classify(v: &'a Value) -> Result<Self, String> {
        const NULL: &Value = &Value::Null;
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
                id,
                method: m,
                params: obj.get("params").unwrap_or(NULL),
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

/// A success response to `id` as JSON text, written from its parts (the
/// built-in tools answer this way). Building the response as a value (a
/// map, its keys and the id's copy) to encode it once and drop it cost a
/// tenth of a tool call. The bytes are those the built response
/// would encode to, keys in serde_json's sorted order (an application that
/// turns on serde_json's `preserve_order` gets the same object with its
/// keys in another order than an error response's).
pub fn result_text(id: &Value, result: &Value) -> bytes::Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"id\":");
    // Writing a `Value` to a `Vec` cannot fail.
    serde_json::to_writer(&mut out, id).expect("a JSON value encodes");
    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    serde_json::to_writer(&mut out, result).expect("a JSON value encodes");
    out.push(b'}');
    out.into()
}

/// An error response.
pub fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    response(id, "error", error_object(code, message.into(), None))
}

/// An error response with `data`.
pub fn error_with_data(id: &Value, code: i64, message: impl Into<String>, data: Value) -> Value {
    response(id, "error", error_object(code, message.into(), Some(data)))
}

/// `{"jsonrpc": "2.0", "id": id, field: value}`, built in place: `json!`
/// would serialize `value` into a copy of itself (a deep copy of every
/// answer, a tenth of a `tools/call`'s instructions).
fn response(id: &Value, field: &str, value: Value) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".to_owned(), Value::String("2.0".to_owned()));
    m.insert("id".to_owned(), id.clone());
    m.insert(field.to_owned(), value);
    Value::Object(m)
}

/// A JSON-RPC error object.
fn error_object(code: i64, message: String, data: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("code".to_owned(), Value::from(code));
    m.insert("message".to_owned(), Value::String(message));
    if let Some(data) = data {
        m.insert("data".to_owned(), data);
    }
    Value::Object(m)
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

/// The id of an answer to a call (a JSON object with an id, no method, a
/// `result` or an `error`), read from its JSON text as far as it must be:
/// the rest is skipped, not parsed into values (so a number no value holds
/// does not stop it). `None` for anything else, an `id` of `null` too.
pub fn answer_id(message: &[u8]) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
    }
    // An object only: a derived struct reads an array as its fields in order.
    if message.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice::<Head>(message).ok()? {
        Head {
            id: Some(id),
            method: None,
            result,
            error,
        } if result.is_some() || error.is_some() => Some(id),
        _ => None,
    }
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".to_owned(), Value::String("2.0".to_owned()));
    m.insert("method".to_owned(), Value::String(method.to_owned()));
    m.insert("params".to_owned(), params);
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The text is byte for byte what the built response encodes to, for
    /// ids and results of every shape (escapes, nesting, empty).
    #[test]
    fn result_text_is_the_built_response_encoded() {
        let ids = [json!(7), json!(u64::MAX), json!(-3), json!("a\"b\\c\u{1}é")];
        let results = [
            json!({}),
            json!({"content": [{"type": "text", "text": "hé\n\"x\""}], "isError": true}),
            json!({"z": 1, "a": [null, 1.5, {"b": false}]}),
            json!("text"),
        ];
        for id in &ids {
            for r in &results {
                let built = serde_json::to_vec(&response(id, "result", r.clone())).unwrap();
                assert_eq!(&result_text(id, r)[..], &built[..], "id {id}, result {r}");
            }
        }
    }
}
