//! One URL, both eras, the official SDK clients: ONE `conformance` example
//! instance is driven at the same time by
//!
//! - the TypeScript SDK 2.x client (`@modelcontextprotocol/client`,
//!   `interop/node/client2026.mjs`) pinned to 2026-07-28, probing
//!   (`auto`), and on its default legacy handshake;
//! - the Python SDK's `mcp.Client` (`interop/python/client2026.py`) with
//!   `mode="2026-07-28"`, `"auto"` and `"legacy"`;
//! - the 2025-11-25 clients: the TypeScript SDK 1.x (`interop/node/ask.mjs`)
//!   and the Python SDK's `ClientSession` + `initialize` (`interop/python/ask.py`).
//!
//! The 2026 clients must negotiate 2026-07-28 (`ERA modern`), list the tools,
//! call one, get an `input_required` tool's answer after the SDK fulfilled it
//! from its own elicitation handler (MRTR), and receive a
//! `notifications/tools/list_changed` on a `subscriptions/listen` stream after
//! calling the fixture's trigger (LISTEN, CHANGED). The legacy ones answer the
//! server's `elicitation/create` (and the 1.x ones `sampling/createMessage`)
//! on their sessions. Every line is checked, so a server that lost the 2026
//! path (discover, stateless requests, MRTR) fails here.
//!
//! The TypeScript client's `McpSubscription.close()` also POSTs
//! `notifications/cancelled` without `Mcp-Method`; 2026-07-28 sets no header
//! rules for notifications, so the server accepts it (202) and drops it (the
//! stream's close is the cancellation).
//!
//! The clients come from `scripts/test` (`npm ci` in interop/node, the venv in
//! interop/python); a missing one fails the test, it is never skipped.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

mod common;
use common::mcp_http::{init, rpc};
use common::proc::{Instance, SdkClient};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn path(p: PathBuf) -> String {
    p.to_str().expect("a UTF-8 path").to_owned()
}

/// The Node script `name` in interop/node, after checking the packages it needs.
fn node_script(name: &str) -> String {
    let node = root().join("interop/node");
    for package in ["@modelcontextprotocol/sdk", "@modelcontextprotocol/client"] {
        assert!(
            node.join("node_modules").join(package).exists(),
            "the TypeScript SDK {package} is not installed: run scripts/test (cd interop/node && npm ci)"
        );
    }
    path(node.join(name))
}

/// The venv's Python, after checking it has the SDK's 2026 client.
fn python() -> String {
    let python = root().join("interop/python/.venv/bin/python");
    let missing =
        "the Python SDK is not installed: run scripts/test (interop/python/.venv, requirements.txt)";
    assert!(python.exists(), "{missing}");
    let ok = Command::new(&python)
        .args([
            "-c",
            "from mcp import Client; Client('http://x', mode='2026-07-28')",
        ])
        .status()
        .unwrap_or_else(|e| panic!("{missing}: {e}"));
    assert!(
        ok.success(),
        "{missing}: `mcp.Client(mode=\"2026-07-28\")` is unavailable"
    );
    path(python)
}

/// The lines `client2026.{mjs,py}` prints, exactly, for `who`'s elicitation
/// answer on `era` with `tools` tools listed.
fn expected_2026(era: &str, tools: usize, who: &str) -> Vec<String> {
    let (version, asked) = match era {
        "modern" => (
            "2026-07-28",
            vec![
                format!("MRTR Hello, {who}!"),
                "LISTEN ack".to_owned(),
                "CHANGED tools".to_owned(),
            ],
        ),
        _ => (
            "2025-11-25",
            vec![format!(
                r#"ELICITED Elicitation completed: action=accept, content={{"name":"{who}"}}"#
            )],
        ),
    };
    let mut lines = vec![
        format!("ERA {era} {version}"),
        format!("TOOLS {tools}"),
        "TEXT This is a simple text response for testing.".to_owned(),
    ];
    lines.extend(asked);
    lines.push("DONE".to_owned());
    lines
}

/// Waits for `DONE` and returns every line the client printed.
fn finish(mut client: SdkClient, what: &str) -> Vec<String> {
    client.wait_for(&format!("{what}: DONE"), |l| l == "DONE");
    std::mem::take(&mut client.seen)
}

#[test]
fn the_2026_and_the_2025_sdk_clients_share_one_url() {
    let node = node_script("client2026.mjs");
    let node_ask = node_script("ask.mjs");
    let python = python();
    let py = path(root().join("interop/python/client2026.py"));
    let py_ask = path(root().join("interop/python/ask.py"));

    let server = Instance::spawn_example("conformance", "memory");
    let url = server.url.clone();

    // What the clients must list: tools/list on a plain 2025 session.
    let tools = common::rt().block_on(async {
        let http = reqwest::Client::new();
        let sid = init(&http, &url).await;
        let listed: Value = rpc(
            &http,
            &url,
            &sid,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await;
        assert!(listed["result"]["nextCursor"].is_null(), "{listed}");
        listed["result"]["tools"]
            .as_array()
            .map(Vec::len)
            .unwrap_or_else(|| panic!("no tools: {listed}"))
    });

    // All at once, against the one URL.
    let modern = [
        ("node", "pin"),
        ("node", "auto"),
        ("python", "pin"),
        ("python", "auto"),
    ];
    let legacy = [("node", "legacy"), ("python", "legacy")];
    let spawn = |sdk: &str, mode: &str| match sdk {
        "node" => SdkClient::spawn("node", &[node.clone(), url.clone(), mode.to_owned()]),
        _ => SdkClient::spawn(&python, &[py.clone(), url.clone(), mode.to_owned()]),
    };
    let clients_2026: Vec<_> = modern
        .iter()
        .chain(&legacy)
        .map(|&(sdk, mode)| (sdk, mode, spawn(sdk, mode)))
        .collect();
    let mut node_1x = SdkClient::spawn("node", &[node_ask, url.clone()]);
    let mut python_2025 = SdkClient::spawn(&python, &[py_ask, url.clone()]);

    for (sdk, mode, client) in clients_2026 {
        let era = if mode == "legacy" { "legacy" } else { "modern" };
        let seen = finish(client, &format!("{sdk} client2026 {mode}"));
        assert_eq!(
            seen,
            expected_2026(era, tools, &format!("{sdk}-2026")),
            "{sdk} client2026 {mode}"
        );
    }

    for (who, client) in [("node", &mut node_1x), ("python", &mut python_2025)] {
        let sampled = client.wait_for(&format!("{who} ask SAMPLED"), |l| l.starts_with("SAMPLED"));
        assert_eq!(
            sampled,
            format!("SAMPLED LLM response: {who}-sampler-says-42"),
            "{who} ask"
        );
        let elicited = client.wait_for(&format!("{who} ask ELICITED"), |l| {
            l.starts_with("ELICITED")
        });
        assert!(
            elicited.starts_with("ELICITED Elicitation completed: action=accept, content=")
                && elicited.contains(&format!(r#""username":"{who}-user""#)),
            "{who} ask: {elicited}"
        );
    }
}
