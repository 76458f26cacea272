//! `rmcp_durable`'s `emit` (notifications sent on the session's standalone
//! stream after the answer) is refused to a MCP 2026-07-28 request, which
//! has no session and so no such stream, instead of answering success and
//! delivering nothing; a 2025-11-25 session still gets it. On both of the
//! example's transports (rmcp's own service, and mcp-resume hosting the
//! handler). A missing rmcp_durable fails it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

mod common;

use common::rmcp_durable;
use mcp_resume_client::McpClient;
use serde_json::{json, Value};

struct Example(Child);

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `rmcp_durable --transport T` on a memory log; its URL.
fn start(transport: &str) -> (Example, String) {
    let mut child = Command::new(rmcp_durable())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--transport",
            transport,
        ])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("rmcp_durable said {line:?}"))
        .to_owned();
    (Example(child), url)
}

/// A stateless (2026-07-28) `tools/call emit`; the JSON-RPC response.
async fn emit_stateless(url: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": "emit", "arguments": {"count": 5},
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"}
    }}});
    let text = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "emit")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("id") == Some(&json!(1)))
        .unwrap_or_else(|| panic!("no response in {text:?}"))
}

fn both_eras(transport: &str) {
    let (_ex, url) = start(transport);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let modern = emit_stateless(&url).await;
        let result = &modern["result"];
        assert_eq!(result["isError"], true, "{transport}: {modern}");
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("2026-07-28"), "{transport}: {text}");

        let mut c = McpClient::new(url.clone());
        c.initialize().await.unwrap();
        let r = c.call_tool("emit", json!({"count": 3})).await.unwrap();
        assert_eq!(
            r["content"][0]["text"], "emitting 3 notifications",
            "{transport}: {r}"
        );
    });
}

#[test]
fn emit_is_refused_to_a_stateless_request_on_rmcps_transport() {
    both_eras("rmcp");
}

#[test]
fn emit_is_refused_to_a_stateless_request_hosted_on_mcp_resume() {
    both_eras("mcp-resume");
}
