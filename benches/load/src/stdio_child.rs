//! `mcp-resume-load stdio-child`: the leanest MCP server over stdio that the
//! gateway benchmarks can put behind `mcp-resume gateway` by the thousand
//! (a Python SDK server holds tens of MiB per process; this one a few).
//! It answers `initialize`, `ping`, `tools/list` and `tools/call add`
//! (`{a, b}` -> `a + b`, also as `structuredContent.result`, like
//! interop/python/stdio_server.py), ignores notifications, and refuses any
//! other request with -32601. It ends when stdin does.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

/// Serves stdin/stdout until stdin ends.
pub fn run() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").filter(|_| msg.get("method").is_some()) else {
            continue; // a notification, or an answer to nothing we asked
        };
        let reply = match answer(&msg) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        if writeln!(out, "{reply}").and_then(|_| out.flush()).is_err() {
            return;
        }
    }
}

fn answer(msg: &Value) -> Result<Value, (i64, String)> {
    let params = &msg["params"];
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => Ok(json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "lean-stdio", "version": "0"}
        })),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": [{
            "name": "add",
            "description": "Adds two integers.",
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
        }]})),
        "tools/call" if params["name"] == "add" => {
            let (a, b) = (
                params["arguments"]["a"].as_i64().unwrap_or(0),
                params["arguments"]["b"].as_i64().unwrap_or(0),
            );
            Ok(
                json!({"content": [{"type": "text", "text": (a + b).to_string()}],
                      "structuredContent": {"result": a + b}, "isError": false}),
            )
        }
        "tools/call" => Err((-32602, format!("no tool {}", params["name"]))),
        m => Err((-32601, format!("no method {m}"))),
    }
}
