//! Two `serve` instances on one Redis: a session initialised on A is
//! readable, resumable and upgradable on B; POSTs go to either; `kill -9` of
//! the instance a reader is on loses nothing: it resumes on the other.

mod common;

use std::time::Duration;

use common::{read_until, rt, RedisServer, Serve};
use futures_util::{SinkExt, StreamExt};
use mcp_resume_client::{McpClient, ReaderOptions, Transport};
use mcp_resume_testkit::count_sent;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

#[test]
fn a_session_lives_on_every_instance_and_survives_the_loss_of_one() {
    lives_on_every_instance(&[]);
}

/// The same with sessions in the seq-id layout (`--redis-seq-ids`: entry
/// ids `0-SEQ`, numbered by Redis).
#[test]
fn a_seq_id_session_lives_on_every_instance_and_survives_the_loss_of_one() {
    lives_on_every_instance(&["--redis-seq-ids"]);
}

/// `--redis-seq-ids` where the commit comes after the append script
/// (replicas, a cluster) is refused at start-up, naming why.
#[test]
fn seq_ids_with_replicas_are_refused_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for store in [
        &["--store", "redis://127.0.0.1:1/0", "--redis-replicas", "1"][..],
        &["--store", "redis-cluster://127.0.0.1:1"][..],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .args(store)
            .arg("--redis-seq-ids")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{store:?}: {stderr}");
        assert!(
            stderr.contains("--redis-seq-ids needs one Redis server without --redis-replicas"),
            "{store:?}: {stderr}"
        );
    }
}

fn lives_on_every_instance(extra: &[&str]) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut store = vec!["--store", redis.url.as_str()];
    store.extend_from_slice(extra);
    let mut a = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    let b = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    rt().block_on(async {
        // Initialised on A, emitting on A ...
        let mut on_a = McpClient::new(&a.url);
        on_a.initialize().await.unwrap();
        let sid = on_a.session_id().unwrap().to_owned();
        let layout = redis.cli(&["HGET", &format!("mcpr:{{{sid}}}:s"), "v"]);
        let seq_ids = extra.contains(&"--redis-seq-ids");
        assert_eq!(
            layout.trim(),
            if seq_ids { "2" } else { "" },
            "the session's layout"
        );
        on_a.call_tool("emit", json!({"count": 20})).await.unwrap();
        // ... read, resumed and upgraded on B; POSTs to B work too.
        let on_b = McpClient::new(&b.url).with_session(&sid);
        assert_eq!(
            on_b.call_tool("echo", json!({"text": "b"})).await.unwrap()["content"][0]["text"],
            "b"
        );
        let mut opts = ReaderOptions::default();
        opts.from = Some(0);
        let mut sse_b = on_b.reader(opts).unwrap();
        assert_eq!(
            read_until(&mut sse_b, 20).await,
            (1..=20).collect::<Vec<_>>()
        );
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(12);
        opts.max_retries = Some(40);
        let mut ws_b = on_b.reader(opts).unwrap();
        // The seed's race across instances: a sibling SSE reader on A, emit
        // on A, while B upgrades; each sees every event once, in order.
        let mut opts = ReaderOptions::default();
        opts.from = Some(20);
        let mut sibling = on_a.reader(opts).unwrap();
        let sibling = tokio::spawn(async move { read_until(&mut sibling, 120).await });
        on_a.call_tool("emit", json!({"count": 100, "interval_ms": 2}))
            .await
            .unwrap();
        let got = read_until(&mut ws_b, 120).await;
        assert_eq!(got, (13..=120).collect::<Vec<_>>());
        assert_eq!(ws_b.fallbacks(), 0, "B echoes the cursor");
        assert_eq!(sibling.await.unwrap(), (21..=120).collect::<Vec<_>>());
        // A reader on A; A is killed mid-stream; it resumes on B from its cursor.
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(120);
        let mut on_a_reader = on_a.reader(opts).unwrap();
        on_b.call_tool("emit", json!({"count": 200, "interval_ms": 1}))
            .await
            .unwrap();
        let mut seen = read_until(&mut on_a_reader, 150).await;
        a.kill9();
        let cursor = on_a_reader.cursor().unwrap();
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(cursor);
        let mut moved = on_b.reader(opts).unwrap();
        seen.extend(read_until(&mut moved, 320).await);
        assert_eq!(
            seen,
            (121..=320).collect::<Vec<_>>(),
            "nothing lost, nothing twice, across the failover"
        );
    });
    drop(b);
}

