//! Issue 17's run: `mcp-resume chaos` with three `serve` instances on a
//! Redis Cluster (three masters, three replicas, `--redis-replicas 1`), one
//! master killed with `kill -9` while the safe mode runs, then restarted
//! (it rejoins as its replacement's replica). The safe mode: no silent gap,
//! duplicate or reorder, no harness error; the legacy mode shows its gaps.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcp_resume_testkit::RedisCluster;

/// When the kill comes: well inside the safe mode, which runs first.
const KILL_AFTER: Duration = Duration::from_secs(20);

#[test]
fn chaos_on_a_cluster_with_a_master_killed_mid_run() {
    let mut cluster = RedisCluster::start(3, 1);
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let child = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["chaos", "--spawn", "--store", &cluster.url])
        .args([
            "--redis-replicas",
            "1",
            "--instances",
            "3",
            "--compare-legacy",
        ])
        .args(["--iterations", "300", "--seed", "17", "--quiet", "--report"])
        .arg(&report)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    std::thread::sleep(KILL_AFTER);
    let victim = cluster.masters()[0];
    cluster.kill(victim);
    cluster.wait_promoted(victim, 3, Duration::from_secs(30));
    let promoted = started.elapsed();
    cluster.restart(victim);
    cluster.wait_healthy(Duration::from_secs(60));
    let healed = started.elapsed();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!(
        "{stdout}\nkilled master {victim} at {KILL_AFTER:?}, replica promoted at {promoted:?}, \
         old master back as a replica at {healed:?}\n{stderr}"
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let (safe, legacy) = (&v["modes"][0], &v["modes"][1]);
    assert_eq!(safe["mode"], "safe");
    let safe_secs = safe["elapsed_s"].as_f64().unwrap();
    assert!(
        safe_secs > KILL_AFTER.as_secs_f64(),
        "the kill came after the safe mode ({safe_secs} s): not mid-run"
    );
    assert_eq!(safe["iterations"], 300, "{stdout}");
    assert_eq!(safe["silent_gaps"], 0, "{stdout}");
    assert_eq!(safe["duplicates"], 0, "{stdout}");
    assert_eq!(safe["reorders"], 0, "{stdout}");
    assert_eq!(safe["content_mismatches"], 0, "{stdout}");
    assert_eq!(safe["harness_errors"], 0, "{stdout}");
    assert!(
        legacy["silent_gaps"].as_u64().unwrap() > 0,
        "the legacy upgrade shows its gaps: {stdout}"
    );
    assert!(out.status.success(), "{stdout}");
}
