//! `mcp-resume gateway`: existing stdio MCP servers behind the durable
//! transport. The official reference server (`server-everything`, npm) with
//! the official TypeScript SDK client; a stdio server built with the Python
//! SDK through `kill -9` of the gateway, a child that exits, the cap on
//! children, and two gateways on one Redis: one child per session, on the
//! lease holder, through `kill -9` of it; an idle session's child stopped.
//! `--upstream URL`: gateway_upstream.rs.

mod common;

use std::time::Duration;

use common::gateway::{
    call, gateway_everything, gateway_python, init, pid, pid_of, python_server,
    sdk_client_uses_everything,
};
use common::{post, read, read_until, rt, RedisServer};
use mcp_resume_client::{McpClient, ReaderOptions, Transport};
use serde_json::{json, Value};

#[test]
fn server_everything_behind_the_gateway_with_the_typescript_sdk_client() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_everything(dir.path());
    sdk_client_uses_everything("node", "interop/node/gateway.mjs", &gw.url);
}

#[test]
fn server_everything_behind_the_gateway_with_the_python_sdk_client() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_everything(dir.path());
    let python = python_server()[0].clone();
    sdk_client_uses_everything(&python, "interop/python/gateway.py", &gw.url);
}

#[test]
fn a_websocket_reader_through_the_gateway_loses_nothing_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut gw = gateway_python(dir.path(), &[]);
    let rt = rt();
    let (sid, cursor) = rt.block_on(async {
        let mut client = McpClient::new(&gw.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        // The child's log messages go to the session stream, committed
        // before its answer: all 50 are in the log when the call returns.
        let r = client.call_tool("count", json!({"n": 50})).await.unwrap();
        assert_eq!(r["content"][0]["text"], "counted 50", "{r}");
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(0);
        let mut ws = client.reader(opts).unwrap();
        let seen = read_until(&mut ws, 20).await;
        assert_eq!(
            ws.fallbacks(),
            0,
            "the gateway upgrades with the cursor echo"
        );
        (sid, seen)
    });
    // Killed with 30 events committed and not yet read.
    gw.kill9();
    gw.restart();
    rt.block_on(async {
        let client = McpClient::new(&gw.url).with_session(&sid);
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(*cursor.last().unwrap());
        let mut ws = client.reader(opts).unwrap();
        // A new child, initialized with the stored params, goes on.
        let r = client.call_tool("count", json!({"n": 10})).await.unwrap();
        assert_eq!(r["content"][0]["text"], "counted 10", "{r}");
        let mut all = cursor;
        all.extend(read_until(&mut ws, 60).await);
        assert_eq!(
            all,
            (1..=60).collect::<Vec<_>>(),
            "nothing lost, nothing twice"
        );
        assert_eq!(ws.fallbacks(), 0);
    });
}

#[test]
fn a_python_sdk_stdio_server_survives_kill_9_of_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let mut gw = gateway_python(dir.path(), &[]);
    let rt = rt();
    let (sid, cursor) = rt.block_on(async {
        let sid = init(&gw.url).await;
        let got = call(&gw.url, &sid, 1, "add", json!({"a": 2, "b": 3})).await;
        assert_eq!(got.last().unwrap()["result"]["structuredContent"]["result"], 5, "{got:?}");
        let read_note = post(&gw.url, Some(&sid), json!({"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": "note://hello"}})).await;
        let note: Value = read_note.json().await.unwrap();
        assert_eq!(note["result"]["contents"][0]["text"], "hello from python", "{note}");
        // A slow call in flight when the gateway dies.
        // (Accepting only SSE: its request stream opens at once.)
        let slow = reqwest::Client::new()
            .post(&gw.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .body(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "wait", "arguments": {"seconds": 60}}}).to_string())
            .send()
            .await
            .unwrap();
        let first = read(slow, Duration::from_secs(10), |_| true).await.unwrap();
        (sid, first[0].id.clone().unwrap())
    });
    gw.kill9();
    gw.restart();
    rt.block_on(async {
        // The call that was in flight ends with an error, never a hang.
        let resumed = reqwest::Client::new()
            .get(&gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("last-event-id", &cursor)
            .send()
            .await
            .unwrap();
        assert_eq!(resumed.status(), 200);
        let events = read(resumed, Duration::from_secs(20), |e| {
            e.data.contains("\"id\":3")
        })
        .await
        .expect("the in-flight call's stream went silent");
        let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(
            last["error"]["data"]["reason"], "server-restarted",
            "{last}"
        );
        // The session goes on: a new child, initialized with the stored params.
        let got = call(&gw.url, &sid, 4, "add", json!({"a": 20, "b": 22})).await;
        assert_eq!(
            got.last().unwrap()["result"]["structuredContent"]["result"],
            42,
            "{got:?}"
        );
    });
}

