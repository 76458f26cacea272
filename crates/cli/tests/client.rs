//! The client library and `mcp-resume tail` against a running `serve` on the
//! disk log: killed, restarted, refusing upgrades, in legacy mode. In each case
//! the output is contiguous from the starting cursor to the head, with no
//! duplicate; where continuity cannot be proven, the error is loud and typed.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{read_until, rt, Serve};
use mcp_resume_client::{ClientError, McpClient, ReaderOptions, Transport};
use mcp_resume_proto::CursorDiscontinuity;
use serde_json::json;

async fn head(url: &str, session: &str) -> u64 {
    // The server's own view of the head: a 409 `ahead` names it.
    let r = reqwest::Client::new()
        .get(url)
        .header("mcp-session-id", session)
        .header("accept", "text/event-stream")
        .header("last-event-id", u64::MAX.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    r.json::<serde_json::Value>().await.unwrap()["head"]
        .as_u64()
        .unwrap()
}

/// The scenario for one transport and one fault.
fn survive(transport: Transport, fault: &str, extra: &[&str]) -> (Vec<u64>, u32) {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(dir.path(), "127.0.0.1:0", extra);
    rt().block_on(async {
        let mut client = McpClient::new(&serve.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        client
            .call_tool("emit", json!({"count": 30}))
            .await
            .unwrap();
        while head(&serve.url, &sid).await < 30 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut opts = ReaderOptions::default();
        opts.transport = transport;
        opts.from = Some(5);
        opts.max_retries = Some(40);
        let mut reader = client.reader(opts).unwrap();
        let mut seqs = read_until(&mut reader, 30).await;
        client
            .call_tool("emit", json!({"count": 200, "interval_ms": 2}))
            .await
            .unwrap();
        seqs.extend(read_until(&mut reader, 60).await);
        match fault {
            "kill" => serve.kill9(),
            "term" => assert!(serve.term().success()),
            _ => {}
        }
        if fault != "none" {
            serve.restart();
        }
        // After a restart the first emit is over; emit more on the new process.
        let h = head(&serve.url, &sid).await;
        client
            .call_tool("emit", json!({"count": 50}))
            .await
            .unwrap();
        seqs.extend(read_until(&mut reader, h + 50).await);
        assert_eq!(
            seqs,
            (6..=h + 50).collect::<Vec<_>>(),
            "contiguous from the cursor to the head, no duplicate"
        );
        (seqs, reader.fallbacks())
    })
}

#[test]
fn sse_survives_kill9_and_restart() {
    survive(Transport::Sse, "kill", &[]);
}

#[test]
fn websocket_survives_kill9_and_restart() {
    let (_, fallbacks) = survive(Transport::WebSocket, "kill", &[]);
    assert_eq!(fallbacks, 0, "our server echoes the cursor: no fallback");
}

#[test]
fn websocket_dropped_by_a_going_away_server_resumes() {
    survive(Transport::WebSocket, "term", &[]);
}

#[test]
fn an_upgrade_answered_426_falls_back_to_sse_losing_nothing() {
    let (_, fallbacks) = survive(Transport::WebSocket, "none", &["--no-websocket"]);
    assert_eq!(fallbacks, 1);
}

#[test]
fn a_legacy_101_without_the_echo_is_refused_and_sse_takes_over() {
    let (_, fallbacks) = survive(Transport::WebSocket, "none", &["--unsafe-legacy-upgrade"]);
    assert_eq!(fallbacks, 1);
}

#[test]
fn discontinuity_and_gone_sessions_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(dir.path(), "127.0.0.1:0", &["--retention-events", "10"]);
    rt().block_on(async {
        let mut client = McpClient::new(&serve.url);
        client.initialize().await.unwrap();
        client
            .call_tool("emit", json!({"count": 30}))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        for transport in [Transport::Sse, Transport::WebSocket] {
            let mut opts = ReaderOptions::default();
            opts.transport = transport;
            opts.from = Some(99);
            let mut r = client.reader(opts).unwrap();
            match r.next().await {
                Err(ClientError::Discontinuity(CursorDiscontinuity::Ahead {
                    prior: 99,
                    head: 30,
                    floor: 21,
                })) => {}
                other => panic!("{transport:?}: {other:?}"),
            }
            let mut opts = ReaderOptions::default();
            opts.transport = transport;
            opts.from = Some(3);
            let mut r = client.reader(opts).unwrap();
            match r.next().await {
                Err(ClientError::Discontinuity(CursorDiscontinuity::Truncated {
                    prior: 3,
                    ..
                })) => {}
                other => panic!("{transport:?}: {other:?}"),
            }
        }
        client.end().await.unwrap();
        let mut r = client.reader(ReaderOptions::default()).unwrap();
        assert!(matches!(r.next().await, Err(ClientError::SessionGone)));
    });
}

fn tail(url: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .arg("tail")
        .arg(url)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn tail_prints_json_lines_resumes_from_its_cursor_file_and_exits_with_distinct_codes() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["call", &serve.url, "emit", r#"{"count":20}"#])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let sid = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_millis(300));
    let cursor = dir.path().join("cursor");
    let c = cursor.to_str().unwrap();
    let out = tail(
        &serve.url,
        &["--session", &sid, "--cursor-file", c, "--max-events", "8"],
    );
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["seq"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        (1..=8).collect::<Vec<_>>()
    );
    assert_eq!(lines[0]["message"]["method"], "notifications/message");
    assert_eq!(std::fs::read_to_string(&cursor).unwrap().trim(), "8");
    // A restarted tail resumes after its cursor, over WebSocket this time.
    let out = tail(
        &serve.url,
        &[
            "--session",
            &sid,
            "--cursor-file",
            c,
            "--max-events",
            "12",
            "--ws",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let seqs = common::tail_seqs(&out.stdout);
    assert_eq!(seqs, (9..=20).collect::<Vec<_>>());
    // Distinct exit codes.
    assert_eq!(
        tail(&serve.url, &["--session", &sid, "--from", "500"])
            .status
            .code(),
        Some(3),
        "409"
    );
    assert_eq!(
        tail(&serve.url, &["--session", "nope"]).status.code(),
        Some(4),
        "404"
    );
    assert_eq!(
        tail(&serve.url, &["--from", "x"]).status.code(),
        Some(2),
        "usage"
    );
}

#[test]
fn call_prints_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["call", &serve.url, "echo", r#"{"text":"hi there"}"#])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"][0]["text"], "hi there");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["call", &serve.url, "echo", "not json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not JSON"));
}

#[test]
fn a_plain_streamable_http_server_works_with_opaque_ids_and_no_upgrade() {
    // The official TypeScript SDK server (benches/peers/node, installed by scripts/test).
    let root = common::root();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new("node")
        .arg(root.join("benches/peers/node/server.mjs"))
        .arg(port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("node and benches/peers/node (run scripts/test)");
    let url = mcp_resume_testkit::listening_url(&mut child).expect("the peer started");
    let result = std::panic::catch_unwind(|| {
        rt().block_on(async {
            let mut client = McpClient::new(&url);
            client.initialize().await.unwrap();
            let echoed = client
                .call_tool("echo", json!({"text": "plain"}))
                .await
                .unwrap();
            assert_eq!(echoed["content"][0]["text"], "plain");
            // Asked for WebSocket, it stays on SSE: the ids are not seqs.
            let mut opts = ReaderOptions::default();
            opts.transport = Transport::WebSocket;
            opts.max_retries = Some(5);
            let mut reader = client.reader(opts).unwrap();
            let emitter = client.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                emitter
                    .call_tool("emit", json!({"count": 5}))
                    .await
                    .unwrap();
            });
            let mut is = Vec::new();
            while is.len() < 5 {
                let ev = tokio::time::timeout(Duration::from_secs(10), reader.next())
                    .await
                    .expect("events")
                    .unwrap();
                assert_eq!(ev.seq, None, "opaque ids are not read as seqs");
                assert!(!ev.id.is_empty());
                is.push(ev.message["params"]["data"]["i"].as_u64().unwrap());
            }
            assert_eq!(is, vec![1, 2, 3, 4, 5]);
            assert!(!reader.on_websocket());
        })
    });
    let _ = child.kill();
    let _ = child.wait();
    result.unwrap();
}
