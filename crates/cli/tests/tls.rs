//! `serve --tls-cert --tls-key` and `call`/`tail --cacert`, as a person
//! would run them, with a CA made at test time.

mod common;

use std::process::Command;
use std::time::Duration;

use common::Serve;
use mcp_resume_testkit::TestPki;

fn mcp(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn call_and_tail_with_cacert_work_against_serve_with_tls() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let (cert, key, ca) = (
        pki.cert.to_str().unwrap(),
        pki.key.to_str().unwrap(),
        pki.ca.to_str().unwrap(),
    );
    let serve = Serve::spawn(
        &dir.path().join("data"),
        "127.0.0.1:0",
        &["--tls-cert", cert, "--tls-key", key],
    );
    assert!(serve.url.starts_with("https://127.0.0.1:"), "{}", serve.url);
    assert!(serve.url.ends_with("/mcp"), "{}", serve.url);

    let out = mcp(&[
        "call",
        &serve.url,
        "echo",
        r#"{"text":"x"}"#,
        "--cacert",
        ca,
    ]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"][0]["text"], "x");

    // Without the CA: refused, saying why.
    let out = mcp(&["call", &serve.url, "echo", r#"{"text":"x"}"#]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    assert!(stderr.contains("--cacert"), "{stderr}");

    // tail over wss:// from a session `call` made.
    let out = mcp(&["call", &serve.url, "emit", r#"{"count":5}"#, "--cacert", ca]);
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    let sid = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session: "))
        .unwrap()
        .to_owned();
    std::thread::sleep(Duration::from_millis(300));
    let out = mcp(&[
        "tail",
        &serve.url,
        "--session",
        &sid,
        "--ws",
        "--from",
        "0",
        "--max-events",
        "5",
        "--max-retries",
        "0",
        "--cacert",
        ca,
    ]);
    assert!(out.status.success(), "{out:?}");
    let seqs = common::tail_seqs(&out.stdout);
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
}

#[test]
fn serve_names_a_bad_tls_file_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::create(dir.path());
    let missing = dir.path().join("nope.pem");
    let data = dir.path().join("data");
    let out = mcp(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data.to_str().unwrap(),
        "--tls-cert",
        pki.cert.to_str().unwrap(),
        "--tls-key",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nope.pem"), "{stderr}");
    // --tls-cert alone is a usage error.
    let out = mcp(&["serve", "--tls-cert", pki.cert.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
