//! Two gateways on one Redis never run two children for one session: the
//! owner frozen past its lease (`kill -STOP` for 12 s, past its 10 s
//! heartbeat) loses the session to the other instance, and once thawed it
//! stops its own child and forwards to the new owner instead of answering
//! from a child whose state has forked. The call that was in flight on the
//! frozen owner ends loudly.

mod common;

use std::process::Command;
use std::time::Duration;

use common::gateway::{gateway_python, init, pid, pid_of};
use common::{post, rt, RedisServer, Serve};
use serde_json::{json, Value};

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Two gateways (A, B) on one Redis of their own, the Python SDK stdio
/// server behind them; dropped gateways first, then the Redis.
fn two_gateways() -> (RedisServer, tempfile::TempDir, Serve, Serve) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str()];
    let a = gateway_python(dir.path(), &store);
    let b = gateway_python(dir.path(), &store);
    (redis, dir, a, b)
}

#[test]
fn an_owner_frozen_past_its_lease_stops_its_child_and_forwards_after_the_thaw() {
    let (_redis, _dir, a, b) = two_gateways();
    rt().block_on(async {
        let sid = init(&a.url).await;
        let on_a = pid(&pid_of(&a.url, &sid, 1).await).expect("A runs the child");
        // A call in flight on A's child when A freezes (its answer, JSON or
        // SSE, is read in a task of its own).
        let slow = {
            let (url, sid) = (a.url.clone(), sid.clone());
            tokio::spawn(async move {
                let r = post(
                    &url,
                    Some(&sid),
                    json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "wait", "arguments": {"seconds": 60}}}),
                )
                .await;
                r.text().await.unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;

        signal(a.child.id(), "STOP");
        tokio::time::sleep(Duration::from_secs(12)).await;
        // B takes the lease once A's heartbeat is gone: a new child.
        let got = pid_of(&b.url, &sid, 3).await;
        let on_b = pid(&got).unwrap_or_else(|| panic!("B serves the session: {got:?}"));
        assert_ne!(on_b, on_a);
        signal(a.child.id(), "CONT");

        // Through the thawed A, the session is B's child, every time.
        for id in 4..8 {
            let got = pid_of(&a.url, &sid, id).await;
            assert_eq!(
                pid(&got),
                Some(on_b),
                "one child per session after the thaw: {got:?}"
            );
        }
        assert_eq!(pid(&pid_of(&b.url, &sid, 8).await), Some(on_b));

        // The call that ran on A's child ended loudly, not silently (its
        // answer is JSON: the call sent nothing before it).
        let body = tokio::time::timeout(Duration::from_secs(30), slow)
            .await
            .expect("the call in flight on the frozen owner ends")
            .unwrap();
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|_| {
            let data = body.lines().rev().find_map(|l| l.strip_prefix("data: "));
            serde_json::from_str(data.unwrap_or("null")).unwrap()
        });
        assert_eq!(answer["id"], 2, "{body}");
        let reason = answer["error"]["data"]["reason"]
            .as_str()
            .unwrap_or_default();
        assert!(
            ["lease-lost", "server-restarted"].contains(&reason),
            "{body}"
        );
        // And A's child is stopped.
        let proc = format!("/proc/{on_a}");
        for _ in 0..100 {
            let zombie = std::fs::read_to_string(format!("{proc}/stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
            if zombie {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let gone = std::fs::read_to_string(format!("{proc}/stat"))
            .map(|s| s.contains(") Z "))
            .unwrap_or(true);
        assert!(gone, "A's child {on_a} still runs after A lost the lease");
    });
}

/// A stall past the lease's trust (7 s) but short of its expiry (10 s):
/// nobody else claims the session, the other instance keeps forwarding to
/// the owner, and the thawed owner, whose old route may no longer act,
/// claims again at once and answers what was forwarded meanwhile, instead
/// of leaving it unread until a message happens to reach it directly.
#[test]
fn forwarded_calls_are_answered_after_an_owner_stalls_short_of_its_expiry() {
    let (_redis, _dir, a, b) = two_gateways();
    rt().block_on(async {
        let sid = init(&a.url).await;
        let on_a = pid(&pid_of(&a.url, &sid, 1).await).expect("A runs the child");
        assert_eq!(
            pid(&pid_of(&b.url, &sid, 2).await),
            Some(on_a),
            "B forwards to A"
        );
        signal(a.child.id(), "STOP");
        // Forwarded to the frozen owner (its heartbeat still lives).
        let forwarded = {
            let (url, sid) = (b.url.clone(), sid.clone());
            tokio::spawn(async move { pid_of(&url, &sid, 3).await })
        };
        tokio::time::sleep(Duration::from_secs(8)).await;
        signal(a.child.id(), "CONT");
        let got = tokio::time::timeout(Duration::from_secs(20), forwarded)
            .await
            .expect("the call forwarded during the stall is answered")
            .unwrap();
        let now = pid(&got).unwrap_or_else(|| panic!("answered by a child: {got:?}"));
        // One child serves the session through both instances from then on.
        let on = |url: String, sid: String, id| async move {
            tokio::time::timeout(Duration::from_secs(20), pid_of(&url, &sid, id))
                .await
                .unwrap_or_else(|_| panic!("call {id} through {url} was never answered"))
        };
        assert_eq!(
            pid(&on(a.url.clone(), sid.clone(), 4).await),
            Some(now),
            "through A"
        );
        assert_eq!(
            pid(&on(b.url.clone(), sid.clone(), 5).await),
            Some(now),
            "through B"
        );
    });
}
