//! A secret in the upstream's URL never reaches a client or the log: with
//! `gateway --upstream 'http://user:pw@HOST:PORT/secret-path/mcp?api_key=…'`
//! and nothing listening there, both eras' errors name the upstream by
//! scheme, host and port only, and so do the gateway's log lines at info.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

const SECRET: &str = "SeCrEt-7f3a";

#[test]
fn an_unreachable_upstream_is_named_by_its_origin_only() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let upstream =
        format!("http://user:{SECRET}pw@127.0.0.1:{port}/{SECRET}-path/mcp?api_key={SECRET}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--upstream", &upstream])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(String::new()));
    let stderr = child.stderr.take().unwrap();
    let lines = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("gateway: {line}");
            lines.lock().unwrap().push_str(&line);
        }
    });
    let url = mcp_resume_testkit::listening_url(&mut child).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let origin = format!("http://127.0.0.1:{port}");
    let post = |body: Value, stateless: bool| {
        let mut rb = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if stateless {
            rb = rb
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/list");
        }
        rt.block_on(async move {
            let r = rb.body(body.to_string()).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        })
    };
    // The session era: initialize reaches for the upstream.
    let (_, text) = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        false,
    );
    assert!(text.contains("upstream-unreachable"), "{text}");
    assert!(text.contains(&origin), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    // The stateless era: relayed, refused as unreachable.
    let (status, text) = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}}}),
        true,
    );
    assert_eq!(status, 502, "{text}");
    assert!(text.contains("upstream-unreachable"), "{text}");
    assert!(text.contains(&origin), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let _ = child.wait();
    std::thread::sleep(Duration::from_millis(200));
    let log = log.lock().unwrap().clone();
    assert!(log.contains(&origin), "the log names the upstream: {log}");
    assert!(!log.contains(SECRET), "a secret in the log: {log}");
}

#[test]
fn a_bad_upstream_url_is_refused_without_echoing_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["gateway", "--listen", "127.0.0.1:0", "--store", "memory"])
        .args(["--upstream", &format!("ftp://h:21/x?api_key={SECRET}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("ftp://h:21"), "{all}");
    assert!(!all.contains(SECRET), "{all}");
}
