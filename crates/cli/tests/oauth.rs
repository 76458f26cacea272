//! `serve --oauth-issuer … --oauth-jwks FILE`: the flags wire the OAuth
//! resource server; `call --bearer-token` carries an access token through it.

mod common;

use common::Serve;
use mcp_resume_testkit::TestIssuer;
use std::process::Command;

const ISS: &str = "https://auth.test";
const AUD: &str = "https://mcp.test/mcp";

#[test]
fn serve_with_oauth_flags_admits_a_valid_access_token_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = TestIssuer::new(ISS, AUD);
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, &issuer.jwks).unwrap();
    let jwks_arg = jwks_path.to_str().unwrap();
    let serve = Serve::spawn(
        dir.path(),
        "127.0.0.1:0",
        &[
            "--store",
            "memory",
            "--oauth-issuer",
            ISS,
            "--oauth-audience",
            AUD,
            "--oauth-jwks",
            jwks_arg,
            "--oauth-scope",
            "mcp",
        ],
    );
    let call = |token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-resume"));
        cmd.args(["call", &serve.url, "echo", r#"{"text":"through oauth"}"#]);
        if let Some(t) = token {
            cmd.args(["--bearer-token", t]);
        }
        cmd.env_remove("MCP_RESUME_BEARER_TOKEN").output().unwrap()
    };
    let out = call(Some(&issuer.token("cli", "mcp")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"][0]["text"], "through oauth");
    for (token, why) in [
        (None, "no token"),
        (Some(issuer.token("cli", "other")), "no scope"),
    ] {
        let out = call(token.as_deref());
        assert!(!out.status.success(), "{why}: admitted");
    }
    // The resource metadata names the issuer.
    let url = format!("http://{}/.well-known/oauth-protected-resource", serve.addr);
    let v: serde_json::Value =
        common::rt().block_on(async { reqwest::get(url).await.unwrap().json().await.unwrap() });
    assert_eq!(v["authorization_servers"][0], ISS, "{v}");
}

#[test]
fn serve_refuses_to_start_with_a_jwks_file_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--oauth-issuer",
            ISS,
            "--oauth-audience",
            AUD,
            "--oauth-jwks",
        ])
        .arg(dir.path().join("missing.json"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.json"), "{err}");
}
