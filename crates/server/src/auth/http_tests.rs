//! The authenticator as a server would mount it: [`require`] as a layer over
//! a route and the metadata router merged beside it, driven over real HTTP.

use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::{Extension, Router};
use serde_json::{json, Value};

use super::testkit::{good_claims, jwks, TestKey};
use super::*;

const ISS: &str = "https://auth.example.com";

/// Serves `/mcp` behind [`require`] plus the metadata routes; returns the base URL.
async fn serve(auth: Authenticator) -> String {
    let protected = Router::new()
        .route(
            "/mcp",
            get(|Extension(p): Extension<Principal>| async move { p.subject }),
        )
        .layer(axum::middleware::from_fn_with_state(auth.clone(), require));
    let app = match auth.metadata_router() {
        Some(meta) => protected.merge(meta),
        None => protected,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

async fn oauth_server(key: &TestKey) -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[key])).unwrap();
    let mut config = OAuthConfig::new(ISS, "https://mcp.example.com/mcp", JwksSource::File(path));
    config.scope = Some("mcp:tools".into());
    let auth = Authenticator::new(AuthConfig::OAuth(config)).await.unwrap();
    (serve(auth).await, dir)
}

#[tokio::test]
async fn the_layer_admits_a_token_and_hands_the_principal_on() {
    let key = TestKey::es256("k1");
    let (base, _dir) = oauth_server(&key).await;
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{base}/mcp"))
        .header(
            header::AUTHORIZATION,
            format!("bearer {}", key.sign(&good_claims())),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), "alice");
}

#[tokio::test]
async fn the_layer_answers_401_and_403_with_challenges_and_json() {
    let key = TestKey::es256("k1");
    let (base, _dir) = oauth_server(&key).await;
    let meta = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";
    let http = reqwest::Client::new();

    let resp = http.get(format!("{base}/mcp")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        resp.headers()[header::WWW_AUTHENTICATE],
        format!("Bearer scope=\"mcp:tools\", resource_metadata=\"{meta}\"").as_str()
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "unauthorized");
    assert_eq!(body["message"], "this endpoint requires a bearer token");

    let mut no_scope = good_claims();
    no_scope["scope"] = json!("other");
    let resp = http
        .get(format!("{base}/mcp"))
        .bearer_auth(key.sign(&no_scope))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        resp.headers()[header::WWW_AUTHENTICATE],
        format!(
            "Bearer error=\"insufficient_scope\", scope=\"mcp:tools\", resource_metadata=\"{meta}\""
        )
        .as_str()
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "insufficient-scope");
}

#[tokio::test]
async fn the_metadata_is_served_without_a_token_on_both_paths() {
    let key = TestKey::es256("k1");
    let (base, _dir) = oauth_server(&key).await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let resp = reqwest::get(format!("{base}{path}")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        assert_eq!(resp.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            body,
            json!({
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": [ISS],
                "scopes_supported": ["mcp:tools"],
                "bearer_methods_supported": ["header"],
            }),
            "{path}"
        );
    }
}

#[tokio::test]
async fn a_subprotocol_token_counts_on_a_websocket_handshake_only() {
    let auth = Authenticator::bearer("s3cret");
    let base = serve(auth).await;
    let http = reqwest::Client::new();
    let offer = "mcp.resume.v1, mcp.auth.s3cret";
    // a plain GET offering the token as a subprotocol is not authenticated by it
    let resp = http
        .get(format!("{base}/mcp"))
        .header(header::SEC_WEBSOCKET_PROTOCOL, offer)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(resp.headers()[header::WWW_AUTHENTICATE], "Bearer");
    // the same on a handshake passes the layer (the route is no WebSocket, so 200 here)
    let resp = http
        .get(format!("{base}/mcp"))
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "upgrade")
        .header(header::SEC_WEBSOCKET_PROTOCOL, offer)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.text().await.unwrap(), Principal::STATIC_BEARER);
}
