//! A graceful stop is a deploy step (crate `mcp-resume-server`'s `drain`):
//! on SIGTERM `/readyz` answers 503 at once, the calls in flight and the
//! work tools started finish, a gateway's sessions give their leases up as
//! they settle, and only then does the instance exit.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::gateway::{gateway_python, init as gateway_init, pid, pid_of};
use common::{initialize, post, read, rt, RedisServer, Serve};
use serde_json::{json, Value};

/// SIGTERM without waiting for the exit.
fn sigterm(s: &Serve) {
    let ok = Command::new("kill")
        .arg("-TERM")
        .arg(s.child.id().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Waits (at most `within`) for the process to exit; its status.
fn exited(s: &mut Serve, within: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < until,
            "still running {within:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `i` of every `emit` notification on the session stream, read from
/// its start until `count` of them came or the stream went quiet.
async fn emitted(url: &str, sid: &str, count: usize) -> Vec<u64> {
    let resp = reqwest::Client::new()
        .get(url)
        .header("mcp-session-id", sid)
        .header("accept", "text/event-stream")
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut seen = 0;
    let events = read(resp, Duration::from_secs(3), |e| {
        seen += usize::from(e.data.contains("notifications/message"));
        seen >= count
    })
    .await
    .unwrap_or_default();
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter(|v| v["method"] == "notifications/message")
        .filter_map(|v| v["params"]["data"]["i"].as_u64())
        .collect()
}

#[test]
fn a_sigterm_finishes_the_calls_in_flight_and_what_tools_promised() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Serve::spawn(
        dir.path(),
        "127.0.0.1:0",
        &["--drain-accept-secs", "1", "--shutdown-grace-secs", "20"],
    );
    let sid = rt().block_on(async {
        let sid = initialize(&s.url).await;
        // 40 notifications, 25 ms apart: promised by the answer, sent after it.
        let answer = post(
            &s.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "emit", "arguments": {"count": 40, "interval_ms": 25}}}),
        )
        .await;
        assert_eq!(answer.status(), 200);
        // A call answered on its request stream, 15 steps 100 ms apart.
        let streaming = {
            let (url, sid) = (s.url.clone(), sid.clone());
            tokio::spawn(async move {
                let resp = post(
                    &url,
                    Some(&sid),
                    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "progress", "arguments": {"steps": 15, "interval_ms": 100}}}),
                )
                .await;
                read(resp, Duration::from_secs(10), |e| {
                    serde_json::from_str::<Value>(&e.data).is_ok_and(|v| v["id"] == 2)
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        sigterm(&s);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Draining: a balancer's check sees 503 at once.
        let ready = reqwest::get(format!("http://{}/readyz", s.addr))
            .await
            .expect("the listener still accepts while draining");
        assert_eq!(ready.status(), 503);
        assert_eq!(ready.text().await.unwrap(), "draining\n");

        let events = streaming
            .await
            .unwrap()
            .expect("the call's stream went silent");
        let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(last["id"], 2);
        assert!(
            last["result"].is_object(),
            "the call in flight was cut off by the stop: {last}"
        );
        sid
    });
    assert!(exited(&mut s, Duration::from_secs(25)).success());
    // Everything the emit promised was committed before the process went:
    // the session's stream, read from the disk log after a restart, holds all 40.
    s.restart();
    rt().block_on(async {
        let got = emitted(&s.url, &sid, 40).await;
        assert_eq!(
            got,
            (1..=40).collect::<Vec<u64>>(),
            "notifications the emit promised were abandoned at the stop"
        );
    });
}

/// Two gateways on one Redis; the owner of a session is stopped with
/// SIGTERM while another instance forwards a slow call to it and keeps
/// calling: the slow call finishes on the owner's child, the owner gives
/// the lease up once its session settles (it exits long before its grace
/// and its heartbeat's expiry), and every call, before, during and after
/// the stop, is answered: after it by a child on the other instance.
#[test]
fn a_gateway_owner_stopped_gracefully_finishes_forwarded_calls_and_hands_the_session_over() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = [
        "--store",
        redis.url.as_str(),
        "--drain-accept-secs",
        "1",
        "--shutdown-grace-secs",
        "30",
    ];
    let mut a = gateway_python(dir.path(), &store);
    let b = gateway_python(dir.path(), &store);
    rt().block_on(async {
        let sid = gateway_init(&a.url).await;
        let on_a = pid(&pid_of(&a.url, &sid, 1).await).expect("A runs the child");
        assert_eq!(
            pid(&pid_of(&b.url, &sid, 2).await),
            Some(on_a),
            "B forwards to A"
        );
        // A slow call forwarded from B to A's child.
        let slow = {
            let (url, sid) = (b.url.clone(), sid.clone());
            tokio::spawn(async move {
                let r = post(
                    &url,
                    Some(&sid),
                    json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                    "params": {"name": "wait", "arguments": {"seconds": 2}}}),
                )
                .await;
                r.text().await.unwrap()
            })
        };
        // And a client that keeps calling through B, every 100 ms.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let steady = {
            let (url, sid, stop) = (b.url.clone(), sid.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answered = Vec::new();
                let mut id = 100;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    id += 1;
                    answered.push(pid_of(&url, &sid, id).await);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                answered
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        let stopped_at = Instant::now();
        sigterm(&a);
        let body = tokio::time::timeout(Duration::from_secs(20), slow)
            .await
            .expect("the forwarded call ends")
            .unwrap();
        assert!(
            body.contains("waited") || body.contains("\"result\""),
            "the forwarded call in flight was cut off by the owner's stop: {body}"
        );
        // The owner exits once its session settled and its lease is given
        // up: well before the 30 s grace (and nothing waited for the lease
        // to expire: the next call through B is answered by B's own child).
        let status = tokio::task::spawn_blocking(move || {
            let status = exited(&mut a, Duration::from_secs(25));
            (status, a)
        })
        .await
        .unwrap();
        assert!(status.0.success());
        let took = stopped_at.elapsed();
        let on_b = pid(&pid_of(&b.url, &sid, 50).await).expect("B serves the session");
        assert_ne!(on_b, on_a, "a new child, on B");
        stop.store(true, std::sync::atomic::Ordering::Release);
        let answered = steady.await.unwrap();
        let failed: Vec<&Vec<Value>> = answered.iter().filter(|v| pid(v).is_none()).collect();
        assert!(
            failed.is_empty(),
            "{} of {} calls through B failed around the stop: {failed:?}",
            failed.len(),
            answered.len()
        );
        assert!(
            took < Duration::from_secs(25),
            "the owner took {took:?} to stop"
        );
    });
}