#[test]
fn a_child_that_exits_ends_its_session_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_python(dir.path(), &[]);
    rt().block_on(async {
        let sid = init(&gw.url).await;
        let got = call(&gw.url, &sid, 1, "crash", json!({})).await;
        let last = got.last().unwrap();
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(last["error"]["data"]["reason"], "backend-stopped", "{last}");
        // Then the session is gone.
        let mut status = 0;
        for _ in 0..50 {
            let r = post(
                &gw.url,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
            )
            .await;
            status = r.status().as_u16();
            if status == 404 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(status, 404);
    });
}

/// A child that answers `initialize`, then every call with a number no JSON
/// value holds exactly (past 64 bits and `f64`'s precision) and its keys out
/// of order, written by hand.
const VERBATIM_CHILD: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "method" not in m or "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "verbatim", "version": "0"}}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
    else:
        sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":{"z":1,"big":123456789012345678901234567890,"content":[]}}\n' % json.dumps(m["id"]))
        sys.stdout.flush()
"#;

/// What a child answers reaches the client as the child wrote it, as JSON
/// and on a call's request stream, through the gateway and through a second
/// gateway in front of it (`--upstream`): a gateway that read the answer
/// into a value and wrote it again would round the number
/// (1.2345678901234568e+29) and sort the keys.
#[test]
fn a_childs_answer_reaches_the_client_as_the_child_wrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::Serve::gateway(
        dir.path().join("stdio").as_path(),
        "127.0.0.1:0",
        &[],
        &["python3", "-c", VERBATIM_CHILD],
    );
    let front = common::Serve::upstream(
        dir.path().join("front").as_path(),
        "127.0.0.1:0",
        &[],
        &gw.url,
    );
    rt().block_on(async {
        answers_verbatim(&gw.url).await;
        answers_verbatim(&front.url).await;
    });
}

/// Calls the verbatim child's tool through `url` twice, answered as JSON and
/// on a request stream, and finds its answer's text unchanged in both.
async fn answers_verbatim(url: &str) {
    let written = r#""result":{"z":1,"big":123456789012345678901234567890,"content":[]}"#;
    let sid = common::gateway::init_as(url, "verbatim").await;
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "any", "arguments": {}}})
    };
    let resp = post(url, Some(&sid), call(1)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let text = resp.text().await.unwrap();
    assert!(text.contains(written), "{url}: {text}");
    // Answered on a request stream, from the log.
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .body(call(2).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = read(resp, Duration::from_secs(20), |e| {
        e.data.contains(r#""id":2"#)
    })
    .await
    .expect("the call's stream went silent");
    let last = &events.last().expect("an answer").data;
    assert!(last.contains(written), "{url}: {last}");
}

#[test]
fn children_beyond_the_cap_get_429() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_python(dir.path(), &["--max-children", "1"]);
    rt().block_on(async {
        let _first = init(&gw.url).await;
        let second = post(&gw.url, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}))
        .await;
        assert_eq!(second.status(), 429);
        let body: Value = second.json().await.unwrap();
        assert_eq!(body["error"], "limit-reached", "{body}");
    });
}

