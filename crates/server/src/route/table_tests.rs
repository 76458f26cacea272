//! The routing table's unit tests: where each kind of message goes.
use super::*;
use serde_json::json;

fn out(message: Value, related: Option<Value>) -> Outbound {
    Outbound { message, related }
}

fn committed(r: Routed) -> (StreamKey, Value) {
    match r {
        Routed::Commit(k, m) => (k, m.into_value(&Value::Null)),
        _ => panic!("expected a commit"),
    }
}

#[test]
fn a_calls_messages_follow_it_and_its_response_ends_it() {
    let mut t = Table::new("w.".into());
    let params = json!({"name": "x", "_meta": {"progressToken": "p1"}});
    assert!(t
        .register(&json!(7), &params, Dest::Stream(StreamKey::Request(3)))
        .is_ok());
    // A second call with the same id is refused while the first runs.
    assert!(t
        .register(&json!(7), &json!({}), Dest::Stream(StreamKey::Session))
        .is_err());
    let p = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "p1", "progress": 1}});
    assert_eq!(committed(t.route(out(p, None))).0, StreamKey::Request(3));
    let ask = json!({"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {}});
    let (k, m) = committed(t.route(out(ask, Some(json!(7)))));
    assert_eq!(k, StreamKey::Request(3));
    assert_eq!(m["id"], json!("w.0"));
    // Unrelated notifications go to the session stream.
    let log = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}});
    assert_eq!(committed(t.route(out(log, None))).0, StreamKey::Session);
    // The client's answer is translated back, once.
    let answer = json!({"jsonrpc": "2.0", "id": "w.0", "result": {}});
    assert_eq!(t.client_response(answer.clone()).unwrap()["id"], json!(0));
    assert!(t.client_response(answer).is_none());
    let resp = json!({"jsonrpc": "2.0", "id": 7, "result": {}});
    assert_eq!(
        committed(t.route(out(resp.clone(), None))).0,
        StreamKey::Request(3)
    );
    assert!(t.idle());
    // A second response for the same call has nowhere to go.
    assert!(matches!(t.route(out(resp, None)), Routed::Drop(_)));
}

#[test]
fn a_call_that_ends_takes_its_unanswered_server_requests_with_it() {
    let mut t = Table::new("w.".into());
    t.register(&json!(1), &json!({}), Dest::Stream(StreamKey::Request(1)))
        .unwrap();
    let ask = json!({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {}});
    t.route(out(ask, Some(json!(1))));
    // A request of the session itself (no call) stays until answered.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    t.route(out(ping, None));
    let resp = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    t.route(out(resp, None));
    assert!(!t.idle(), "the session's own request still waits");
    assert!(t
        .client_response(json!({"jsonrpc": "2.0", "id": "w.0", "result": {}}))
        .is_none());
    assert!(t
        .client_response(json!({"jsonrpc": "2.0", "id": "w.1", "result": {}}))
        .is_some());
    assert!(t.idle(), "nothing in flight: the route may park");
}

#[test]
fn ids_and_tokens_are_told_apart_by_type() {
    let mut t = Table::new("w.".into());
    let (tx, _rx) = oneshot::channel();
    t.register(&json!("1"), &json!({}), Dest::Json(tx))
        .ok()
        .unwrap();
    let resp = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    assert!(matches!(t.route(out(resp, None)), Routed::Drop(_)));
    let resp = json!({"jsonrpc": "2.0", "id": "1", "result": {}});
    assert!(matches!(t.route(out(resp, None)), Routed::Answer(..)));
}

#[test]
fn a_backend_cancel_of_its_request_is_translated_and_follows_it() {
    let mut t = Table::new("w.".into());
    t.register(&json!(1), &json!({}), Dest::Stream(StreamKey::Request(1)))
        .ok()
        .unwrap();
    let ask = json!({"jsonrpc": "2.0", "id": 5, "method": "elicitation/create", "params": {}});
    t.route(out(ask, Some(json!(1))));
    let cancel =
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}});
    let (k, m) = committed(t.route(out(cancel, None)));
    assert_eq!(k, StreamKey::Request(1));
    assert_eq!(m["params"]["requestId"], json!("w.0"));
    assert!(t
        .client_response(json!({"jsonrpc": "2.0", "id": "w.0", "result": {}}))
        .is_none());
}

#[test]
fn once_drained_nothing_registers_and_every_call_was_handed_back() {
    let mut t = Table::new("w.".into());
    let (tx, _rx) = oneshot::channel();
    t.register(&json!(1), &json!({}), Dest::Json(tx)).unwrap();
    t.register(&json!(2), &json!({}), Dest::Stream(StreamKey::Request(1)))
        .unwrap();
    let mut ids: Vec<Value> = t.drain().into_iter().map(|(id, _)| id).collect();
    ids.sort_by_key(|v| v.as_i64());
    assert_eq!(ids, [json!(1), json!(2)]);
    let (tx, _rx) = oneshot::channel();
    assert_eq!(
        t.register(&json!(3), &json!({}), Dest::Json(tx)).err(),
        Some(Refusal::Stopped)
    );
}