/// A kill -9 loses the work the process held, but not silently: the
/// background work an `emit` had promised is noted in the log, and after the
/// restart the session's client is told on its stream (`work-lost`).
#[test]
fn a_kill_reports_the_background_work_it_took_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let sid = rt().block_on(async {
        let sid = initialize(&s.url).await;
        let answer = post(
            &s.url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "emit", "arguments": {"count": 100, "interval_ms": 50}}}),
        )
        .await;
        assert!(answer.text().await.unwrap().contains("emitting 100"));
        tokio::time::sleep(Duration::from_millis(400)).await;
        sid
    });
    s.kill9();
    s.restart();
    rt().block_on(async {
        let resp = reqwest::Client::new()
            .get(&s.url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .header("last-event-id", "0")
            .send()
            .await
            .unwrap();
        let events = read(resp, Duration::from_secs(5), |e| {
            e.data.contains("work-lost")
        })
        .await
        .unwrap_or_default();
        let lost: Vec<Value> = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
            .filter(|v| v["params"]["data"]["reason"] == "work-lost")
            .collect();
        assert_eq!(
            lost.len(),
            1,
            "the broken promise was not reported: {events:?}"
        );
        assert_eq!(lost[0]["params"]["level"], "error");
        let sent = events
            .iter()
            .filter(|e| e.data.contains("\"logger\":\"emit\""))
            .count();
        assert!(
            sent < 100,
            "the kill came after the work ended ({sent} sent)"
        );
    });
}
