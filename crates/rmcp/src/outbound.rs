//! A server message of rmcp's, written as JSON without rmcp's detour
//! through `serde_json::Value`.
//!
//! rmcp writes a notification's `params` (`WithMeta` in its `serde_impl`) by
//! turning them into a `Value` map first, to merge the `_meta` of the params
//! with the one its extensions may carry, then writing that map: every field is
//! copied and every string allocated twice (benches/results/hosted.md has what
//! that cost). Where there is nothing to merge (the notification's extensions
//! are empty, as a `Peer::notify_*` leaves them) the params are written
//! straight from their own `Serialize`, which is the same JSON value (tests
//! compare the two; keys come in field order, where rmcp's map sorts them);
//! anything else is written by rmcp as before.

// rmcp marks logging notifications deprecated (SEP-2577); handlers still
// send them, and they are the hottest kind written here.
#![allow(deprecated)]

use rmcp::model::{
    CancelledNotification, JsonRpcMessage, LoggingMessageNotification,
    LoggingMessageNotificationParam, Notification, NotificationMetaObject, NumberOrString,
    ProgressNotification, ProgressNotificationParam, ResourceUpdatedNotification,
    ServerJsonRpcMessage, ServerNotification,
};
use serde::Serialize;
use serde_json::Value;

/// `message` as JSON text.
pub(crate) fn to_vec(message: &ServerJsonRpcMessage) -> Result<Vec<u8>, serde_json::Error> {
    // serde_json starts at 128 bytes: a logging notification with a small
    // `data` is just past that, so every one grew its buffer once.
    let mut out = Vec::with_capacity(256);
    match direct(message) {
        Some(direct) => direct.write(&mut out)?,
        None => serde_json::to_writer(&mut out, message)?,
    }
    Ok(out)
}

/// A call's answer (a response, or an error with an id) as its id and its
/// JSON text, for the route to hand over or commit as it is
/// (`Outbox::send_answer`): written once, straight from rmcp's types, where
/// a value would be built, then written by the route. `None` for any other
/// message, and for an answer serde refuses to write (it then takes
/// rmcp's value path, which refuses it too).
pub(crate) fn answer(message: &ServerJsonRpcMessage) -> Option<(Value, Vec<u8>)> {
    let id = match message {
        JsonRpcMessage::Response(r) => &r.id,
        JsonRpcMessage::Error(e) => e.id.as_ref()?,
        _ => return None,
    };
    let id = id_value(id);
    let mut text = Vec::with_capacity(256);
    serde_json::to_writer(&mut text, message).ok()?;
    Some((id, text))
}

/// A JSON-RPC id of rmcp's as the JSON value it is on the wire.
pub(crate) fn id_value(id: &NumberOrString) -> Value {
    match id {
        NumberOrString::Number(n) => Value::from(*n),
        NumberOrString::String(s) => Value::from(&**s),
    }
}

impl Direct<'_> {
    /// Writes the notification as JSON text: the envelope's fixed keys as
    /// bytes, its method and params by serde.
    fn write(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        match self {
            Direct::Logging(n) => write_envelope(out, n),
            Direct::Progress(n) => write_envelope(out, n),
            Direct::Cancelled(n) => write_envelope(out, n),
            Direct::ResourceUpdated(n) => write_envelope(out, n),
        }
    }
}

/// How [`to_vec`] starts every notification it writes itself, and what
/// [`from_slice`] looks for.
const HEAD: &[u8] = br#"{"jsonrpc":"2.0","method":"#;

