//! A message a gateway's backend received as JSON text (a child's line, an
//! upstream's event or body), read only as far as the route needs.
//!
//! An answer to a call (an id, no method, a result or an error) is read
//! only as far as its id and sent on as it was written
//! ([`Outbox::send_answer`](super::Outbox::send_answer)): not parsed into a
//! value and encoded again, so it costs less, and it reaches the client with
//! what a value would change (numbers past 64 bits or `f64`, the order of
//! keys) as its server wrote it. Anything else is read whole: the route
//! reads it, and may rewrite it (a server request's id, a cancel's).

use bytes::Bytes;
use serde_json::Value;

/// One message of a backend's, as the outbox takes it.
pub(crate) enum Text {
    /// The answer to call `.0`, as its server wrote it.
    Answer(Value, Bytes),
    /// Anything else, read whole.
    Message(Value),
}

impl Text {
    /// Reads one JSON-RPC message. An answer is kept as its text only if
    /// that text can go anywhere a message goes as it is: valid UTF-8 (an
    /// upstream's body is bytes), and no carriage return (JSON allows one
    /// between tokens, and an SSE reader ends a `data:` line at a lone
    /// one). Anything else is read whole, as any other message; text that
    /// is not JSON is the error.
    pub(crate) fn read(text: impl Into<Bytes>) -> Result<Self, serde_json::Error> {
        let text = text.into();
        if !text.contains(&b'\r') && std::str::from_utf8(&text).is_ok() {
            if let Some(id) = crate::jsonrpc::answer_id(&text) {
                return Ok(Text::Answer(id, text));
            }
        }
        serde_json::from_slice(&text).map(Text::Message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_answer_with_an_id_is_kept_as_its_text() {
        let answer = r#"{"jsonrpc":"2.0","id":"a","result":{"n":1e400}}"#;
        match Text::read(answer) {
            Ok(Text::Answer(id, text)) => {
                assert_eq!(id, json!("a"));
                assert_eq!(text, answer.as_bytes());
            }
            _ => panic!("an answer"),
        }
        let error = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#;
        assert!(matches!(Text::read(error), Ok(Text::Answer(id, _)) if id == json!(3)));
        for whole in [
            r#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{},"result":{"a":1}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#,
            r#"[1,null,{}]"#,
            "{\"jsonrpc\":\"2.0\",\r\"id\":1,\"result\":{}}",
            r#"{}"#,
        ] {
            assert!(matches!(Text::read(whole), Ok(Text::Message(_))), "{whole}");
        }
        assert!(Text::read("not json").is_err());
        // Not UTF-8: read whole, and refused as serde_json refuses it.
        assert!(Text::read(&b"{\"id\":1,\"result\":\"\xff\"}"[..]).is_err());
    }
}