/// Opening a session on Redis (`initialize`, then its
/// `notifications/initialized`, then its GET stream) runs the create script
/// and reads nothing back of what the instance just wrote: no touch script
/// (a session just created counts as touched) and no read of its record
/// (the route keeps what `initialize` was checked against, and that the
/// session is no listen stream, whose death a GET would otherwise check).
/// Each was a round trip per session opened (benches/results/redis-path.md,
/// "Opening a session").
#[test]
fn opening_a_session_reads_nothing_back() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str()];
    let a = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    rt().block_on(async {
        // The first session starts what later ones share (the reader of
        // end notices that lets a touch be answered from memory).
        McpClient::new(&a.url).initialize().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = redis.commands_by_name();
        McpClient::new(&a.url).initialize().await.unwrap();
        let after = redis.commands_by_name();
        let n = |c: &str| after.get(c).copied().unwrap_or(0) - before.get(c).copied().unwrap_or(0);
        assert_eq!(n("evalsha"), 1, "scripts beyond the create's: {after:?}");
        assert_eq!(n("hmget") + n("hget"), 0, "a read of the record: {after:?}");
        // The GET stream: its bounds and its registration, one script.
        let mut client = McpClient::new(&a.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        let monitor = redis.monitor();
        let sse = reqwest::Client::new()
            .get(&a.url)
            .header("mcp-session-id", &sid)
            .header(
                "mcp-protocol-version",
                mcp_resume_proto::SUPPORTED_PROTOCOL_VERSIONS[0],
            )
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(sse.status(), 200);
        // Whatever the stream's joining would read has been sent by now.
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Round trips, as Redis receives them (a script's own commands
        // left out): the bounds script, which registers the instance as
        // the stream's follower; no registration of its own, no read of
        // the record or the stream.
        let sent = monitor.stop();
        assert_eq!(count_sent(&sent, "evalsha", ""), 1, "{sent:?}");
        for read in ["sadd", "hmget", "hget", "xrange"] {
            assert_eq!(count_sent(&sent, read, "mcpr:{"), 0, "{read}: {sent:?}");
        }
    });
}

/// A session's first call on an instance that did not create it (behind a
/// balancer without stickiness, every session's): its record is read once,
/// for the check against its creator and revision, and the route opened
/// for the call takes that read instead of its own.
#[test]
fn a_first_call_on_another_instance_reads_the_record_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str()];
    let a = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    let b_dir = tempfile::tempdir().unwrap();
    let b = Serve::spawn(b_dir.path(), "127.0.0.1:0", &store);
    rt().block_on(async {
        let mut client = McpClient::new(&a.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        let record = format!("mcpr:{{{sid}}}:s");
        let monitor = redis.monitor();
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hi"}}});
        let answer = reqwest::Client::new()
            .post(&b.url)
            .header("mcp-session-id", &sid)
            .header(
                "mcp-protocol-version",
                mcp_resume_proto::SUPPORTED_PROTOCOL_VERSIONS[0],
            )
            .header("accept", "application/json")
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        let body: serde_json::Value = answer.json().await.unwrap();
        assert_eq!(body["result"]["content"][0]["text"], "hi", "{body}");
        let sent = monitor.stop();
        // The record's read: its creation time, end flag and metadata.
        let reads = sent
            .iter()
            .filter(|c| c[0] == "hmget" && c.get(1) == Some(&record))
            .filter(|c| c.iter().any(|w| w == "m"))
            .count();
        assert_eq!(reads, 1, "{sent:?}");
    });
}

/// `GET` of the session stream over SSE.
async fn session_stream(http: &reqwest::Client, url: &str, sid: &str) -> reqwest::Response {
    http.get(url)
        .header("mcp-session-id", sid)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap()
}

