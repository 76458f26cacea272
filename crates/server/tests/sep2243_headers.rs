//! SEP-2243's request headers from a browser and in Base64: a preflight
//! grants `Mcp-Param-*` (any), `Mcp-Method`, `Mcp-Name` and W3C trace
//! context to an allowed origin, nothing it does not know; an `Mcp-Name`
//! sent as `=?base64?…?=` is decoded before it is compared with the body.

mod common;

use std::sync::Arc;

use common::TestServer;
use mcp_resume_log::{Log, MemoryLog};
use mcp_resume_server::demo::demo_tools;
use mcp_resume_server::tasks::{Caller, TaskEnd, TaskStore};
use mcp_resume_server::{McpServer, ServerConfig};
use serde_json::{json, Value};

#[tokio::test]
async fn a_preflight_allows_the_stateless_era_s_headers_and_trace_context_only() {
    let mut config = ServerConfig::default();
    config.allowed_origins = vec!["https://app.example".into()];
    let s = TestServer::start(config).await;
    let r = reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, &s.url)
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,mcp-protocol-version,Mcp-Method,mcp-name,mcp-param-region,MCP-Param-Tenant-Id,traceparent,tracestate,x-evil,mcp-param-",
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let allowed: Vec<String> = r.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .split(',')
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for want in [
        "content-type",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "mcp-param-region",
        "mcp-param-tenant-id",
        "traceparent",
        "tracestate",
    ] {
        assert!(
            allowed.iter().any(|a| a == want),
            "{want} not in {allowed:?}"
        );
    }
    for not in ["x-evil", "mcp-param-"] {
        assert!(!allowed.iter().any(|a| a == not), "{not} in {allowed:?}");
    }
    // Another origin is granted nothing.
    let r = reqwest::Client::new()
        .request(reqwest::Method::OPTIONS, &s.url)
        .header("origin", "https://evil.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "mcp-param-region")
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("access-control-allow-headers").is_none());
    assert!(r.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_base64_mcp_name_is_decoded_before_it_is_compared() {
    let log: Arc<dyn Log> = Arc::new(MemoryLog::default());
    let store = TaskStore::new(log.clone());
    let server =
        McpServer::new(log, demo_tools(), ServerConfig::default()).with_tasks(store.clone());
    let s = TestServer::start_server(server, "/mcp").await;
    let created = store
        .spawn(Caller::default(), |_| async {
            TaskEnd::Completed(json!({"content": []}))
        })
        .await
        .unwrap();
    let task = created["taskId"].as_str().unwrap().to_owned();
    let get = |name: String| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {
            "taskId": task, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}});
        reqwest::Client::new()
            .post(&s.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tasks/get")
            .header("mcp-name", name)
            .body(body.to_string())
            .send()
    };
    let encoded = format!("=?base64?{}?=", base64(task.as_bytes()));
    let v: Value = get(encoded).await.unwrap().json().await.unwrap();
    assert_eq!(v["result"]["taskId"], task, "{v}");
    // Another task's id, Base64 or not, and a broken encoding: -32020.
    for bad in [
        format!("=?base64?{}?=", base64(b"another")),
        "=?base64?%%%?=".to_owned(),
        "another".to_owned(),
    ] {
        let v: Value = get(bad.clone()).await.unwrap().json().await.unwrap();
        assert_eq!(v["error"]["code"], -32020, "{bad}: {v}");
    }
}

/// Standard padded Base64.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
