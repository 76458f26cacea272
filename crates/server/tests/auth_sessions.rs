//! OAuth on a running server: tokens signed with a key made in the test and
//! checked against its JWKS file; sessions bound to the token's `sub`.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{ws_connect, TestServer};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use mcp_resume_server::auth::{AuthConfig, Authenticator, JwksSource, OAuthConfig};
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};

const ISS: &str = "https://auth.test";
const AUD: &str = "https://mcp.test/mcp";

/// An Ed25519 key from 32 fresh random bytes (PKCS#8, RFC 8410) and its JWKS.
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

fn token(key: &EncodingKey, sub: &str, scope: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    let claims =
        json!({"iss": ISS, "aud": AUD, "sub": sub, "scope": scope, "iat": now, "exp": now + 300});
    jsonwebtoken::encode(&header, &claims, key).unwrap()
}

async fn server(jwks: &str, dir: &tempfile::TempDir) -> TestServer {
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks).unwrap();
    let mut oauth = OAuthConfig::new(ISS, AUD, JwksSource::File(path));
    oauth.scope = Some("mcp".into());
    let auth = Authenticator::new(AuthConfig::OAuth(oauth)).await.unwrap();
    TestServer::start(ServerConfig {
        auth,
        ..Default::default()
    })
    .await
}

async fn post(s: &TestServer, token: &str, sid: Option<&str>, body: Value) -> reqwest::Response {
    let mut rb = reqwest::Client::new()
        .post(&s.url)
        .header("authorization", format!("bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(sid) = sid {
        rb = rb.header("mcp-session-id", sid);
    }
    rb.body(body.to_string()).send().await.unwrap()
}

#[tokio::test]
async fn a_session_belongs_to_its_principal_and_is_404_to_everyone_else() {
    let dir = tempfile::tempdir().unwrap();
    let (key, jwks) = key();
    let s = server(&jwks, &dir).await;
    let alice = token(&key, "alice", "mcp");
    let bob = token(&key, "bob", "mcp");

    // No token: 401 naming the resource metadata; the metadata names the issuer.
    let r = reqwest::Client::new().post(&s.url).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    let meta: Value = reqwest::get(format!(
        "http://{}/.well-known/oauth-protected-resource",
        s.addr
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(meta["authorization_servers"][0], ISS, "{meta}");
    // A token without the required scope: 403.
    let r = post(&s, &token(&key, "carol", "other"), None, json!({})).await;
    assert_eq!(r.status(), 403);

    // Alice's session (with a lower-case scheme) ...
    let r = post(&s, &alice, None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await;
    assert_eq!(r.status(), 200);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_owned();
    let ping = json!({"jsonrpc":"2.0","id":2,"method":"ping"});
    assert_eq!(
        post(&s, &alice, Some(&sid), ping.clone()).await.status(),
        200
    );

    // ... does not exist for Bob: POST, GET, the events path, the upgrade, DELETE.
    assert_eq!(post(&s, &bob, Some(&sid), ping.clone()).await.status(), 404);
    let get = |tok: &str, url: String| {
        reqwest::Client::new()
            .get(url)
            .header("authorization", format!("Bearer {tok}"))
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .send()
    };
    assert_eq!(get(&bob, s.url.clone()).await.unwrap().status(), 404);
    assert_eq!(get(&bob, s.events_url(&sid)).await.unwrap().status(), 404);
    let auth = format!("Bearer {bob}");
    match ws_connect(
        &s.ws_url(&sid),
        &[
            ("sec-websocket-protocol", "mcp.resume.v1"),
            ("authorization", &auth),
        ],
    )
    .await
    {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 404),
        other => panic!(
            "Bob's upgrade must be 404, got {:?}",
            other.map(|(_, r)| r.status())
        ),
    }
    let r = reqwest::Client::new()
        .delete(&s.url)
        .header("authorization", format!("Bearer {bob}"))
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // Alice's session is untouched by all that.
    assert_eq!(post(&s, &alice, Some(&sid), ping).await.status(), 200);
    let r = get(&alice, s.events_url(&sid)).await.unwrap();
    assert_eq!(r.status(), 200);
}
