//! Both MCP eras through one gateway URL (docs/protocol.md 3.6): the
//! official SDK clients, in their 2026-07-28 (stateless) and 2025 (session)
//! modes at once, use server-everything (a stdio server of the session era
//! only) behind `gateway -- CMD`; and `gateway --upstream URL` relays the
//! stateless era to an upstream that speaks it (the `conformance` example):
//! requests with their SEP-2243 headers as sent, the upstream's own
//! refusals, a resumable listen stream fed by the upstream's listen.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::gateway::{gateway_everything, python_server};
use common::{root, rt, Serve};
use mcp_resume_client::{McpClient, ReaderOptions};
use mcp_resume_testkit::SdkClient;
use serde_json::{json, Value};

/// An SDK client's tour of server-everything (interop/node/gateway2026.mjs or
/// interop/python/gateway2026.py) in `mode`, started now, checked by [`check`].
fn tour(program: &str, script: &str, url: &str, mode: &str) -> (SdkClient, String) {
    let script = root().join(script).display().to_string();
    let client = SdkClient::spawn(program, &[script, url.to_owned(), mode.to_owned()]);
    (client, mode.to_owned())
}

fn check((mut client, mode): (SdkClient, String)) {
    let era = client.wait_for("ERA", |l| l.starts_with("ERA"));
    let want = if mode == "legacy" {
        "ERA legacy 2025-11-25"
    } else {
        "ERA modern 2026-07-28"
    };
    assert_eq!(era, want, "{mode}");
    let tools = client.wait_for("TOOLS", |l| l.starts_with("TOOLS"));
    assert!(
        tools.contains("echo") && tools.contains("trigger-long-running-operation"),
        "{mode}: {tools}"
    );
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO")),
        format!("ECHO Echo: hello {mode}")
    );
    assert!(
        client
            .wait_for("RESOURCE", |l| l.starts_with("RESOURCE"))
            .contains("demo://"),
        "{mode}"
    );
    assert_eq!(
        client.wait_for("PROMPT", |l| l.starts_with("PROMPT")),
        "PROMPT 1 true",
        "{mode}"
    );
    assert_eq!(
        client.wait_for("PROGRESS", |l| l.starts_with("PROGRESS")),
        "PROGRESS 3",
        "{mode}"
    );
    client.wait_for("DONE", |l| l == "DONE");
}

#[test]
fn sdk_clients_of_both_eras_use_a_session_era_stdio_server_behind_one_gateway_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway_everything(dir.path());
    let python = python_server()[0].clone();
    let clients = [
        tour("node", "interop/node/gateway2026.mjs", &gw.url, "modern"),
        tour("node", "interop/node/gateway2026.mjs", &gw.url, "legacy"),
        tour(&python, "interop/python/gateway2026.py", &gw.url, "modern"),
        tour(&python, "interop/python/gateway2026.py", &gw.url, "legacy"),
        tour("node", "interop/node/gateway2026.mjs", &gw.url, "auto"),
    ];
    for c in clients {
        check(c);
    }
}

/// The `conformance` example on a free port, with a memory log.
struct Upstream(std::process::Child, String);

impl Upstream {
    fn start() -> Self {
        let mut child = Command::new(common::example("conformance"))
            .args(["--listen", "127.0.0.1:0", "--store", "memory"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let url = mcp_resume_testkit::listening_url(&mut child).unwrap();
        Self(child, url)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stateless request with its headers (`name` as `Mcp-Name`, exactly as
/// given): the HTTP status and the answer (JSON, or the response in an SSE body).
async fn stateless(
    url: &str,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    caps: Value,
) -> (u16, Value) {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "gateway-eras", "version": "1"}});
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        rb = rb.header("mcp-name", n);
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let resp = rb.body(body.to_string()).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v["id"] == 7)
            .unwrap_or_else(|| panic!("no answer in {text}"))
    });
    (status, v)
}

