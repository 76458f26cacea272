//! The official TypeScript and Python MCP SDK clients against `mcp-resume serve`
//! on the disk log: initialise, list tools, call `echo`, receive `emit`'s
//! notifications on the GET stream, and after `kill -9` and a restart on the
//! same data directory, resume with `Last-Event-ID` and receive every
//! remaining event, none twice.
//!
//! The SDKs are installed by `scripts/test` (pinned in `interop/`).

mod common;

use std::time::Duration;

use common::{root, Serve};
use mcp_resume_testkit::SdkClient;

/// How many of `emit count`'s events the session stream holds, read back over SSE.
fn committed(url: &str, session: &str, count: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let resp = reqwest::Client::new()
            .get(url)
            .header("mcp-session-id", session)
            .header("accept", "text/event-stream")
            .header("last-event-id", "0")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut resp = resp;
        let mut text = String::new();
        while let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await
        {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter(|v| v["params"]["data"]["count"].as_u64() == Some(count))
            .count() as u64
    })
}

fn scenario(program: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let mut client = SdkClient::spawn(program, &[script.to_owned(), serve.url.clone()]);
    let session = client
        .wait_for("SESSION", |l| l.starts_with("SESSION "))
        .trim_start_matches("SESSION ")
        .to_owned();
    let tools = client.wait_for("TOOLS", |l| l.starts_with("TOOLS "));
    for t in [
        "echo",
        "emit",
        "register_tool",
        "unregister_tool",
        "progress",
    ] {
        assert!(tools.contains(t), "{tools}");
    }
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO ")),
        "ECHO hello"
    );
    // Notifications on the GET stream, then a kill -9 in the middle of them.
    client.send("emit 60 20");
    client.wait_for("EMITTED", |l| l == "EMITTED");
    client.wait_for("some events", |l| l == "EVENT 60 10");
    std::thread::sleep(Duration::from_millis(30));
    serve.kill9();
    serve.restart();
    // After the restart the client resumes on its own; new events reach it too.
    client.send("emit 5 0");
    client.wait_for("EMITTED after restart", |l| l == "EMITTED");
    client.wait_for("the post-restart events", |l| l == "EVENT 5 5");
    let m = committed(&serve.url, &session, 60);
    assert!(m >= 10, "at least what the client saw was committed");
    // Wait for the resumed replay to deliver all of the first emit.
    let last = format!("EVENT 60 {m}");
    if !client.seen.contains(&last) {
        client.wait_for("the rest of the first emit", |l| l == last);
    }
    client.drain_for(Duration::from_millis(300));
    assert_eq!(
        client.events(60),
        (1..=m).collect::<Vec<_>>(),
        "every committed event once, in order"
    );
    assert_eq!(client.events(5), (1..=5).collect::<Vec<_>>());
    client.send("quit");
    let status = serve.term();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
}

#[test]
fn typescript_sdk_client() {
    let root = root();
    scenario(
        "node",
        root.join("interop/node/client.mjs").to_str().unwrap(),
    );
}

#[test]
fn python_sdk_client() {
    let root = root();
    let python = root.join("interop/python/.venv/bin/python");
    scenario(
        python.to_str().unwrap(),
        root.join("interop/python/client.py").to_str().unwrap(),
    );
}
