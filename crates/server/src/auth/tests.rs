//! The authenticator end to end on tokens signed at test time: what it
//! admits, what it refuses and with which challenge.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use std::time::{Duration, UNIX_EPOCH};

use super::testkit::*;
use super::*;

#[tokio::test]
async fn a_valid_token_yields_its_subject_and_scopes() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], Some("mcp:tools")).await;
    let claims = good_claims();
    let p = auth
        .authenticate(&bearer(&key.sign(&claims)), false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.subject, "alice");
    assert_eq!(p.scopes, ["mcp:tools"]);
    let exp = claims["exp"].as_u64().unwrap();
    assert_eq!(p.expires_at, Some(UNIX_EPOCH + Duration::from_secs(exp)));
}

#[tokio::test]
async fn eddsa_and_kidless_tokens_verify() {
    let ec = TestKey::es256("ec");
    let ed = TestKey::ed25519("ed");
    let (auth, _dir) = oauth(&[&ec, &ed], None).await;
    let p = auth
        .authenticate(&bearer(&ed.sign(&good_claims())), false)
        .await
        .unwrap();
    assert_eq!(p.unwrap().subject, "alice");
    // no kid: every key of the token's algorithm is tried
    let kidless = ed.sign_as(None, &good_claims());
    assert!(auth.authenticate(&bearer(&kidless), false).await.is_ok());
}

#[tokio::test]
async fn rsa_keys_verify_rs256_and_ps256_unless_the_jwk_names_one() {
    let rs = TestKey::rsa(Algorithm::RS256, "rsa");
    let ps = TestKey::rsa(Algorithm::PS256, "rsa");
    // a JWK without "alg": both RSA signature schemes verify
    let mut open = TestKey::rsa(Algorithm::RS256, "rsa");
    open.jwk.as_object_mut().unwrap().remove("alg");
    let (auth, _dir) = oauth(&[&open], None).await;
    for key in [&rs, &ps] {
        let p = auth
            .authenticate(&bearer(&key.sign(&good_claims())), false)
            .await;
        assert_eq!(p.unwrap().unwrap().subject, "alice");
    }
    // a JWK that says RS256: a PS256 token is refused for its algorithm
    let (auth, _dir) = oauth(&[&rs], None).await;
    let err = refusal(&auth, &ps.sign(&good_claims())).await;
    assert!(
        matches!(
            err,
            AuthError::InvalidToken {
                reason: TokenRejection::Algorithm(Algorithm::PS256),
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_forged_signature_is_refused() {
    let real = TestKey::es256("k1");
    let forger = TestKey::es256("k1"); // same kid, other key
    let (auth, _dir) = oauth(&[&real], None).await;
    let err = refusal(&auth, &forger.sign(&good_claims())).await;
    assert!(
        matches!(
            err,
            AuthError::InvalidToken {
                reason: TokenRejection::Signature,
                ..
            }
        ),
        "{err:?}"
    );
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &invalid("the token's signature does not verify"),
    );
    // no kid: the signature is checked against every key and fails too
    let kidless = forger.sign_as(None, &good_claims());
    let err = refusal(&auth, &kidless).await;
    assert!(
        matches!(
            err,
            AuthError::InvalidToken {
                reason: TokenRejection::Signature,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn wrong_issuer_and_audience_are_refused() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let cases = [
        (
            "iss",
            json!("https://evil.example.com"),
            "the token was issued by another authorization server",
        ),
        (
            "aud",
            json!("https://other.example.com/mcp"),
            "the token is not meant for this resource",
        ),
        (
            "aud",
            json!(["https://a.example.com", "https://b.example.com"]),
            "the token is not meant for this resource",
        ),
    ];
    for (claim, value, description) in cases {
        let err = refusal(&auth, &key.sign(&with(good_claims(), claim, value))).await;
        assert_refused(err, StatusCode::UNAUTHORIZED, &invalid(description));
    }
    // aud as an array containing our resource is fine
    let many = with(good_claims(), "aud", json!(["https://a.example.com", AUD]));
    assert!(auth
        .authenticate(&bearer(&key.sign(&many)), false)
        .await
        .is_ok());
}

#[tokio::test]
async fn expiry_and_not_before_hold_beyond_the_leeway() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let expired = with(good_claims(), "exp", json!(now() - 120));
    let err = refusal(&auth, &key.sign(&expired)).await;
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &invalid("the token has expired"),
    );
    let early = with(good_claims(), "nbf", json!(now() + 120));
    let err = refusal(&auth, &key.sign(&early)).await;
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &invalid("the token is not valid yet"),
    );
    // within the 30 s leeway both pass
    let skewed = with(
        with(good_claims(), "exp", json!(now() - 5)),
        "nbf",
        json!(now() + 5),
    );
    assert!(auth
        .authenticate(&bearer(&key.sign(&skewed)), false)
        .await
        .is_ok());
}

#[tokio::test]
async fn required_claims_must_be_present() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    for claim in ["exp", "iss", "aud", "sub"] {
        let mut c = good_claims();
        c.as_object_mut().unwrap().remove(claim);
        let err = refusal(&auth, &key.sign(&c)).await;
        assert!(
            matches!(&err, AuthError::InvalidToken { reason: TokenRejection::MissingClaim(m), .. } if m == claim),
            "{claim}: {err:?}"
        );
    }
    let empty = with(good_claims(), "sub", json!(""));
    let err = refusal(&auth, &key.sign(&empty)).await;
    assert!(
        matches!(&err, AuthError::InvalidToken { reason: TokenRejection::MissingClaim(m), .. } if m == "sub"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_missing_scope_is_403() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], Some("mcp:tools mcp:admin")).await;
    let err = refusal(&auth, &key.sign(&good_claims())).await;
    assert_refused(
        err,
        StatusCode::FORBIDDEN,
        &format!("Bearer error=\"insufficient_scope\", scope=\"mcp:tools mcp:admin\", resource_metadata=\"{META}\""),
    );
    // 401s name the required scopes too (MCP 2025-11-25), so clients ask for them
    let err = auth
        .authenticate(&HeaderMap::new(), false)
        .await
        .unwrap_err();
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &format!("Bearer scope=\"mcp:tools mcp:admin\", resource_metadata=\"{META}\""),
    );
    let expired = with(good_claims(), "exp", json!(now() - 120));
    let err = refusal(&auth, &key.sign(&expired)).await;
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &format!(
            "Bearer error=\"invalid_token\", error_description=\"the token has expired\", \
             scope=\"mcp:tools mcp:admin\", resource_metadata=\"{META}\""
        ),
    );
    // scp as an array is read too
    let scp = with(good_claims(), "scp", json!(["mcp:admin"]));
    let p = auth
        .authenticate(&bearer(&key.sign(&scp)), false)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p.scopes, ["mcp:tools", "mcp:admin"]);
}

