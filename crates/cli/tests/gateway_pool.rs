//! The gateway's stateless pool (`gateway -- CMD`, docs/protocol.md 3.6)
//! keeps principals apart and every bound explicit: with OAuth, two
//! principals that declare the same capabilities get two children; a
//! principal that varies its capabilities churns its own children, never
//! another's warm one; children start no faster than the configured rate;
//! a child runs a bounded number of calls and queues a bounded number of
//! messages for its stdin. Each refusal is a 429 with `Retry-After`, named
//! in `data.limit` and counted in `mcp_resume_limit_refusals_total`.

mod common;

use std::time::Duration;

use common::gateway::python_server;
use common::{rt, Serve};
use mcp_resume_testkit::TestIssuer;
use serde_json::{json, Value};

const ISS: &str = "https://auth.test";
const AUD: &str = "https://mcp.test/mcp";

/// A gateway with OAuth in front of `command` (the Python SDK's stdio
/// server unless given), with `extra` flags; the issuer of its tokens.
fn gateway(dir: &std::path::Path, extra: &[&str], command: Option<&[&str]>) -> (Serve, TestIssuer) {
    let issuer = TestIssuer::new(ISS, AUD);
    let jwks = dir.join("jwks.json");
    std::fs::write(&jwks, &issuer.jwks).unwrap();
    let mut flags = vec![
        "--store",
        "memory",
        "--oauth-issuer",
        ISS,
        "--oauth-audience",
        AUD,
        "--oauth-jwks",
        jwks.to_str().unwrap(),
    ];
    flags.extend_from_slice(extra);
    let python = python_server();
    let default = [python[0].as_str(), python[1].as_str()];
    let gw = Serve::gateway(dir, "127.0.0.1:0", &flags, command.unwrap_or(&default));
    (gw, issuer)
}

/// One stateless `tools/call` of `tool` as the holder of `token`,
/// declaring `caps`: the status, `Retry-After` and the answer.
async fn call(
    url: &str,
    token: &str,
    tool: &str,
    args: Value,
    caps: Value,
) -> (u16, Option<u64>, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": tool, "arguments": args, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "gateway-pool", "version": "1"}}}});
    let resp = reqwest::Client::new()
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    (status, retry, resp.json().await.unwrap())
}

/// The process id of the child that answers `token`'s `pid` call with
/// `caps`, retrying (as a client does) after each 429's `Retry-After`.
async fn pid(url: &str, token: &str, caps: Value) -> u64 {
    for _ in 0..20 {
        match call(url, token, "pid", json!({}), caps.clone()).await {
            (429, Some(after), _) => tokio::time::sleep(Duration::from_secs(after)).await,
            (200, _, v) => {
                return v["result"]["structuredContent"]["result"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{v}"))
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("refused twenty times")
}

/// Capabilities of their own for each `i`.
fn variant(i: u32) -> Value {
    json!({"experimental": {format!("com.example/v{i}"): {}}})
}

#[test]
fn two_principals_never_share_a_child() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, issuer) = gateway(dir.path(), &[], None);
    let (alice, bob) = (issuer.token("alice", ""), issuer.token("bob", ""));
    rt().block_on(async {
        let a = pid(&gw.url, &alice, json!({})).await;
        let b = pid(&gw.url, &bob, json!({})).await;
        assert_ne!(a, b, "alice and bob were served by one process");
        assert_eq!(pid(&gw.url, &alice, json!({})).await, a);
        assert_eq!(pid(&gw.url, &bob, json!({})).await, b);
    });
}

#[test]
fn a_principal_that_varies_its_capabilities_churns_only_its_own_children() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, issuer) = gateway(dir.path(), &[], None);
    let (alice, bob) = (issuer.token("alice", ""), issuer.token("bob", ""));
    rt().block_on(async {
        let b = pid(&gw.url, &bob, json!({})).await;
        // More distinct capabilities than the pool has places.
        for i in 0..10 {
            pid(&gw.url, &alice, variant(i)).await;
        }
        assert_eq!(
            pid(&gw.url, &bob, json!({})).await,
            b,
            "bob's warm child was evicted by alice's churn"
        );
    });
}