#[test]
fn gateway_upstream_relays_the_stateless_era_and_its_listen_stream_resumes() {
    let up = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(dir.path(), "127.0.0.1:0", &[], &up.1);
    rt().block_on(async {
        // discover: the upstream's answer, with the gateway's own extension.
        let (status, d) = stateless(&gw.url, "server/discover", None, json!({}), json!({})).await;
        assert_eq!(status, 200, "{d}");
        let versions = d["result"]["supportedVersions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")),
            "{d}"
        );
        assert!(
            d["result"]["capabilities"]["extensions"]["dev.mcp-resume/resumable-listen"]
                .is_object(),
            "{d}"
        );
        // Mcp-Name with optional whitespace around it is the name (RFC 9110 5.5).
        let call = json!({"name": "test_simple_text", "arguments": {}});
        let (status, v) = stateless(
            &gw.url,
            "tools/call",
            Some("  test_simple_text \t"),
            call.clone(),
            json!({}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert!(v["result"]["content"][0]["text"].is_string(), "{v}");
        // The upstream's own refusal of a mismatched header comes back as it is.
        let (status, v) = stateless(
            &gw.url,
            "tools/call",
            Some("wrong_tool_name"),
            call,
            json!({}),
        )
        .await;
        assert_eq!(
            (status, v["error"]["code"].as_i64()),
            (400, Some(-32020)),
            "{v}"
        );
        // A session-era client on the same URL at the same time.
        let mut session = McpClient::new(&gw.url);
        session.initialize().await.unwrap();
        let r = session
            .call_tool("test_simple_text", json!({}))
            .await
            .unwrap();
        assert!(r["content"][0]["text"].is_string(), "{r}");
        // A resumable listen stream, fed by the upstream's listen.
        let listen = McpClient::new(&gw.url)
            .listen(json!({"toolsListChanged": true}))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let trigger = json!({"name": "test_trigger_tool_change", "arguments": {}});
        let (_, v) = stateless(
            &gw.url,
            "tools/call",
            Some("test_trigger_tool_change"),
            trigger,
            json!({}),
        )
        .await;
        assert!(v.get("result").is_some(), "{v}");
        let mut opts = ReaderOptions::default();
        opts.from = Some(0);
        let mut reader = listen.reader(opts).unwrap();
        let mut got = Vec::new();
        while got.len() < 2 {
            let ev = tokio::time::timeout(Duration::from_secs(10), reader.next())
                .await
                .expect("the listen stream went silent")
                .expect("no error");
            got.push((
                ev.seq.unwrap(),
                ev.message["method"].as_str().unwrap_or_default().to_owned(),
            ));
        }
        assert_eq!(
            got,
            [
                (1, "notifications/subscriptions/acknowledged".to_owned()),
                (2, "notifications/tools/list_changed".to_owned())
            ]
        );
        // Read again from cursor 1: only what came after it.
        drop(reader);
        let mut opts = ReaderOptions::default();
        opts.from = Some(1);
        let mut again = listen.reader(opts).unwrap();
        let ev = tokio::time::timeout(Duration::from_secs(10), again.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ev.seq, Some(2));
    });
}

#[test]
fn an_upstream_that_cannot_be_reached_answers_a_stateless_call_loudly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(
        dir.path(),
        "127.0.0.1:0",
        &[],
        &format!("http://127.0.0.1:{port}/mcp"),
    );
    rt().block_on(async {
        let call = json!({"name": "echo", "arguments": {}});
        let (status, v) = stateless(&gw.url, "tools/call", Some("echo"), call, json!({})).await;
        assert_eq!(status, 502, "{v}");
        assert_eq!(v["id"], 7, "{v}");
        assert_eq!(v["error"]["data"]["reason"], "upstream-unreachable", "{v}");
    });
}

/// A stateless `tools/call` of `tool` with `args` through a gateway in
/// front of the Python SDK stdio server, declaring `caps`.
async fn call_stateless(url: &str, tool: &str, args: Value, caps: Value) -> Value {
    let params = json!({"name": tool, "arguments": args});
    tokio::time::timeout(
        Duration::from_secs(20),
        stateless(url, "tools/call", Some(tool), params, caps),
    )
    .await
    .unwrap_or_else(|_| panic!("the stateless call of {tool} hung"))
    .1
}

/// Whether `v` is a failed call: a JSON-RPC error or an `isError` result.
fn failed(v: &Value) -> bool {
    v.get("error").is_some() || v["result"]["isError"] == true
}

