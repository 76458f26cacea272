//! The official TypeScript SDK 1.x's own `WebSocketClientTransport`
//! (subprotocol `mcp`, one JSON-RPC message per text frame) at the MCP
//! endpoint of `serve`, of a hosted rmcp handler and of a gateway in front
//! of server-everything: initialize, tools, notifications, progress, an
//! elicitation answered over the socket, and a close that ends the session.

mod common;

use common::gateway::everything;
use common::{root, Serve};
use mcp_resume_testkit::SdkClient;

/// Runs interop/node/websocket.mjs against `url` in `mode`; every line.
fn tour(url: &str, mode: &str) -> SdkClient {
    let script = root().join("interop/node/websocket.mjs");
    SdkClient::spawn(
        "node",
        &[
            "--experimental-websocket".into(),
            script.display().to_string(),
            url.to_owned(),
            mode.to_owned(),
        ],
    )
}

fn line(c: &mut SdkClient, what: &str) -> String {
    c.wait_for(what, |l| l.starts_with(what))
}

/// The progress the SDK saw: every step but, at worst, the last. The
/// server sends them in order before the answer; the SDK 1.x client runs a
/// notification's handler in a microtask but handles a response at once, so
/// a step that arrives in the same read as the answer is reported as "for
/// an unknown token" (its own quirk, with any transport that reads fast).
fn progressed(c: &mut SdkClient) {
    let l = line(c, "PROGRESS");
    assert!(l == "PROGRESS 3" || l == "PROGRESS 2", "{l}");
}

#[test]
fn the_sdk_websocket_client_talks_to_serve() {
    let dir = tempfile::tempdir().unwrap();
    let s = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let mut c = tour(&s.url, "serve");
    assert!(line(&mut c, "TOOLS").contains("emit"));
    assert_eq!(line(&mut c, "ECHO"), "ECHO hello");
    assert_eq!(line(&mut c, "NOTIFIED"), "NOTIFIED 3");
    progressed(&mut c);
    assert_eq!(line(&mut c, "DONE"), "DONE true");
    // The socket was the session: closed, it ended.
    let metrics = format!("http://{}/metrics", s.addr);
    let mut live = String::new();
    for _ in 0..50 {
        let text = common::rt()
            .block_on(async { reqwest::get(&metrics).await.unwrap().text().await.unwrap() });
        live = text
            .lines()
            .find(|l| l.starts_with("mcp_resume_sessions_live "))
            .unwrap_or_default()
            .to_owned();
        if live == "mcp_resume_sessions_live 0" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(live, "mcp_resume_sessions_live 0");
}

#[test]
fn the_sdk_websocket_client_talks_to_a_hosted_rmcp_handler() {
    let bin = common::rmcp_durable();
    let mut server = std::process::Command::new(bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--transport",
            "mcp-resume",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = mcp_resume_testkit::listening_url(&mut server).unwrap();
    let mut c = tour(&url, "hosted");
    assert!(line(&mut c, "TOOLS").contains("confirm"));
    assert_eq!(line(&mut c, "ECHO"), "ECHO hello");
    assert_eq!(line(&mut c, "NOTIFIED"), "NOTIFIED 3");
    progressed(&mut c);
    assert_eq!(line(&mut c, "ELICITED"), "ELICITED ws-user");
    assert_eq!(line(&mut c, "DONE"), "DONE true");
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn the_sdk_websocket_client_talks_to_a_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let bin = everything();
    let gw = Serve::gateway(
        dir.path(),
        "127.0.0.1:0",
        &[],
        &[bin.to_str().unwrap(), "stdio"],
    );
    let mut c = tour(&gw.url, "everything");
    assert!(line(&mut c, "TOOLS").contains("trigger-elicitation-request"));
    assert_eq!(line(&mut c, "ECHO"), "ECHO Echo: hello");
    progressed(&mut c);
    assert_eq!(line(&mut c, "ELICITED"), "ELICITED true");
    assert_eq!(line(&mut c, "DONE"), "DONE true");
}