#[test]
fn redis_unreachable_ends_open_streams_loudly_answers_503_and_recovers_by_itself() {
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let serve = Serve::spawn(dir.path(), "127.0.0.1:0", &["--store", redis.url.as_str()]);
    rt().block_on(async {
        let mut client = McpClient::new(&serve.url);
        client.initialize().await.unwrap();
        let sid = client.session_id().unwrap().to_owned();
        let http = reqwest::Client::new();
        // Two readers open when Redis goes: each ends with a clear error, neither hangs.
        let sse = session_stream(&http, &serve.url, &sid).await;
        assert_eq!(sse.status(), 200);
        let ws_url = format!(
            "{}/session/{sid}/events",
            serve.url.replacen("http", "ws", 1)
        );
        let mut req = ws_url.into_client_request().unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", "mcp.resume.v1".parse().unwrap());
        req.headers_mut()
            .insert("last-event-id", "0".parse().unwrap());
        let (mut ws, resp) = tokio_tungstenite::connect_async(req).await.unwrap();
        let c = resp.headers()["x-mcp-resume-cursor"]
            .to_str()
            .unwrap()
            .to_owned();
        ws.send(Message::Text(
            format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#).into(),
        ))
        .await
        .unwrap();
        redis.stop();
        let body = tokio::time::timeout(Duration::from_secs(10), sse.text())
            .await
            .expect("the SSE stream ends")
            .unwrap();
        assert!(
            body.contains(": error log-unavailable:"),
            "the SSE stream says why it ended: {body:?}"
        );
        let close = loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("the WebSocket closes")
            {
                Some(Ok(Message::Close(f))) => break f.expect("a close frame with a code"),
                Some(Ok(_)) => continue,
                other => panic!("no close frame: {other:?}"),
            }
        };
        assert_eq!(u16::from(close.code), 1001, "resume from the cursor");
        assert!(close.reason.contains("log unavailable"), "{}", close.reason);
        let r = session_stream(&http, &serve.url, &sid).await;
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"], "log-unavailable");
        // Redis returns (empty: it keeps nothing on disk): the instance recovers by itself.
        redis.restart();
        let mut ok = false;
        for _ in 0..50 {
            let mut c = McpClient::new(&serve.url);
            if c.initialize().await.is_ok() {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ok, "new sessions work again once Redis is back");
        // The old session died with Redis's memory: loudly 404, never silently empty.
        let r = session_stream(&http, &serve.url, &sid).await;
        assert_eq!(r.status(), 404);
    });
}

/// The failover case of `mcp-resume chaos`: three instances on one Redis,
/// every step of an iteration on any of them, one killed now and then. The
/// legacy upgrade, run the same way, must show its gaps (so the harness sees
/// them across instances too).
#[test]
fn chaos_across_three_instances_with_kills_loses_nothing() {
    chaos_across_three_instances("false");
}

/// The same with sessions in the seq-id layout (the instances `chaos`
/// spawns inherit `MCP_RESUME_REDIS_SEQ_IDS`).
#[test]
fn chaos_across_three_instances_with_kills_loses_nothing_in_the_seq_id_layout() {
    chaos_across_three_instances("true");
}

fn chaos_across_three_instances(seq_ids: &str) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .env("MCP_RESUME_REDIS_SEQ_IDS", seq_ids)
        .args(["chaos", "--spawn", "--store", redis.url.as_str()])
        .args(["--instances", "3", "--compare-legacy", "--iterations", "60"])
        .args(["--parallel", "8", "--seed", "7", "--quiet", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["instances"], 3);
    let (safe, legacy) = (&v["modes"][0], &v["modes"][1]);
    assert_eq!(safe["iterations"], 60);
    assert_eq!(safe["silent_gaps"], 0, "{stdout}");
    assert_eq!(safe["duplicates"], 0);
    assert_eq!(safe["reorders"], 0);
    assert_eq!(safe["content_mismatches"], 0);
    assert!(
        safe["faults"]["kill"].as_u64().unwrap_or(0) > 0,
        "instances were killed"
    );
    assert!(legacy["silent_gaps"].as_u64().unwrap() > 0, "{stdout}");
    assert!(out.status.success());
    // The sessions took the layout asked for (the live ones say it: an
    // ended session's hash keeps only its creation and end).
    let created = redis.cli(&["--scan", "--pattern", "mcpr:{*}:s"]);
    let layouts: Vec<String> = created
        .lines()
        .filter(|k| redis.cli(&["HGET", k, "e"]).trim() == "0")
        .take(5)
        .map(|k| redis.cli(&["HGET", k, "v"]).trim().to_owned())
        .collect();
    let want = if seq_ids == "true" { "2" } else { "" };
    assert!(
        !layouts.is_empty() && layouts.iter().all(|l| l == want),
        "{layouts:?}"
    );
}
