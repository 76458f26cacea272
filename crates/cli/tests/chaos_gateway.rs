//! The short CI versions of `mcp-resume chaos --gateway` and `--hosted`:
//! two gateways on one Redis in front of the Python SDK stdio server, and two
//! `rmcp_durable --transport mcp-resume` on one Redis; `progress` calls in
//! sessions (and `confirm`, the server's elicitation answered on either
//! instance) with `kill -9`,
//! freezes and client cuts resumed on either instance. Every call is
//! complete or loud (no silent gap, duplicate, reorder, foreign step,
//! changed answer or hang), no session is served by two processes
//! (gateway), every session is judged, and the faults were made. The judge
//! itself is shown to see gaps, duplicates and forks by its unit tests
//! (crates/cli/src/chaos/gateway/judge.rs).

mod common;

use std::process::Command;

use common::gateway::python_server;
use common::rmcp_durable;
use mcp_resume_testkit::RedisServer;
use serde_json::Value;

/// Runs `chaos` with `args` and the report in a temporary file; checks the
/// report for `calls` calls with nothing silent, hung or unjudged, and
/// faults made; returns it.
fn run_and_check(args: &[&str], calls: u64, tail: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .arg("chaos")
        .args(args)
        .args(["--quiet", "--report"])
        .arg(&report)
        .args(tail)
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(n("calls"), calls, "{v}");
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
    let sum = |k: &str| -> u64 {
        v[k].as_object()
            .unwrap()
            .values()
            .map(|x| x.as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        n("complete") + sum("loud"),
        calls,
        "every call counted once: {v}"
    );
    assert_eq!(n("asks_complete") + sum("asks_loud"), n("asks"), "{v}");
    assert!(n("complete") > 0 && n("asks_complete") > 0, "{v}");
    // The faults happened: the run proves something only if they did.
    assert!(v["faults"]["kills"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["faults"]["freezes"].as_u64().unwrap() >= 1, "{v}");
    assert!(n("cuts") >= 1 && n("resumes") >= n("cuts"), "{v}");
    assert!(out.status.success(), "exit {:?}", out.status);
    v
}

#[test]
fn chaos_gateway_two_instances_on_redis_lose_nothing_and_never_fork() {
    let redis = RedisServer::start();
    let [python, script] = python_server();
    let v = run_and_check(
        &[
            "--gateway",
            "--store",
            &redis.url,
            "--instances",
            "2",
            "--iterations",
            "60",
            "--calls-per-session",
            "4",
            "--parallel",
            "3",
            "--fault-every-secs",
            "3",
            "--freeze-secs",
            "12",
            "--seed",
            "5",
            "--max-secs",
            "240",
        ],
        60,
        &["--", &python, &script],
    );
    assert!(v["ticks"].as_u64().unwrap() > 0, "{v}");
}

/// Hosted rmcp handlers on two instances, with the harness's own Redis
/// restarted among the faults: a call whose stream opens while Redis is
/// down once lost its first step this way (a silent gap, seed 6).
#[test]
fn chaos_hosted_rmcp_two_instances_on_redis_lose_nothing() {
    let bin = rmcp_durable();
    let v = run_and_check(
        &[
            "--hosted",
            bin.to_str().unwrap(),
            "--spawn-redis",
            "--instances",
            "2",
            "--iterations",
            "400",
            "--calls-per-session",
            "4",
            "--parallel",
            "3",
            "--fault-every-secs",
            "2",
            "--freeze-secs",
            "3",
            "--seed",
            "6",
            "--max-secs",
            "300",
        ],
        400,
        &[],
    );
    assert_eq!(v["mode"], "hosted", "{v}");
    assert!(v["faults"]["redis_restarts"].as_u64().unwrap() >= 1, "{v}");
}