#[test]
fn child_starts_are_rate_limited_with_retry_after_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--pool-starts-per-sec",
        "0.25",
        "--pool-start-burst",
        "2",
        "--pool-children-per-principal",
        "8",
    ];
    let (gw, issuer) = gateway(dir.path(), &flags, None);
    let alice = issuer.token("alice", "");
    rt().block_on(async {
        for i in 0..2 {
            let (status, _, v) = call(&gw.url, &alice, "pid", json!({}), variant(i)).await;
            assert_eq!(status, 200, "{v}");
        }
        let (status, retry, v) = call(&gw.url, &alice, "pid", json!({}), variant(2)).await;
        assert_eq!(status, 429, "{v}");
        assert!(retry.is_some_and(|r| (1..=4).contains(&r)), "{retry:?}");
        assert_eq!(v["error"]["data"]["limit"], "pool-child-starts", "{v}");
        // A child already running is no start: served at once.
        let (status, _, _) = call(&gw.url, &alice, "pid", json!({}), variant(0)).await;
        assert_eq!(status, 200);
        let metrics = reqwest::get(format!("http://{}/metrics", gw.addr))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("mcp_resume_limit_refusals_total{limit=\"pool-child-starts\"} 1"),
            "{metrics}"
        );
    });
}

#[test]
fn a_child_runs_a_bounded_number_of_calls_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, issuer) = gateway(dir.path(), &["--pool-calls-per-child", "2"], None);
    let alice = issuer.token("alice", "");
    rt().block_on(async {
        pid(&gw.url, &alice, json!({})).await;
        let slow: Vec<_> = (0..2)
            .map(|_| {
                let (url, t) = (gw.url.clone(), alice.clone());
                tokio::spawn(async move {
                    call(&url, &t, "wait", json!({"seconds": 3}), json!({})).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (status, retry, v) = call(&gw.url, &alice, "pid", json!({}), json!({})).await;
        assert_eq!(status, 429, "{v}");
        assert_eq!(retry, Some(1));
        assert_eq!(v["error"]["data"]["limit"], "pool-child-calls", "{v}");
        for s in slow {
            assert_eq!(s.await.unwrap().0, 200);
        }
        // Room again once they answered.
        let (status, _, _) = call(&gw.url, &alice, "pid", json!({}), json!({})).await;
        assert_eq!(status, 200);
    });
}

/// A stdio server that answers `initialize`, then never reads its stdin again.
const DEAF: &str = r#"
import json, sys, time
req = json.loads(sys.stdin.readline())
print(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": {"protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}}, "serverInfo": {"name": "deaf", "version": "1"}}}), flush=True)
time.sleep(600)
"#;

#[test]
fn a_child_that_stops_reading_its_input_refuses_requests_instead_of_queueing_them() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("deaf.py");
    std::fs::write(&script, DEAF).unwrap();
    let command = ["python3", script.to_str().unwrap()];
    let (gw, issuer) = gateway(dir.path(), &["--pool-stdin-queue", "2"], Some(&command));
    let alice = issuer.token("alice", "");
    rt().block_on(async {
        // Each request is larger than a pipe holds: the first fills the
        // pipe, the next two wait in the queue, the rest are refused.
        let big = "x".repeat(256 << 10);
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (url, t, big) = (gw.url.clone(), alice.clone(), big.clone());
                tokio::spawn(async move {
                    tokio::time::timeout(
                        Duration::from_secs(5),
                        call(&url, &t, "echo", json!({"text": big}), json!({})),
                    )
                    .await
                })
            })
            .collect();
        let mut refused = 0;
        let mut waiting = 0;
        for c in calls {
            match c.await.unwrap() {
                Ok((429, Some(1), v)) => {
                    assert_eq!(v["error"]["data"]["limit"], "pool-child-stdin", "{v}");
                    refused += 1;
                }
                Ok(other) => panic!("{other:?}"),
                Err(_) => waiting += 1,
            }
        }
        assert!(refused >= 4, "refused {refused}, waiting {waiting}");
        assert!(waiting <= 4, "refused {refused}, waiting {waiting}");
    });
}