fn write_envelope<M: Serialize, P: Serialize>(
    out: &mut Vec<u8>,
    n: &Notification<M, P>,
) -> Result<(), serde_json::Error> {
    out.extend_from_slice(HEAD);
    serde_json::to_writer(&mut *out, &n.method)?;
    out.extend_from_slice(br#","params":"#);
    serde_json::to_writer(&mut *out, &n.params)?;
    out.push(b'}');
    Ok(())
}

/// JSON text of one server message, as [`to_vec`] wrote it, read back into
/// rmcp's type. rmcp's own entry point (`ServerJsonRpcMessage`'s
/// `Deserialize`) buffers the message and tries the JSON-RPC shapes, then
/// the notification kinds, in order; a message that starts as [`to_vec`]
/// writes a logging or progress notification is read as that kind at once
/// (what a replay of `emit` reads by the thousand). Anything else, and
/// anything that kind refuses, takes rmcp's path, so the outcome (the
/// message, or the error) is always rmcp's.
pub(crate) fn from_slice(json: &[u8]) -> Result<ServerJsonRpcMessage, serde_json::Error> {
    // rmcp's `Notification` reads `method` and `params` and ignores the
    // `jsonrpc` the prefix has checked.
    let method = json.strip_prefix(HEAD).unwrap_or_default();
    let hot: Option<ServerNotification> =
        if method.starts_with(br#""notifications/message","params":"#) {
            read_hot::<_, LoggingMessageNotificationParam>(json, |p| p.meta.take())
                .map(|n: LoggingMessageNotification| n.into())
        } else if method.starts_with(br#""notifications/progress","params":"#) {
            read_hot::<_, ProgressNotificationParam>(json, |p| p.meta.take())
                .map(|n: ProgressNotification| n.into())
        } else {
            None
        };
    match hot {
        Some(n) => Ok(JsonRpcMessage::notification(n)),
        None => serde_json::from_slice(json),
    }
}

/// A hot notification as JSON text: its envelope's keys checked (the
/// prefix holds `jsonrpc` and `method`; a second of either is refused, as
/// rmcp's reader refuses it) and its params read as their own type.
#[derive(serde::Deserialize)]
struct Hot<P> {
    #[serde(rename = "jsonrpc")]
    _jsonrpc: serde::de::IgnoredAny,
    #[serde(rename = "method")]
    _method: serde::de::IgnoredAny,
    params: P,
}

/// A hot notification, read as rmcp's `Notification` reader leaves it but
/// without its `#[serde(flatten)]`, which buffers every field of the params
/// (a logging notification's `data` too) before reading them again: its
/// params as their own type, and their `_meta` taken out of them (`take`)
/// into the extensions. `None` where it does not read so.
fn read_hot<M: Default, P: serde::de::DeserializeOwned>(
    json: &[u8],
    take: impl FnOnce(&mut P) -> Option<NotificationMetaObject>,
) -> Option<Notification<M, P>> {
    let Hot { mut params, .. } = serde_json::from_slice::<Hot<P>>(json).ok()?;
    let meta = take(&mut params);
    let mut notification = Notification::new(params);
    if let Some(meta) = meta {
        notification.extensions.insert(meta);
    }
    Some(notification)
}

/// `message` as a JSON value.
pub(crate) fn to_value(message: &ServerJsonRpcMessage) -> Result<Value, serde_json::Error> {
    match direct(message) {
        Some(direct) => serde_json::to_value(&direct),
        None => serde_json::to_value(message),
    }
}

/// A notification whose params rmcp writes as their own `Serialize`
/// would. Only params with one `_meta` field of their own and no flattened
/// parts are here: for them rmcp's merge can only move `_meta`.
enum Direct<'a> {
    Logging(&'a LoggingMessageNotification),
    Progress(&'a ProgressNotification),
    Cancelled(&'a CancelledNotification),
    ResourceUpdated(&'a ResourceUpdatedNotification),
}

/// `message` as a [`Direct`] notification, if it is one of those kinds and
/// has no extension `_meta` to merge; `None` for every other message.
fn direct(message: &ServerJsonRpcMessage) -> Option<Direct<'_>> {
    let JsonRpcMessage::Notification(n) = message else {
        return None;
    };
    let (direct, extensions) = match &n.notification {
        ServerNotification::LoggingMessageNotification(n) => (Direct::Logging(n), &n.extensions),
        ServerNotification::ProgressNotification(n) => (Direct::Progress(n), &n.extensions),
        ServerNotification::CancelledNotification(n) => (Direct::Cancelled(n), &n.extensions),
        ServerNotification::ResourceUpdatedNotification(n) => {
            (Direct::ResourceUpdated(n), &n.extensions)
        }
        _ => return None,
    };
    extensions.is_empty().then_some(direct)
}

/// The JSON-RPC envelope rmcp writes for a notification.
#[derive(Serialize)]
struct Envelope<'a, M, P> {
    jsonrpc: &'static str,
    method: &'a M,
    params: &'a P,
}

fn envelope<M, P>(n: &Notification<M, P>) -> Envelope<'_, M, P> {
    Envelope {
        jsonrpc: "2.0",
        method: &n.method,
        params: &n.params,
    }
}

impl Serialize for Direct<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Direct::Logging(n) => envelope(n).serialize(serializer),
            Direct::Progress(n) => envelope(n).serialize(serializer),
            Direct::Cancelled(n) => envelope(n).serialize(serializer),
            Direct::ResourceUpdated(n) => envelope(n).serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{
        CancelledNotificationParam, LoggingLevel, ProgressToken, RequestId,
        ResourceUpdatedNotificationParam, ToolListChangedNotification,
    };
    use serde_json::json;

    fn message(n: impl Into<ServerNotification>) -> ServerJsonRpcMessage {
        JsonRpcMessage::notification(n.into())
    }

    fn meta(v: Value) -> NotificationMetaObject {
        match v {
            Value::Object(map) => NotificationMetaObject::from(map),
            _ => unreachable!("an object"),
        }
    }

    /// Every kind written directly, with and without its optional fields
    /// and its own `_meta`.
    fn direct_kinds() -> Vec<ServerJsonRpcMessage> {
        let mut logging =
            LoggingMessageNotificationParam::new(LoggingLevel::Info, json!({"i": 1, "s": "é\"\n"}));
        let plain = message(LoggingMessageNotification::new(logging.clone()));
        logging.logger = Some("emit".into());
        logging.meta = Some(meta(json!({"trace": "t1", "n": [1, 2.5]})));
        let full = message(LoggingMessageNotification::new(logging));
        let progress = |token: NumberOrString| {
            let mut p = ProgressNotificationParam::new(ProgressToken(token), 0.5)
                .with_total(10.0)
                .with_message("half");
            p.meta = Some(meta(json!({"k": null})));
            message(ProgressNotification::new(p))
        };
        vec![
            plain,
            full,
            message(ProgressNotification::new(ProgressNotificationParam::new(
                ProgressToken(NumberOrString::Number(7)),
                3.0,
            ))),
            progress(NumberOrString::String("tok".into())),
            progress(NumberOrString::Number(-1)),
            message(CancelledNotification::new(CancelledNotificationParam::new(
                Some(RequestId::Number(4)),
                Some("gone".into()),
            ))),
            message(CancelledNotification::new(CancelledNotificationParam::new(
                None, None,
            ))),
            message(ResourceUpdatedNotification::new(
                ResourceUpdatedNotificationParam::new("file:///a b"),
            )),
        ]
    }

    /// An answer's text is the value rmcp's own path builds, under the id
    /// it answers; anything but an answer with an id is not one.
    #[test]
    fn an_answers_text_is_the_json_rmcp_writes() {
        use rmcp::model::{CallToolResult, ContentBlock, ErrorData, ServerResult};
        let mut result = CallToolResult::success(vec![ContentBlock::text("hi \"there\"\n")]);
        result.structured_content = Some(json!({"b": [1, 2.5, null], "a": {"z": "é"}}));
        let cases = [
            (
                JsonRpcMessage::response(
                    ServerResult::CallToolResult(result),
                    NumberOrString::Number(7),
                ),
                json!(7),
            ),
            (
                JsonRpcMessage::error(
                    ErrorData::invalid_params("no", Some(json!({"k": 1}))),
                    Some(NumberOrString::String("s-1".into())),
                ),
                json!("s-1"),
            ),
        ];
        for (m, id) in cases {
            let (got_id, text) = answer(&m).expect("an answer");
            assert_eq!(got_id, id);
            let value: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(value, serde_json::to_value(&m).unwrap(), "{m:?}");
        }
        let no_id = JsonRpcMessage::error(ErrorData::invalid_params("no", None), None);
        assert!(answer(&no_id).is_none());
        assert!(answer(&message(ToolListChangedNotification::default())).is_none());
    }

    #[test]
    fn a_direct_notification_is_the_json_rmcp_writes() {
        for m in direct_kinds() {
            assert!(direct(&m).is_some(), "{m:?} is written directly");
            let rmcp: Value = serde_json::to_value(&m).expect("rmcp writes it");
            let ours: Value = serde_json::from_slice(&to_vec(&m).expect("ours")).expect("JSON");
            assert_eq!(ours, rmcp, "to_vec");
            assert_eq!(to_value(&m).expect("ours"), rmcp, "to_value");
            // And it reads back as the same message, by rmcp and by ours.
            let back: ServerJsonRpcMessage = serde_json::from_value(ours).expect("rmcp reads it");
            assert_eq!(serde_json::to_value(&back).expect("again"), rmcp);
            let json = to_vec(&m).expect("ours");
            let read = from_slice(&json).expect("ours reads it");
            assert_eq!(format!("{read:?}"), format!("{back:?}"), "from_slice");
            assert_eq!(serde_json::to_value(&read).expect("again"), rmcp);
        }
    }

    #[test]
    fn what_from_slice_cannot_read_as_a_hot_kind_is_read_or_refused_by_rmcp() {
        let cases = [
            // Not a hot prefix: rmcp's path.
            br#"{"method":"notifications/message","params":{"level":"info","data":1},"jsonrpc":"2.0"}"#.as_slice(),
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // A hot prefix its kind refuses (no level): rmcp's answer.
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":1}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":7}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":"#,
            // A second method or params: refused by both.
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1},"method":"x"}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1},"params":{}}"#,
            // _meta in the params, null or not; other keys of the envelope.
            br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"a":[1]},"_meta":{"k":"v"}},"extra":1}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":0.5,"total":2,"_meta":null}}"#,
            br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":"x"}}"#,
        ];
        // The message as Debug shows it and as it is written again (which
        // puts the extensions' `_meta` back), or the error.
        let seen = |m: Result<ServerJsonRpcMessage, serde_json::Error>| {
            m.map(|m| (format!("{m:?}"), serde_json::to_value(&m).unwrap()))
                .map_err(|e| e.to_string())
        };
        for json in cases {
            let ours = seen(from_slice(json));
            let rmcp = seen(serde_json::from_slice::<ServerJsonRpcMessage>(json));
            assert_eq!(ours, rmcp, "{}", String::from_utf8_lossy(json));
        }
    }

    #[test]
    fn a_notification_with_extension_meta_or_another_kind_is_written_by_rmcp() {
        let mut with_meta = LoggingMessageNotification::new(LoggingMessageNotificationParam::new(
            LoggingLevel::Debug,
            json!("x"),
        ));
        with_meta
            .extensions
            .insert(meta(json!({"from": "extensions"})));
        let with_meta = message(with_meta);
        let list_changed = message(ToolListChangedNotification::default());
        for m in [with_meta, list_changed] {
            assert!(direct(&m).is_none(), "{m:?} goes to rmcp");
            assert_eq!(
                to_vec(&m).expect("ours"),
                serde_json::to_vec(&m).expect("rmcp")
            );
        }
        // The extension's `_meta` is in what rmcp wrote.
        let with_meta = message({
            let mut n = LoggingMessageNotification::new(LoggingMessageNotificationParam::new(
                LoggingLevel::Debug,
                json!("x"),
            ));
            n.extensions.insert(meta(json!({"from": "extensions"})));
            n
        });
        assert_eq!(
            to_value(&with_meta).expect("ours")["params"]["_meta"],
            json!({"from": "extensions"})
        );
    }
}