#[test]
fn a_lazy_call_opens_its_stream_on_its_first_related_message() {
    let mut t = Table::new("w.".into());
    let (tx, _rx) = oneshot::channel();
    let params = json!({"_meta": {"progressToken": 5}});
    t.register(&json!(1), &params, Dest::Lazy(tx)).unwrap();
    let p = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 5}});
    let call = match t.route(out(p.clone(), None)) {
        Routed::Open { call, .. } => call,
        _ => panic!("expected an open"),
    };
    assert!(t.opened(&call, StreamKey::Request(4)).is_some());
    assert_eq!(committed(t.route(out(p, None))).0, StreamKey::Request(4));
    let resp = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
    assert_eq!(committed(t.route(out(resp, None))).0, StreamKey::Request(4));
    // A lazy call that only answers is answered as JSON.
    let (tx, _rx) = oneshot::channel();
    t.register(&json!(2), &json!({}), Dest::Lazy(tx)).unwrap();
    let resp = json!({"jsonrpc": "2.0", "id": 2, "result": {}});
    assert!(matches!(t.route(out(resp, None)), Routed::AnswerLazy(..)));
}

/// A backend's own encoding of an answer goes where a value would, and as
/// it is: to the POST that awaits it, or committed to the call's stream.
#[test]
fn an_encoded_answer_is_routed_as_its_text() {
    let mut t = Table::new("w.".into());
    let text = |id: u64| {
        bytes::Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"z":1,"a":2}}}}"#
        ))
    };
    let (tx, mut rx) = oneshot::channel();
    t.register(&json!(1), &json!({}), Dest::Json(tx)).unwrap();
    assert!(t.answer_json(&json!(1), Message::Text(text(1))).is_ok());
    match rx.try_recv() {
        Ok(Message::Text(b)) => assert_eq!(b, text(1)),
        _ => panic!("expected the text itself"),
    }
    t.register(&json!(2), &json!({}), Dest::Stream(StreamKey::Request(3)))
        .unwrap();
    let back = t.answer_json(&json!(2), Message::Text(text(2)));
    assert!(
        back.is_err(),
        "a stream's answer is committed, not handed over"
    );
    match t.route_answer(&json!(2), back.unwrap_err()) {
        Routed::Commit(StreamKey::Request(3), Message::Text(b)) => assert_eq!(b, text(2)),
        _ => panic!("expected its text committed to its stream"),
    }
    assert!(
        matches!(t.route_answer(&json!(2), Message::Text(text(2))), Routed::Drop(id) if id == json!(2)),
        "answered already"
    );
}

/// What keeps a session from idle expiry: a call whose POST still waits,
/// a call on a request stream, a server request, each for a bounded time;
/// not a call whose client hung up, nor one older than the bound.
#[test]
fn only_a_waited_for_call_younger_than_the_bound_keeps_a_session_alive() {
    let hour = std::time::Duration::from_secs(3600);
    let mut t = Table::new("w.".into());
    assert!(!t.keeps_alive(hour), "nothing in flight");
    let (tx, rx) = oneshot::channel();
    t.register(&json!(1), &json!({}), Dest::Json(tx)).unwrap();
    assert!(t.keeps_alive(hour), "its POST waits");
    assert!(!t.keeps_alive(std::time::Duration::ZERO), "past the bound");
    drop(rx);
    assert!(!t.keeps_alive(hour), "its client hung up");
    t.register(&json!(2), &json!({}), Dest::Stream(StreamKey::Request(1)))
        .unwrap();
    assert!(t.keeps_alive(hour), "a request stream can be resumed");
    t.forget(&json!(2));
    let ask = json!({"jsonrpc": "2.0", "id": 0, "method": "roots/list", "params": {}});
    let _ = t.route(out(ask, None));
    assert!(t.keeps_alive(hour), "a server request waits for the client");
}

#[test]
fn a_key_is_the_ids_json_text_so_1_and_string_1_differ() {
    for id in [
        json!(1),
        json!(-7),
        json!(1.5),
        json!(u64::MAX),
        json!("1"),
        json!("a \"quoted\" \\ id\n\u{e9}"),
        json!(null),
    ] {
        assert_eq!(key(&id), id.to_string(), "{id:?}");
    }
    assert_ne!(key(&json!(1)), key(&json!("1")));
}

/// A lookup finds a call under the key it was registered with, whether the
/// key fits on the stack or not (a string id longer than the stack's room,
/// one that just fits, escapes, both signs and number kinds).
#[test]
fn a_call_is_found_and_answered_under_its_key_whatever_its_length() {
    let long = "x".repeat(200);
    let edge = "y".repeat(46); // 48 bytes with its quotes
    let over = "z".repeat(47);
    for id in [
        json!(1),
        json!(-7),
        json!(u64::MAX),
        json!("1"),
        json!("a \"quoted\" \\ id\n\u{e9}"),
        json!(edge),
        json!(over),
        json!(long),
    ] {
        assert_eq!(Lookup::of(&id).as_str(), key(&id), "{id:?}");
        let mut t = Table::new("w.".into());
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        t.register(&id, &json!({}), Dest::Json(tx)).unwrap();
        let reply = Message::Value(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
        assert!(t.answer_json(&id, reply).is_ok(), "{id:?}");
        assert!(
            rx.try_recv().is_ok(),
            "{id:?}: the waiting POST got its answer"
        );
        assert!(t.idle(), "{id:?}");
        t.register(&id, &json!({}), Dest::Stream(StreamKey::Request(1)))
            .unwrap();
        assert!(matches!(t.fail(&id), Some(Dest::Stream(_))), "{id:?}");
        assert!(matches!(t.forget(&id), Some(Dest::Failed)), "{id:?}");
        assert!(t.idle(), "{id:?}");
    }
}