#[test]
fn two_gateways_on_redis_run_one_child_per_session_and_survive_the_owners_kill_9() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str(), "--heartbeat-secs", "1"];
    let mut a = gateway_python(dir.path(), &store);
    let b = gateway_python(dir.path(), &store);
    rt().block_on(async {
        // The session starts on A, which holds its lease and runs its child.
        let sid = init(&a.url).await;
        let on_a = pid(&pid_of(&a.url, &sid, 1).await).expect("a pid");
        // B forwards to A through Redis instead of starting a second child.
        for id in 2..5 {
            let got = pid_of(&b.url, &sid, id).await;
            assert_eq!(pid(&got), Some(on_a), "one child per session: {got:?}");
        }
        let got = call(&b.url, &sid, 5, "add", json!({"a": 2, "b": 3})).await;
        assert_eq!(
            got.last().unwrap()["result"]["structuredContent"]["result"],
            5,
            "{got:?}"
        );
        // A notification sent to B reaches the child (its answer to the
        // cancelled call is dropped, the call's stream ends with an error).
        let slow = post(
            &b.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
            "params": {"name": "wait", "arguments": {"seconds": 60}}}),
        )
        .await;
        assert_eq!(slow.status(), 200);
        let r = post(
            &b.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 6, "reason": "test"}}),
        )
        .await;
        assert_eq!(r.status(), 202);
        let events = read(slow, Duration::from_secs(10), |e| {
            e.data.contains("\"id\":6")
        })
        .await
        .expect("the cancelled call's stream ends");
        let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(last["error"]["data"]["reason"], "cancelled", "{last}");

        // A call in flight on A's child, read through B, when A dies.
        let slow = post(
            &b.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "wait", "arguments": {"seconds": 60}}}),
        )
        .await;
        assert_eq!(slow.status(), 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.kill9();
        let events = read(slow, Duration::from_secs(30), |e| {
            e.data.contains("\"id\":7")
        })
        .await
        .expect("the in-flight call ends instead of waiting forever");
        let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(
            last["error"]["data"]["reason"], "server-restarted",
            "{last}"
        );
        // The session goes on through B, which takes the lease once A's
        // heartbeat is gone and starts a new child with the stored params.
        let got = pid_of(&b.url, &sid, 8).await;
        let on_b = pid(&got).unwrap_or_else(|| panic!("B serves the session: {got:?}"));
        assert_ne!(on_b, on_a, "a new child");
        assert_eq!(pid(&pid_of(&b.url, &sid, 9).await), Some(on_b));
    });
}

#[test]
fn an_idle_session_s_child_is_stopped_after_the_session_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_python(dir.path(), &["--session-ttl-secs", "2"]);
    rt().block_on(async {
        let sid = init(&gw.url).await;
        let child = pid(&pid_of(&gw.url, &sid, 1).await).expect("a pid");
        let proc_dir = std::path::PathBuf::from(format!("/proc/{child}"));
        assert!(proc_dir.exists());
        // Nothing happens for longer than the TTL: the session ends, its child stops.
        let mut gone = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
            if status.is_empty() || status.contains("State:\tZ") {
                gone = true;
                break;
            }
        }
        assert!(gone, "the idle session's child {child} still runs");
        let r = post(
            &gw.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        )
        .await;
        assert_eq!(r.status(), 404, "the session ended");
    });
}

/// A session with a call in flight is not idle: neither a child slower to
/// answer `initialize` than the session TTL, nor a call that outlasts it,
/// loses its session to idle expiry meanwhile (it did: maintenance ended the
/// session under the in-flight `initialize`, whose answer then came back
/// without `Mcp-Session-Id` after the reply deadline).
#[test]
fn a_call_in_flight_keeps_its_session_past_the_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let [python, script] = python_server();
    let slow = format!("sleep 3; exec '{python}' '{script}'");
    let gw = common::Serve::gateway(
        dir.path(),
        "127.0.0.1:0",
        // 3 s: the child's start (3 s, then Python's import) and the call
        // (3.5 s) each outlast it, and each stays within the two TTLs a
        // call keeps its session for, with room for a slow import on a
        // loaded machine (a TTL of 2 s left the start 1 s of it).
        &["--session-ttl-secs", "3"],
        &["/bin/sh", "-c", &slow],
    );
    rt().block_on(async {
        let sid = init(&gw.url).await;
        let got = call(&gw.url, &sid, 1, "wait", json!({"seconds": 3.5})).await;
        let last = got.last().expect("an answer");
        assert!(
            last.get("result").is_some(),
            "the call is answered: {got:?}"
        );
        // The session lives on after both.
        assert!(pid(&pid_of(&gw.url, &sid, 2).await).is_some());
    });
}

/// The child processes of process `pid`.
fn children_of(pid: u32) -> usize {
    let out = std::process::Command::new("pgrep")
        .args(["-P", &pid.to_string()])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_stateless_listen_holds_no_child_and_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_python(dir.path(), &["--child-init-secs", "1"]);
    rt().block_on(async {
        // A stateless listen asking for the resumable extension: a stdio
        // child of the session era has nothing to listen with, so the
        // gateway neither offers the extension nor starts a child for it
        // (it used to start one that nobody initialized).
        let resp = reqwest::Client::new()
            .post(&gw.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "subscriptions/listen")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
                "params": {"notifications": {}, "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {
                        "extensions": {"dev.mcp-resume/resumable-listen": {}}}}}})
                .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404);
        assert!(resp.headers().get("x-mcp-resume-listen").is_none());
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32601, "{v}");
        assert_eq!(children_of(gw.child.id()), 0, "no child for a listen");
    });
}
