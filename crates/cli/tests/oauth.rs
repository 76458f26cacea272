//! `serve --oauth-issuer … --oauth-jwks FILE`: the flags wire the OAuth
//! resource server; `call --bearer-token` carries an access token through it.

mod common;

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::Serve;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

const ISS: &str = "https://auth.test";
const AUD: &str = "https://mcp.test/mcp";

/// An Ed25519 key from fresh random bytes (PKCS#8, RFC 8410), and its JWKS.
fn key() -> (EncodingKey, String) {
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).unwrap();
    der.extend_from_slice(&seed);
    let key = EncodingKey::from_ed_der(&der);
    let mut jwk =
        serde_json::to_value(Jwk::from_encoding_key(&key, Algorithm::EdDSA).unwrap()).unwrap();
    jwk["kid"] = "k1".into();
    (key, json!({"keys": [jwk]}).to_string())
}

fn token(key: &EncodingKey, scope: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let claims =
        json!({"iss": ISS, "aud": AUD, "sub": "cli", "scope": scope, "iat": now, "exp": now + 300});
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

#[test]
fn serve_with_oauth_flags_admits_a_valid_access_token_and_refuses_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (key, jwks) = key();
    let jwks_path = dir.path().join("jwks.json");
    std::fs::write(&jwks_path, jwks).unwrap();
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
    let out = call(Some(&token(&key, "mcp")));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["content"][0]["text"], "through oauth");
    for (token, why) in [(None, "no token"), (Some(token(&key, "other")), "no scope")] {
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
