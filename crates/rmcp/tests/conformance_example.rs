//! The `conformance` example (the suite's fixtures written with rmcp's
//! macros, served on mcp-resume's transport) as separate processes: the
//! official SDK clients answer its sampling and elicitation from their own
//! handlers, and a `kill -9` while a tool awaits the client ends the call
//! with an error after the restart instead of leaving it open.

use std::path::PathBuf;

use serde_json::{json, Value};

mod common;
use common::mcp_http::{init, post, read_until, resume, rpc};
use common::proc::{Instance, SdkClient};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs an SDK client's `ask` script against the example and checks both
/// answers reached the tools.
fn sdk_asks(program: &str, script: &str, who: &str) {
    let server = Instance::spawn_example("conformance", "memory");
    let mut client = SdkClient::spawn(program, &[script.to_owned(), server.url.clone()]);
    let sampled = client.wait_for("SAMPLED", |l| l.starts_with("SAMPLED"));
    assert!(
        sampled.contains(&format!("{who}-sampler-says-42")),
        "{sampled}"
    );
    let elicited = client.wait_for("ELICITED", |l| l.starts_with("ELICITED"));
    assert!(elicited.contains(&format!("{who}-user")), "{elicited}");
}

#[test]
fn typescript_sdk_client_answers_sampling_and_elicitation() {
    let root = root();
    assert!(
        root.join("interop/node/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "the TypeScript SDK is not installed: run scripts/test (cd interop/node && npm ci)"
    );
    sdk_asks(
        "node",
        root.join("interop/node/ask.mjs").to_str().unwrap(),
        "node",
    );
}

#[test]
fn python_sdk_client_answers_sampling_and_elicitation() {
    let root = root();
    let python = root.join("interop/python/.venv/bin/python");
    assert!(
        python.exists(),
        "the Python SDK is not installed: run scripts/test (interop/python/.venv)"
    );
    sdk_asks(
        python.to_str().unwrap(),
        root.join("interop/python/ask.py").to_str().unwrap(),
        "python",
    );
}

#[test]
fn a_kill_9_while_a_tool_awaits_elicitation_ends_the_call_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("disk:{}", dir.path().join("log").display());
    let mut first = Instance::spawn_example("conformance", &store);
    let rt = common::rt();
    let (sid, cursor) = rt.block_on(async {
        let http = reqwest::Client::new();
        let sid = init(&http, &first.url).await;
        let mut resp = post(
            &http,
            &first.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "test_elicitation", "arguments": {"message": "who are you?"}}}),
        )
        .send()
        .await
        .unwrap();
        let seen = read_until(&mut resp, |v| v["method"] == "elicitation/create").await;
        (sid, seen.last().unwrap().0.clone())
    });
    first.kill9();
    let second = Instance::spawn_example("conformance", &store);
    rt.block_on(async {
        let http = reqwest::Client::new();
        let mut resumed = resume(&http, &second.url, &sid, &cursor).await;
        let rest = read_until(&mut resumed, |v: &Value| v["id"] == 5).await;
        let (_, last) = rest.last().unwrap();
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(
            last["error"]["data"]["reason"], "server-restarted",
            "{last}"
        );
        // The session itself lives on: the restarted instance restores its backend.
        let pong: Value = rpc(
            &http,
            &second.url,
            &sid,
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        )
        .await;
        assert!(
            pong["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.len() >= 12),
            "{pong}"
        );
    });
}

#[test]
fn typed_arguments_that_do_not_fit_fail_the_tool_with_the_validation_message() {
    let server = Instance::spawn_example("conformance", "memory");
    common::rt().block_on(async {
        let http = reqwest::Client::new();
        let sid = init(&http, &server.url).await;
        let resp = http
            .post(&server.url)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .header("mcp-session-id", &sid)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "test_sampling", "arguments": {"prompt": 42}}}))
            .send()
            .await
            .unwrap();
        let reply: Value = resp.json().await.unwrap();
        // MCP 2025-11-25 (SEP-1303): input validation fails the tool, not
        // the request, so the model sees why and can correct itself.
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        let message = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains("expected a string"), "{reply}");
    });
}

/// A 2026-07-28 `tools/call` without a session, with the headers and
/// `_meta` the suite sends; `extra` is merged into the params. Returns the
/// JSON-RPC response.
async fn call_2026(http: &reqwest::Client, url: &str, id: u64, name: &str, extra: Value) -> Value {
    let mut params = json!({"name": name, "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities":
            {"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}}}});
    if let (Some(params), Value::Object(extra)) = (params.as_object_mut(), extra) {
        params.extend(extra);
    }
    let mut resp = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
        .send()
        .await
        .unwrap();
    let got = read_until(&mut resp, |m| m.get("id") == Some(&json!(id))).await;
    got.last().map(|(_, v)| v.clone()).unwrap_or_default()
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

#[test]
fn multi_round_states_differ_and_a_tampered_or_foreign_state_is_invalid_params() {
    let server = Instance::spawn_example_with("conformance", "memory", &["--transport", "rmcp"]);
    common::rt().block_on(async {
        let http = reqwest::Client::new();
        let tool = "test_input_required_result_multi_round";
        let r1 = call_2026(&http, &server.url, 1, tool, json!({})).await;
        assert_eq!(r1["result"]["resultType"], "input_required", "{r1}");
        assert!(r1["result"]["inputRequests"]["step1"].is_object(), "{r1}");
        let s1 = r1["result"]["requestState"].as_str().unwrap().to_owned();

        let step1 = json!({"inputResponses": {"step1": accept(json!({"name": "Alice"}))}});
        let mut round2 = step1.clone();
        round2["requestState"] = json!(s1);
        let r2 = call_2026(&http, &server.url, 2, tool, round2).await;
        assert!(r2["result"]["inputRequests"]["step2"].is_object(), "{r2}");
        let s2 = r2["result"]["requestState"].as_str().unwrap().to_owned();
        assert_ne!(s1, s2);

        let mut tampered = step1.clone();
        tampered["requestState"] = json!(format!("{s1}-TAMPERED"));
        let bad = call_2026(&http, &server.url, 3, tool, tampered).await;
        assert_eq!(bad["error"]["code"], -32602, "{bad}");
        // A state sealed for one tool does not open for another.
        let foreign = json!({"requestState": s1,
            "inputResponses": {"confirm": accept(json!({"ok": true}))}});
        let other = "test_input_required_result_request_state";
        let bad = call_2026(&http, &server.url, 4, other, foreign).await;
        assert_eq!(bad["error"]["code"], -32602, "{bad}");

        let round3 = json!({"requestState": s2,
            "inputResponses": {"step2": accept(json!({"color": "blue"}))}});
        let r3 = call_2026(&http, &server.url, 5, tool, round3).await;
        assert_eq!(r3["result"]["resultType"], "complete", "{r3}");
        let text = r3["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("name=Alice, color=blue"), "{r3}");
    });
}