#[tokio::test]
async fn no_token_gets_the_challenge_without_an_error_code() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let err = auth
        .authenticate(&HeaderMap::new(), true)
        .await
        .unwrap_err();
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &format!("Bearer resource_metadata=\"{META}\""),
    );
    let err = refusal(&auth, "not-a-jwt").await;
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        &invalid("the token is not a well-formed JWT"),
    );
}

#[tokio::test]
async fn hmac_tokens_are_refused_whatever_the_secret() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let secret = key.jwk["x"].as_str().unwrap().as_bytes(); // the public key as the "secret"
    let token = jsonwebtoken::encode(
        &header,
        &good_claims(),
        &EncodingKey::from_secret(secret).unwrap(),
    )
    .unwrap();
    let err = refusal(&auth, &token).await;
    assert!(
        matches!(
            err,
            AuthError::InvalidToken {
                reason: TokenRejection::Algorithm(Algorithm::HS256),
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unsigned_tokens_are_refused() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let claims = b64url(good_claims().to_string().as_bytes());
    for alg in ["none", "None", "NONE"] {
        let header = b64url(format!(r#"{{"alg":"{alg}","kid":"k1"}}"#).as_bytes());
        for token in [format!("{header}.{claims}."), format!("{header}.{claims}")] {
            let err = refusal(&auth, &token).await;
            assert!(
                matches!(
                    err,
                    AuthError::InvalidToken {
                        reason: TokenRejection::Malformed(_),
                        ..
                    }
                ),
                "{token}: {err:?}"
            );
        }
    }
    // the same claims, signed, pass: the refusal is the missing signature
    let signed = key.sign(&good_claims());
    assert_eq!(signed.split('.').nth(1), Some(claims.as_str()), "{signed}");
    assert!(auth.authenticate(&bearer(&signed), false).await.is_ok());
}

#[tokio::test]
async fn the_scheme_is_case_insensitive_for_jwts() {
    let key = TestKey::es256("k1");
    let (auth, _dir) = oauth(&[&key], None).await;
    let token = key.sign(&good_claims());
    for scheme in ["bearer", "BEARER"] {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("{scheme} {token}")).unwrap(),
        );
        assert!(auth.authenticate(&h, false).await.is_ok(), "{scheme}");
    }
    // and a JWT may come as a subprotocol on an upgrade
    let mut h = HeaderMap::new();
    let offer = format!("mcp.resume.v1, mcp.auth.{token}");
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_str(&offer).unwrap(),
    );
    assert!(auth.authenticate(&h, true).await.is_ok());
    assert!(matches!(
        auth.authenticate(&h, false).await,
        Err(AuthError::Missing { .. })
    ));
}

#[tokio::test]
async fn the_static_token() {
    let auth = Authenticator::new(AuthConfig::Bearer("s3cret".into()))
        .await
        .unwrap();
    for v in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static(v));
        let p = auth.authenticate(&h, false).await.unwrap().unwrap();
        assert_eq!(p.subject, Principal::STATIC_BEARER, "{v}");
    }
    let err = refusal(&auth, "s3cre").await;
    assert_refused(
        err,
        StatusCode::UNAUTHORIZED,
        "Bearer error=\"invalid_token\", error_description=\"the token does not match\"",
    );
    let err = auth
        .authenticate(&HeaderMap::new(), false)
        .await
        .unwrap_err();
    assert_refused(err, StatusCode::UNAUTHORIZED, "Bearer");
    let mut h = HeaderMap::new();
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static("mcp.resume.v1, mcp.auth.s3cret"),
    );
    assert!(auth.authenticate(&h, true).await.unwrap().is_some());
    assert!(auth.authenticate(&h, false).await.is_err());
    assert!(auth.metadata_router().is_none());
    // an empty configured token matches nothing, and is refused at setup
    assert!(Authenticator::bearer("")
        .authenticate(&bearer(""), false)
        .await
        .is_err());
    assert!(matches!(
        Authenticator::new(AuthConfig::Bearer(String::new())).await,
        Err(AuthSetupError::EmptyToken)
    ));
}

#[tokio::test]
async fn off_lets_everything_through() {
    let auth = Authenticator::new(AuthConfig::None).await.unwrap();
    assert!(!auth.is_enabled());
    assert_eq!(
        auth.authenticate(&HeaderMap::new(), false).await.unwrap(),
        None
    );
    assert_eq!(
        Authenticator::default()
            .authenticate(&bearer("x"), false)
            .await
            .unwrap(),
        None
    );
}
