//! What the auth tests share: keys made at test time (an ES256 and an
//! Ed25519 key from fresh random bytes, their JWKs derived by `jsonwebtoken`
//! itself), tokens signed with them, and assertions on refusals.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

pub(super) const ISS: &str = "https://auth.example.com";
pub(super) const AUD: &str = "https://mcp.example.com/mcp";
pub(super) const META: &str = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";

/// A private key of ours and its public JWK.
pub(super) struct TestKey {
    alg: Algorithm,
    kid: String,
    private: EncodingKey,
    pub jwk: Value,
}

impl TestKey {
    /// A P-256 key: PKCS#8 (RFC 5208) around a SEC1 ECPrivateKey holding 32
    /// random bytes (top bit cleared, so below the group order).
    pub fn es256(kid: &str) -> Self {
        let mut d = random32();
        d[0] &= 0x7f;
        let mut der = vec![
            0x30, 0x41, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d,
            0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x27,
            0x30, 0x25, 0x02, 0x01, 0x01, 0x04, 0x20,
        ];
        der.extend_from_slice(&d);
        Self::new(Algorithm::ES256, kid, EncodingKey::from_ec_der(&der))
    }

    /// The committed test-only RSA key (RSA keys take too long to make per
    /// test), made once with `openssl genrsa -traditional 2048 | openssl rsa
    /// -traditional -outform DER` (PKCS#1 DER); `alg` RS256 or PS256.
    pub fn rsa(alg: Algorithm, kid: &str) -> Self {
        let der = include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/auth-test-rsa2048.pkcs1.der"
        ));
        Self::new(alg, kid, EncodingKey::from_rsa_der(der))
    }

    /// An Ed25519 key: PKCS#8 (RFC 8410) around a random 32-byte seed.
    pub fn ed25519(kid: &str) -> Self {
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend_from_slice(&random32());
        Self::new(Algorithm::EdDSA, kid, EncodingKey::from_ed_der(&der))
    }

    fn new(alg: Algorithm, kid: &str, private: EncodingKey) -> Self {
        let mut jwk = serde_json::to_value(Jwk::from_encoding_key(&private, alg).unwrap()).unwrap();
        jwk["kid"] = kid.into();
        jwk["use"] = "sig".into();
        Self {
            alg,
            kid: kid.to_owned(),
            private,
            jwk,
        }
    }

    /// A token with these claims, signed by this key, naming its kid.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.private).unwrap()
    }

    /// As [`TestKey::sign`], naming another kid (or none).
    pub fn sign_as(&self, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &self.private).unwrap()
    }
}

pub(super) fn random32() -> [u8; 32] {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).unwrap();
    b
}

/// Unpadded base64url (RFC 4648 5), to hand-craft tokens no library would sign.
pub(super) fn b64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

pub(super) fn jwks(keys: &[&TestKey]) -> String {
    json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() }).to_string()
}

pub(super) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Claims that pass every check, with `scope` "mcp:tools".
pub(super) fn good_claims() -> Value {
    json!({
        "iss": ISS, "aud": AUD, "sub": "alice", "scope": "mcp:tools",
        "iat": now(), "exp": now() + 300,
    })
}

pub(super) fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

pub(super) fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    h
}

/// An OAuth authenticator over a JWKS file holding `keys`; the tempdir lives as long as it.
pub(super) async fn oauth(
    keys: &[&TestKey],
    scope: Option<&str>,
) -> (Authenticator, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, jwks(keys)).unwrap();
    let mut config = OAuthConfig::new(ISS, AUD, JwksSource::File(path));
    config.scope = scope.map(str::to_owned);
    (
        Authenticator::new(AuthConfig::OAuth(config)).await.unwrap(),
        dir,
    )
}

/// Asserts the refusal's status, challenge and body.
pub(super) fn assert_refused(err: AuthError, status: StatusCode, challenge: &str) {
    let resp = err.into_response();
    assert_eq!(resp.status(), status);
    let got = resp.headers()[header::WWW_AUTHENTICATE]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(got, challenge);
    let ct = resp.headers()[header::CONTENT_TYPE].to_str().unwrap();
    assert_eq!(ct, "application/json");
}

pub(super) fn invalid(description: &str) -> String {
    format!(
        "Bearer error=\"invalid_token\", error_description=\"{description}\", resource_metadata=\"{META}\""
    )
}

pub(super) async fn refusal(auth: &Authenticator, token: &str) -> AuthError {
    auth.authenticate(&bearer(token), false).await.unwrap_err()
}
