//! What the gateway tests share: the MCP servers they put behind it, a
//! session through it, a call, and an official SDK client's tour of
//! server-everything.

use std::path::PathBuf;
use std::time::Duration;

use mcp_resume_testkit::SdkClient;
use serde_json::{json, Value};

use super::{post, read, root, Serve};

pub fn everything() -> PathBuf {
    let bin = root().join("interop/node/node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "server-everything is not installed: run scripts/test (cd interop/node && npm ci)"
    );
    bin
}

/// server-everything over stdio behind a gateway on a free port of 127.0.0.1.
pub fn gateway_everything(dir: &std::path::Path) -> Serve {
    let bin = everything();
    Serve::gateway(dir, "127.0.0.1:0", &[], &[bin.to_str().unwrap(), "stdio"])
}

pub fn python_server() -> [String; 2] {
    let python = root().join("interop/python/.venv/bin/python");
    assert!(
        python.exists(),
        "the Python SDK is not installed: run scripts/test (interop/python/.venv)"
    );
    [
        python.display().to_string(),
        root()
            .join("interop/python/stdio_server.py")
            .display()
            .to_string(),
    ]
}

pub fn gateway_python(dir: &std::path::Path, extra: &[&str]) -> Serve {
    let cmd = python_server();
    Serve::gateway(dir, "127.0.0.1:0", extra, &[&cmd[0], &cmd[1]])
}

pub async fn init(url: &str) -> String {
    init_as(url, "python-stdio").await
}

/// Initializes a session through the gateway, whose server must say it is `server`.
pub async fn init_as(url: &str, server: &str) -> String {
    let resp = post(url, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}))
    .await;
    assert_eq!(resp.status(), 200);
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["result"]["serverInfo"]["name"], server, "{body}");
    let r = post(
        url,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(r.status(), 202);
    sid
}

/// Calls `name` and returns every message its answer carried: the response
/// alone as JSON, or the request stream it opened.
pub async fn call(url: &str, sid: &str, id: u64, name: &str, args: Value) -> Vec<Value> {
    let resp = post(
        url,
        Some(sid),
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": args}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    if resp.headers()["content-type"] == "application/json" {
        return vec![resp.json().await.unwrap()];
    }
    let events = read(resp, Duration::from_secs(20), |e| {
        serde_json::from_str::<Value>(&e.data).is_ok_and(|v| v["id"] == id)
    })
    .await
    .expect("the call's stream went silent");
    events
        .iter()
        .filter_map(|e| serde_json::from_str(&e.data).ok())
        .collect()
}

/// An official SDK client (`program script`: interop/node/gateway.mjs or
/// interop/python/gateway.py) lists and calls server-everything's tools
/// through the gateway at `url`, reads a resource, gets a prompt, receives
/// progress, and answers its sampling and elicitation requests.
pub fn sdk_client_uses_everything(program: &str, script: &str, url: &str) {
    let script = root().join(script);
    let mut client = SdkClient::spawn(program, &[script.display().to_string(), url.to_owned()]);
    let tools = client.wait_for("TOOLS", |l| l.starts_with("TOOLS"));
    assert!(tools.contains("trigger-sampling-request"), "{tools}");
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO")),
        "ECHO Echo: hello"
    );
    assert!(client
        .wait_for("RESOURCE", |l| l.starts_with("RESOURCE"))
        .contains("demo://"));
    assert_eq!(
        client.wait_for("PROMPT", |l| l.starts_with("PROMPT")),
        "PROMPT 1 true"
    );
    assert_eq!(
        client.wait_for("PROGRESS", |l| l.starts_with("PROGRESS")),
        "PROGRESS 3"
    );
    let sampled = client.wait_for("SAMPLED", |l| l.starts_with("SAMPLED"));
    assert!(sampled.contains("gateway-sampler-says-42"), "{sampled}");
    let elicited = client.wait_for("ELICITED", |l| l.starts_with("ELICITED"));
    assert!(elicited.contains("gateway-user"), "{elicited}");
    client.wait_for("DONE", |l| l == "DONE");
}

/// The result of the `pid` tool: which child answered.
pub async fn pid_of(url: &str, sid: &str, id: u64) -> Vec<Value> {
    call(url, sid, id, "pid", json!({})).await
}

pub fn pid(got: &[Value]) -> Option<u64> {
    got.last()?["result"]["structuredContent"]["result"].as_u64()
}
