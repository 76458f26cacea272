//! A crash must not hang a call: a tool call answered as a request stream,
//! the server killed with `kill -9` while it runs, restarted on the same data.
//! The resume replays what was committed and then ends with a JSON-RPC error
//! response for the call, committed like any event; it never stays open and silent.

mod common;

use std::time::Duration;

use common::{post, read, rt, Serve};
use serde_json::{json, Value};

#[test]
fn a_call_whose_server_was_killed_ends_with_an_error_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let url = serve.url.clone();
    rt().block_on(async {
        let r = post(&url, None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await;
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let call = json!({"jsonrpc":"2.0","id":"call-42","method":"tools/call","params":{"name":"progress","arguments":{"steps":1000,"interval_ms":20},"_meta":{"progressToken":"p"}}});
        let r = post(&url, Some(&sid), call).await;
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        let seen = read(r, Duration::from_secs(10), |e| e.id.as_deref() == Some("1/5"))
            .await
            .expect("progress flows");
        assert_eq!(seen.last().unwrap().id.as_deref(), Some("1/5"));

        serve.kill9();
        serve.restart();

        let resume = reqwest::Client::new()
            .get(&url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .header("last-event-id", "1/5")
            .send()
            .await
            .unwrap();
        assert_eq!(resume.status(), 200);
        let events = read(resume, Duration::from_secs(10), |_| false)
            .await
            .expect("the resumed stream ends instead of staying open and silent");
        let messages: Vec<Value> = events
            .iter()
            .filter(|e| !e.data.is_empty())
            .map(|e| serde_json::from_str(&e.data).unwrap())
            .collect();
        let last = messages.last().expect("at least the error response");
        assert_eq!(last["id"], "call-42", "{last}");
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(last["error"]["data"]["reason"], "server-restarted", "{last}");
        // Every progress notification before it is contiguous from 6, none repeated.
        let ids: Vec<String> = events.iter().filter(|e| !e.data.is_empty()).filter_map(|e| e.id.clone()).collect();
        for (k, id) in ids.iter().enumerate() {
            assert_eq!(id, &format!("1/{}", 6 + k), "{ids:?}");
        }
        // A second resume from the start sees the same end: committed, not made up per reader.
        let again = reqwest::Client::new()
            .get(&url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .header("last-event-id", "1/0")
            .send()
            .await
            .unwrap();
        let events = read(again, Duration::from_secs(10), |_| false).await.expect("ends");
        let n = events.iter().filter(|e| !e.data.is_empty()).count();
        assert_eq!(n, 5 + messages.len(), "the error response was committed once");
    });
}

#[test]
fn a_call_whose_instance_dies_ends_with_an_error_on_another_instance() {
    // Two instances on one Redis; B checks silent request streams every second.
    let redis = common::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut a = Serve::spawn(dir.path(), "127.0.0.1:0", &["--store", &redis.url]);
    let b = Serve::spawn(
        dir.path(),
        "127.0.0.1:0",
        &["--store", &redis.url, "--heartbeat-secs", "1"],
    );
    rt().block_on(async {
        let r = post(&a.url, None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await;
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let call = json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress","arguments":{"steps":1000,"interval_ms":20},"_meta":{"progressToken":"p"}}});
        let r = post(&a.url, Some(&sid), call).await;
        read(r, Duration::from_secs(10), |e| e.id.as_deref() == Some("1/3"))
            .await
            .expect("progress flows");
        a.kill9();
        // B serves the resume at once; the call ends once A's heartbeat has expired.
        let resume = reqwest::Client::new()
            .get(&b.url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .header("last-event-id", "1/3")
            .send()
            .await
            .unwrap();
        assert_eq!(resume.status(), 200);
        let events = read(resume, Duration::from_secs(30), |_| false)
            .await
            .expect("the stream ends instead of waiting forever");
        let last: Value =
            serde_json::from_str(&events.iter().rev().find(|e| !e.data.is_empty()).unwrap().data)
                .unwrap();
        assert_eq!(last["id"], 7, "{last}");
        assert_eq!(last["error"]["data"]["reason"], "server-restarted", "{last}");
    });
}
