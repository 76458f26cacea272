//! The chaos run CI relies on: 200 iterations with kills and drops, safe
//! against legacy; every iteration counted, none left unjudged, no silent
//! gap, duplicate, reorder or mismatch in the safe mode, and gaps in the
//! legacy mode (so the harness is shown to see them). And the exit code is
//! shown to fail: on a server that loses events, and on iterations that
//! could not be judged.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn chaos(args: &[&str], report: &Path) -> (Output, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .arg("chaos")
        .args(args)
        .args(["--quiet", "--report"])
        .arg(report)
        .output()
        .unwrap();
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let v = serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap();
    (out, v)
}

/// Every iteration is in exactly one of judged, loud, harness error.
fn assert_accounted(mode: &Value) {
    let n = |k: &str| mode[k].as_u64().unwrap_or_else(|| panic!("{k} in {mode}"));
    assert_eq!(
        n("iterations"),
        n("judged_iterations") + n("loud_iterations") + n("harness_errors"),
        "{mode}"
    );
}

#[test]
fn chaos_200_iterations_safe_loses_nothing_and_legacy_shows_its_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let chart = dir.path().join("chaos.svg");
    let chart_arg = chart.to_str().unwrap();
    let (out, v) = chaos(
        &[
            "--spawn",
            "--compare-legacy",
            "--iterations",
            "200",
            "--seed",
            "42",
            "--chart",
            chart_arg,
        ],
        &report,
    );
    let safe = &v["modes"][0];
    let legacy = &v["modes"][1];
    assert_eq!(safe["mode"], "safe");
    assert_eq!(safe["iterations"], 200);
    assert_accounted(safe);
    assert_accounted(legacy);
    assert_eq!(safe["harness_errors"], 0, "{safe}");
    assert_eq!(legacy["harness_errors"], 0, "{legacy}");
    // Loud endings are allowed, but a run that judged few iterations in full
    // proves little.
    assert!(safe["judged_iterations"].as_u64().unwrap() >= 180, "{safe}");
    assert_eq!(safe["silent_gaps"], 0, "{safe}");
    assert_eq!(safe["seq_holes"], 0);
    assert_eq!(safe["missing_events"], 0);
    assert_eq!(safe["duplicates"], 0);
    assert_eq!(safe["reorders"], 0);
    assert_eq!(safe["content_mismatches"], 0);
    assert!(safe["upgrade_ms"]["p50"].as_f64().is_some());
    assert!(
        legacy["silent_gaps"].as_u64().unwrap() > 0,
        "the legacy upgrade must show its gaps: {legacy}"
    );
    assert!(out.status.success(), "exit 0 when the safe mode is clean");
    assert!(std::fs::read_to_string(&chart).unwrap().starts_with("<svg"));
}

/// A `serve --unsafe-legacy-upgrade` of our own, killed on drop.
struct Lossy(std::process::Child, String);

impl Drop for Lossy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn lossy(data: &Path) -> Lossy {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--unsafe-legacy-upgrade",
        ])
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = mcp_resume_testkit::listening_url(&mut child).expect("serve started");
    Lossy(child, url)
}

#[test]
fn chaos_fails_when_the_server_under_test_loses_events() {
    let dir = tempfile::tempdir().unwrap();
    let server = lossy(&dir.path().join("data"));
    let report = dir.path().join("chaos.json");
    let (out, v) = chaos(&[&server.1, "--iterations", "20", "--seed", "3"], &report);
    let mode = &v["modes"][0];
    assert_accounted(mode);
    assert!(mode["silent_gaps"].as_u64().unwrap() > 0, "{mode}");
    assert_eq!(out.status.code(), Some(1), "a lossy server fails the run");
}

#[test]
fn chaos_fails_when_iterations_cannot_be_judged() {
    // Nothing listens there: no iteration gets a session.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let (out, v) = chaos(&[&url, "--iterations", "2", "--parallel", "2"], &report);
    let mode = &v["modes"][0];
    assert_accounted(mode);
    assert_eq!(mode["iterations"], 2, "{mode}");
    assert_eq!(mode["harness_errors"], 2, "{mode}");
    assert_eq!(mode["harness_error_kinds"]["initialize"], 2, "{mode}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "unjudged iterations fail the run"
    );
}

/// The MCP 2026-07-28 era: every iteration reads a resumable listen stream
/// (the dev.mcp-resume/resumable-listen extension) through the same upgrades,
/// drops, kills and resumes; the safe mode loses nothing, and the legacy
/// upgrade shows its gaps there too.
#[test]
fn chaos_on_resumable_listen_streams_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("chaos.json");
    let (out, v) = chaos(
        &[
            "--spawn",
            "--listen-streams",
            "--compare-legacy",
            "--iterations",
            "150",
            "--seed",
            "2026",
        ],
        &report,
    );
    assert_eq!(v["listen_streams"], true, "{v}");
    let safe = &v["modes"][0];
    let legacy = &v["modes"][1];
    assert_eq!(safe["iterations"], 150);
    assert_accounted(safe);
    assert_eq!(safe["harness_errors"], 0, "{safe}");
    assert!(safe["judged_iterations"].as_u64().unwrap() >= 135, "{safe}");
    assert_eq!(safe["silent_gaps"], 0, "{safe}");
    assert_eq!(safe["duplicates"], 0);
    assert_eq!(safe["reorders"], 0);
    assert_eq!(
        safe["content_mismatches"], 0,
        "the acknowledgement, then emitted events only"
    );
    assert!(
        legacy["silent_gaps"].as_u64().unwrap() > 0,
        "the legacy upgrade must show its gaps on listen streams too: {legacy}"
    );
    assert!(out.status.success());
}
