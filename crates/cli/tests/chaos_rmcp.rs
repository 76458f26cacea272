//! The SSE-only chaos run of serve and rmcp_durable (mcp-resume-rmcp's
//! example) in one run, 40 iterations each with kills and drops: every
//! iteration counted and judged against what `emit` numbered, no harness
//! error, no silent gap, duplicate, reorder or mismatch in either mode, and
//! exit 0. A missing rmcp_durable fails it.

mod common;

use std::process::Command;

use common::rmcp_durable;
use serde_json::Value;

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
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(v["sse_only"], true);
    for (i, name) in [(0, "safe"), (1, "rmcp")] {
        let m = &v["modes"][i];
        let n = |k: &str| m[k].as_u64().unwrap_or_else(|| panic!("{k} in {m}"));
        assert_eq!(m["mode"], name);
        assert_eq!(n("iterations"), 40, "{m}");
        // Every iteration is in exactly one of judged, loud, harness error.
        assert_eq!(
            n("iterations"),
            n("judged_iterations") + n("loud_iterations") + n("harness_errors"),
            "{m}"
        );
        assert!(
            n("judged_iterations") >= 30,
            "{name}: few judged in full: {m}"
        );
        for k in [
            "harness_errors",
            "silent_gaps",
            "seq_holes",
            "missing_events",
            "duplicates",
            "reorders",
            "content_mismatches",
        ] {
            assert_eq!(n(k), 0, "{name} {k}: {stdout}");
        }
        // SSE only: no fault is a WebSocket drop.
        assert!(m["faults"].get("dropws").is_none(), "{m}");
    }
    assert!(out.status.success(), "exit 0 when both modes are clean");
}
