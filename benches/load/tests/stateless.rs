//! `mcp-resume-load stateless`, short: both paths are called and answered
//! (through the load tool's own hyper caller) and the ratio is reported.
//! The figures of a debug build mean nothing; that it measures does. It
//! needs the `conformance` example beside this binary, as scripts/test
//! builds it.

use std::time::Duration;

mod common;

#[test]
fn stateless_calls_both_paths_and_reports_their_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stateless.md");
    let args = [
        "stateless",
        "--rounds",
        "1",
        "--duration",
        "1",
        "--conns",
        "2",
    ];
    let status = common::run_load(&args, &out, Duration::from_secs(120));
    assert!(status.success(), "mcp-resume-load stateless: {status}");
    let report = std::fs::read_to_string(&out).unwrap();
    let rates: Vec<f64> = report
        .lines()
        .filter(|l| l.starts_with("| 20"))
        .map(|l| {
            let cell = l.trim_matches('|').rsplit(" | ").next().unwrap().trim();
            cell.parse()
                .unwrap_or_else(|_| panic!("not a rate: {l}\n{report}"))
        })
        .collect();
    assert_eq!(rates.len(), 2, "a row for each path: {report}");
    assert!(
        rates.iter().all(|&r| r > 0.0),
        "a path answered nothing: {report}"
    );
    let ratio: f64 = report
        .split("stateless/session: ")
        .nth(1)
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or_else(|| panic!("no ratio: {report}"));
    assert!(ratio.is_finite() && ratio > 0.0, "{report}");
}
