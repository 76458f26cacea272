//! OAuth on a running server: tokens signed with a key made in the test and
//! checked against its JWKS file; sessions bound to the token's `sub`.

mod common;

use common::{ws_connect, TestServer};
use mcp_resume_server::auth::{AuthConfig, Authenticator, JwksSource, OAuthConfig};
use mcp_resume_server::ServerConfig;
use mcp_resume_testkit::TestIssuer;
use serde_json::{json, Value};

const ISS: &str = "https://auth.test";
const AUD: &str = "https://mcp.test/mcp";

async fn server(jwks: &str, dir: &tempfile::TempDir) -> TestServer {
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks).unwrap();
    let mut oauth = OAuthConfig::new(ISS, AUD, JwksSource::File(path));
    oauth.scope = Some("mcp".into());
    let auth = Authenticator::new(AuthConfig::OAuth(oauth)).await.unwrap();
    let mut config = ServerConfig::default();
    config.auth = auth;
    TestServer::start(config).await
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
    let issuer = TestIssuer::new(ISS, AUD);
    let s = server(&issuer.jwks, &dir).await;
    let alice = issuer.token("alice", "mcp");
    let bob = issuer.token("bob", "mcp");

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
    let r = post(&s, &issuer.token("carol", "other"), None, json!({})).await;
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
