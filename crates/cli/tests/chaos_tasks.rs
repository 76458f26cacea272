//! The short CI version of `mcp-resume chaos --tasks`: two `conformance`
//! example instances on a Redis of the harness's own, tasks emitting
//! numbered events read with `tasks/stream`, resumed with `after` on either
//! instance after every break and cut by the client, while instances are
//! killed with `kill -9` and Redis restarted. Every task stream is complete
//! or loud, never a silent gap, a duplicate or a hang; the judge itself is
//! shown to see them by its unit test (crates/cli/src/chaos/tasks.rs).

mod common;

use std::process::Command;

use serde_json::Value;

#[test]
fn chaos_task_streams_on_two_instances_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let bin = common::example("conformance");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["chaos", "--tasks"])
        .arg(&bin)
        .args([
            "--spawn-redis",
            "--instances",
            "2",
            "--iterations",
            "80",
            "--parallel",
            "6",
        ])
        .args(["--fault-every-secs", "2", "--seed", "3", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["failures"], serde_json::json!([]), "{v}");
    let verdicts = v["verdicts"].as_object().unwrap();
    let total: u64 = verdicts.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(total, 80, "every task judged once: {v}");
    assert!(verdicts["complete"].as_u64().unwrap() > 0, "{v}");
    for bad in ["silent gap", "duplicate", "hung"] {
        assert!(verdicts.get(bad).is_none(), "{bad}: {v}");
    }
    // The faults happened: the run proves something only if they did.
    assert!(v["faults"]["kills"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["cuts"].as_u64().unwrap() >= 1, "{v}");
    assert!(out.status.success(), "exit {:?}", out.status);
}
