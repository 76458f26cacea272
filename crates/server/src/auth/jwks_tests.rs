//! Loading the key set: setup failures, and a JWKS served over HTTP by a
//! tiny axum server on loopback, rotated under the authenticator.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{header, StatusCode};

use super::testkit::*;
use super::*;

#[tokio::test]
async fn setup_fails_loudly() {
    let missing = OAuthConfig::new(ISS, AUD, JwksSource::File("/nonexistent/jwks.json".into()));
    let err = Authenticator::new(AuthConfig::OAuth(missing))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AuthSetupError::Jwks(JwksError::Read { .. })),
        "{err:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, "{\"keys\": 3}").unwrap();
    let malformed = OAuthConfig::new(ISS, AUD, JwksSource::File(path.clone()));
    let err = Authenticator::new(AuthConfig::OAuth(malformed))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AuthSetupError::Jwks(JwksError::Parse { .. })),
        "{err:?}"
    );

    std::fs::write(&path, r#"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#).unwrap();
    let symmetric = OAuthConfig::new(ISS, AUD, JwksSource::File(path.clone()));
    let err = Authenticator::new(AuthConfig::OAuth(symmetric))
        .await
        .unwrap_err();
    assert!(
        matches!(err, AuthSetupError::Jwks(JwksError::NoUsableKeys { .. })),
        "{err:?}"
    );

    std::fs::write(&path, jwks(&[&TestKey::es256("k")])).unwrap();
    for (iss, aud) in [
        ("auth.example.com", AUD),
        (ISS, "/mcp"),
        (ISS, "https://h/mcp#x"),
        (ISS, "ftp://h/mcp"),
    ] {
        let c = OAuthConfig::new(iss, aud, JwksSource::File(path.clone()));
        let err = Authenticator::new(AuthConfig::OAuth(c)).await.unwrap_err();
        assert!(
            matches!(err, AuthSetupError::InvalidUrl { .. }),
            "{iss} {aud}: {err:?}"
        );
    }

    // a port nobody listens on
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/jwks");
    let err = Authenticator::new(AuthConfig::OAuth(OAuthConfig::new(
        ISS,
        AUD,
        JwksSource::Url(url),
    )))
    .await
    .unwrap_err();
    assert!(
        matches!(err, AuthSetupError::Jwks(JwksError::Fetch { .. })),
        "{err:?}"
    );
}

/// A JWKS endpoint on 127.0.0.1:0 whose document the test swaps, counting fetches.
struct JwksServer {
    url: String,
    doc: Arc<Mutex<String>>,
    hits: Arc<AtomicUsize>,
}

impl JwksServer {
    async fn start(doc: String) -> Self {
        let doc = Arc::new(Mutex::new(doc));
        let hits = Arc::new(AtomicUsize::new(0));
        let (d, h) = (doc.clone(), hits.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                h.fetch_add(1, Ordering::SeqCst);
                let body = d.lock().unwrap().clone();
                async move { ([(header::CONTENT_TYPE, "application/json")], body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/jwks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, doc, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn the_jwks_comes_from_a_url_and_an_unknown_kid_refetches_once() {
    let old = TestKey::es256("old");
    let new = TestKey::ed25519("new");
    let server = JwksServer::start(jwks(&[&old])).await;
    let config = OAuthConfig::new(ISS, AUD, JwksSource::Url(server.url.clone()));
    let auth = Authenticator::new(AuthConfig::OAuth(config)).await.unwrap();
    assert_eq!(server.hits(), 1, "fetched at start");

    let p = auth
        .authenticate(&bearer(&old.sign(&good_claims())), false)
        .await
        .unwrap();
    assert_eq!(p.unwrap().subject, "alice");
    assert_eq!(server.hits(), 1, "a known kid does not refetch");

    // the authorization server rotates in a new key
    *server.doc.lock().unwrap() = jwks(&[&old, &new]);
    let p = auth
        .authenticate(&bearer(&new.sign(&good_claims())), false)
        .await
        .unwrap();
    assert_eq!(p.unwrap().subject, "alice");
    assert_eq!(server.hits(), 2, "the unknown kid refetched once");

    // another unknown kid within the minute: refused without a fetch
    let stranger = TestKey::es256("stranger");
    *server.doc.lock().unwrap() = jwks(&[&old, &new, &stranger]);
    let err = refusal(&auth, &stranger.sign(&good_claims())).await;
    assert!(
        matches!(&err, AuthError::InvalidToken { reason: TokenRejection::UnknownKey(k), .. } if k == "stranger"),
        "{err:?}"
    );
    assert_eq!(server.hits(), 2, "at most one refetch per interval");
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &invalid("no key with kid 'stranger' in the authorization server's key set"),
    );
}

#[tokio::test]
async fn after_the_interval_an_unknown_kid_refetches_again() {
    let a = TestKey::es256("a");
    let b = TestKey::es256("b");
    let server = JwksServer::start(jwks(&[&a])).await;
    let mut config = OAuthConfig::new(ISS, AUD, JwksSource::Url(server.url.clone()));
    config.jwks_refetch_interval = Duration::from_millis(50);
    let auth = Authenticator::new(AuthConfig::OAuth(config)).await.unwrap();
    assert!(refusal(&auth, &b.sign(&good_claims()))
        .await
        .to_string()
        .contains("refused"));
    assert_eq!(server.hits(), 2);
    tokio::time::sleep(Duration::from_millis(80)).await;
    *server.doc.lock().unwrap() = jwks(&[&a, &b]);
    assert!(auth
        .authenticate(&bearer(&b.sign(&good_claims())), false)
        .await
        .is_ok());
    assert_eq!(server.hits(), 3);
}

#[tokio::test]
async fn concurrent_requests_for_a_new_kid_share_one_refetch() {
    let old = TestKey::es256("old");
    let new = TestKey::es256("new");
    let server = JwksServer::start(jwks(&[&old])).await;
    let mut config = OAuthConfig::new(ISS, AUD, JwksSource::Url(server.url.clone()));
    // no rate limit: only the re-check under the lock keeps this to one fetch
    config.jwks_refetch_interval = Duration::ZERO;
    let auth = Authenticator::new(AuthConfig::OAuth(config)).await.unwrap();
    *server.doc.lock().unwrap() = jwks(&[&old, &new]);
    let token = new.sign(&good_claims());
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (auth, token) = (auth.clone(), token.clone());
            tokio::spawn(async move { auth.authenticate(&bearer(&token), false).await })
        })
        .collect();
    for t in tasks {
        assert!(t.await.unwrap().is_ok());
    }
    assert_eq!(server.hits(), 2, "one fetch at start, one refetch");
}

#[tokio::test]
async fn a_jwks_file_is_read_again_for_an_unknown_kid() {
    let old = TestKey::es256("old");
    let new = TestKey::ed25519("new");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(&[&old])).unwrap();
    let config = OAuthConfig::new(ISS, AUD, JwksSource::File(path.clone()));
    let auth = Authenticator::new(AuthConfig::OAuth(config)).await.unwrap();
    std::fs::write(&path, jwks(&[&new])).unwrap();
    let p = auth
        .authenticate(&bearer(&new.sign(&good_claims())), false)
        .await;
    assert_eq!(p.unwrap().unwrap().subject, "alice");
    // the old key is gone with the new file
    let err = refusal(&auth, &old.sign(&good_claims())).await;
    assert!(
        matches!(&err, AuthError::InvalidToken { reason: TokenRejection::UnknownKey(k), .. } if k == "old"),
        "{err:?}"
    );
}
