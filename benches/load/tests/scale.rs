//! `scale --compare`: the disk log and the Redis fleet, one after the other,
//! every event delivered exactly once in both, and the ratios printed.

mod common;

use std::time::Duration;

#[test]
fn scale_compare_runs_both_stores_and_prints_their_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("scale.md");
    let status = common::run_load(
        &[
            "scale",
            "--compare",
            "--sessions",
            "200",
            "--duration",
            "3",
            "--rate",
            "100",
        ],
        &out,
        Duration::from_secs(180),
    );
    assert!(status.success());
    let report = std::fs::read_to_string(&out).unwrap();
    assert!(report.contains("one instance, disk log"), "{report}");
    assert!(report.contains("2 instances on one Redis"), "{report}");
    assert!(
        report.contains("| figure | disk | Redis | Redis / disk |"),
        "{report}"
    );
    assert!(
        report.contains("lost: disk 0, Redis 0; duplicates: disk 0, Redis 0"),
        "{report}"
    );
    let per_event = report
        .lines()
        .find(|l| l.starts_with("| Redis commands per event"))
        .unwrap_or_else(|| panic!("{report}"));
    let n: f64 = per_event.split('|').nth(3).unwrap().trim().parse().unwrap();
    assert!(n > 0.0, "{per_event}");
}

/// `balancer`: echo through HAProxy and directly, both answered, the ratio printed.
#[test]
fn balancer_measures_echo_through_haproxy_and_directly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("balancer.md");
    let status = common::run_load(
        &["balancer", "--secs", "1", "--rounds", "1", "--conns", "4"],
        &out,
        Duration::from_secs(120),
    );
    assert!(status.success());
    let report = std::fs::read_to_string(&out).unwrap();
    let rate = |row: &str| -> f64 {
        let line = report
            .lines()
            .find(|l| l.starts_with(row))
            .unwrap_or_else(|| panic!("{report}"));
        line.split('|').nth(2).unwrap().trim().parse().unwrap()
    };
    assert!(rate("| directly to the instances") > 0.0, "{report}");
    assert!(rate("| through HAProxy") > 0.0, "{report}");
}
