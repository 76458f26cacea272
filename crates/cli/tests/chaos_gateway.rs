//! The short CI version of `mcp-resume chaos --gateway`: two gateways on one
//! Redis in front of the Python SDK stdio server, `progress` calls in sessions
//! with `kill -9`, a freeze past the lease and client cuts resumed on either
//! instance. Every call is complete or loud (no silent gap, duplicate,
//! reorder, foreign step or hang), no session is served by two processes,
//! every session is judged, and the faults were made. The judge itself is
//! shown to see gaps, duplicates and forks by its unit tests
//! (crates/cli/src/chaos/gateway/judge.rs).

mod common;

use std::process::Command;

use common::gateway::python_server;
use mcp_resume_testkit::RedisServer;
use serde_json::Value;

#[test]
fn chaos_gateway_two_instances_on_redis_lose_nothing_and_never_fork() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos-gateway.json");
    let [python, script] = python_server();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args([
            "chaos",
            "--gateway",
            "--store",
            &redis.url,
            "--instances",
            "2",
        ])
        .args([
            "--iterations",
            "60",
            "--calls-per-session",
            "4",
            "--parallel",
            "3",
        ])
        .args([
            "--fault-every-secs",
            "3",
            "--freeze-secs",
            "12",
            "--seed",
            "5",
        ])
        .args(["--max-secs", "240", "--quiet", "--report"])
        .arg(&report)
        .args(["--", &python, &script])
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(n("calls"), 60, "{v}");
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    for k in [
        "silent_gaps",
        "duplicates",
        "reorders",
        "mismatches",
        "hung",
        "forked_sessions",
        "two_children_sessions",
    ] {
        assert_eq!(n(k), 0, "{k}: {v}");
    }
    assert_eq!(v["harness_errors"], serde_json::json!([]), "{v}");
    let loud: u64 = v["loud"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(n("complete") + loud, 60, "every call counted once: {v}");
    assert!(n("complete") > 0, "{v}");
    // The faults happened: the run proves something only if they did.
    assert!(v["faults"]["kills"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["faults"]["freezes"].as_u64().unwrap() >= 1, "{v}");
    assert!(n("cuts") >= 1 && n("resumes") >= n("cuts"), "{v}");
    assert!(n("ticks") > 0, "{v}");
    assert!(out.status.success(), "exit {:?}", out.status);
}
