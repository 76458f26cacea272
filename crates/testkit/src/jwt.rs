//! An OAuth issuer of our own for tests: an Ed25519 key made from fresh random
//! bytes, its JWKS, and access tokens signed with it.

use std::time::{SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

/// A signing key and the JWKS that publishes it (key id `k1`).
pub struct TestIssuer {
    key: EncodingKey,
    /// The JWKS document, as JSON text.
    pub jwks: String,
    /// The `iss` every token carries.
    pub issuer: String,
    /// The `aud` every token carries.
    pub audience: String,
}

impl TestIssuer {
    /// A new key for `issuer`, signing tokens for `audience`.
    pub fn new(issuer: &str, audience: &str) -> Self {
        // PKCS#8 (RFC 8410) around a random 32-byte Ed25519 seed.
        let mut der = vec![
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).expect("the OS random source");
        der.extend_from_slice(&seed);
        let key = EncodingKey::from_ed_der(&der);
        let mut jwk = serde_json::to_value(
            Jwk::from_encoding_key(&key, Algorithm::EdDSA).expect("a JWK of an Ed25519 key"),
        )
        .expect("a JWK is JSON");
        jwk["kid"] = "k1".into();
        Self {
            key,
            jwks: json!({"keys": [jwk]}).to_string(),
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
        }
    }

    /// An access token for `sub` with `scope` (space-separated), valid for five minutes.
    pub fn token(&self, sub: &str, scope: &str) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some("k1".into());
        let claims = json!({
            "iss": self.issuer, "aud": self.audience, "sub": sub, "scope": scope,
            "iat": now, "exp": now + 300,
        });
        jsonwebtoken::encode(&header, &claims, &self.key).expect("signing with our own key")
    }
}
