//! The chaos run CI relies on: 200 iterations with kills and drops, safe
//! against legacy; no silent gap, duplicate or reorder in the safe mode, and
//! gaps in the legacy mode (so the harness is shown to see them).

use std::process::Command;

#[test]
fn chaos_200_iterations_safe_loses_nothing_and_legacy_shows_its_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let chart = dir.path().join("chaos.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args([
            "chaos",
            "--spawn",
            "--compare-legacy",
            "--iterations",
            "200",
            "--seed",
            "42",
            "--quiet",
            "--report",
        ])
        .arg(&report)
        .arg("--chart")
        .arg(&chart)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let safe = &v["modes"][0];
    let legacy = &v["modes"][1];
    assert_eq!(safe["mode"], "safe");
    assert_eq!(safe["iterations"], 200);
    assert_eq!(safe["silent_gaps"], 0, "{stdout}");
    assert_eq!(safe["duplicates"], 0);
    assert_eq!(safe["reorders"], 0);
    assert_eq!(safe["content_mismatches"], 0);
    assert!(safe["upgrade_ms"]["p50"].as_f64().is_some());
    assert!(
        legacy["silent_gaps"].as_u64().unwrap() > 0,
        "the legacy upgrade must show its gaps: {stdout}"
    );
    assert!(out.status.success(), "exit 0 when the safe mode is clean");
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
}

/// `rmcp_durable` (mcp-resume-rmcp's example), built beside this binary by
/// `cargo build --workspace --all-targets` (scripts/test); missing, it fails.
fn rmcp_durable() -> std::path::PathBuf {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .parent()
        .expect("target dir")
        .join("examples/rmcp_durable");
    assert!(
        bin.exists(),
        "{} is missing: cargo build -p mcp-resume-rmcp --example rmcp_durable (scripts/test builds it)",
        bin.display()
    );
    bin
}

#[test]
fn chaos_sse_only_serve_and_rmcp_durable_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(["chaos", "--spawn", "--sse-only", "--spawn-rmcp"])
        .arg(rmcp_durable())
        .args(["--iterations", "40", "--seed", "7", "--quiet", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["sse_only"], true);
    for (i, name) in [(0, "safe"), (1, "rmcp")] {
        let m = &v["modes"][i];
        assert_eq!(m["mode"], name);
        assert_eq!(m["iterations"], 40);
        for k in [
            "silent_gaps",
            "duplicates",
            "reorders",
            "content_mismatches",
        ] {
            assert_eq!(m[k], 0, "{name} {k}: {stdout}");
        }
    }
    assert!(out.status.success(), "exit 0 when both modes are clean");
}