#[test]
fn the_stateless_pool_shares_a_child_per_capabilities_and_fails_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::gateway::gateway_python(dir.path(), &[]);
    rt().block_on(async {
        let pid = |v: Value| {
            v["result"]["structuredContent"]["result"]
                .as_u64()
                .unwrap_or_else(|| panic!("{v}"))
        };
        // The same capabilities: one child; others: another.
        let a = pid(call_stateless(&gw.url, "pid", json!({}), json!({})).await);
        let b = pid(call_stateless(&gw.url, "pid", json!({}), json!({})).await);
        let c = pid(call_stateless(&gw.url, "pid", json!({}), json!({"elicitation": {}})).await);
        assert_eq!(a, b);
        assert_ne!(a, c);
        // A child's request to the client cannot reach a stateless client:
        // refused at once, so the tool fails instead of waiting.
        let v = call_stateless(
            &gw.url,
            "confirm",
            json!({"token": "t1"}),
            json!({"elicitation": {}}),
        )
        .await;
        assert!(failed(&v), "{v}");
        // A child that exits fails every call in flight on it, loudly; the
        // next request gets a new child.
        let waiting = tokio::spawn({
            let url = gw.url.clone();
            async move { call_stateless(&url, "wait", json!({"seconds": 10}), json!({})).await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let crashed = call_stateless(&gw.url, "crash", json!({}), json!({})).await;
        assert_eq!(
            crashed["error"]["data"]["reason"], "child-exited",
            "{crashed}"
        );
        let waited = waiting.await.unwrap();
        assert_eq!(
            waited["error"]["data"]["reason"], "child-exited",
            "{waited}"
        );
        let d = pid(call_stateless(&gw.url, "pid", json!({}), json!({})).await);
        assert_ne!(d, a, "a new child after the crash");
    });
}

#[test]
fn an_idle_stateless_child_gives_way_to_a_session_at_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let gw = common::gateway::gateway_python(dir.path(), &["--max-children", "1"]);
    rt().block_on(async {
        let v = call_stateless(&gw.url, "add", json!({"a": 2, "b": 3}), json!({})).await;
        assert!(!failed(&v), "{v}");
        // The one place is the pool's idle child's: a session takes it.
        let sid = common::gateway::init(&gw.url).await;
        let got = common::gateway::call(&gw.url, &sid, 1, "add", json!({"a": 1, "b": 1})).await;
        assert!(got.last().unwrap().get("result").is_some(), "{got:?}");
        // Now the session holds it: a stateless request is told to retry.
        let (status, v) = stateless(
            &gw.url,
            "tools/call",
            Some("add"),
            json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
            json!({"sampling": {}}),
        )
        .await;
        assert_eq!(
            (status, v["error"]["data"]["reason"].as_str()),
            (429, Some("busy")),
            "{v}"
        );
    });
}

/// A fake upstream on 127.0.0.1 that answers every request with `reply`
/// (raw HTTP/1.1, then closes the connection), for as long as the test runs.
fn raw_upstream(reply: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            // Read the request's head and body (small), then answer and close.
            let mut buf = [0u8; 65536];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    url
}

#[test]
fn an_upstream_sse_answer_that_ends_before_the_response_ends_with_an_error_event() {
    // The upstream sends half an event, then closes.
    let up = raw_upstream(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifi",
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(dir.path(), "127.0.0.1:0", &[], &up);
    rt().block_on(async {
        let call = json!({"name": "echo", "arguments": {}});
        let (status, v) = stateless(&gw.url, "tools/call", Some("echo"), call, json!({})).await;
        assert_eq!(status, 200);
        assert_eq!(v["id"], 7, "{v}");
        assert_eq!(v["error"]["data"]["reason"], "upstream-lost", "{v}");
    });
}

#[test]
fn an_upstream_that_refuses_the_gateway_s_credentials_is_a_502_not_the_client_s_401() {
    let up = raw_upstream(
        "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer resource_metadata=\"http://x/.well-known/oauth-protected-resource\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(dir.path(), "127.0.0.1:0", &[], &up);
    rt().block_on(async {
        let call = json!({"name": "echo", "arguments": {}});
        let (status, v) = stateless(&gw.url, "tools/call", Some("echo"), call, json!({})).await;
        assert_eq!(status, 502, "{v}");
        assert_eq!(v["error"]["data"]["reason"], "upstream-refused", "{v}");
    });
}
