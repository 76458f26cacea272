//! The authorization server's public keys (a JWKS, RFC 7517), loaded from a
//! file or fetched from a URL at start, and loaded again, at most once per
//! interval, when a token names a `kid` we do not know (key rotation).

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyOperations, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::error::JwksError;

/// Largest JWKS document accepted; real ones are a few kilobytes.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// Time a JWKS fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the authorization server's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS document on disk (for an issuer whose keys are deployed with the server).
    File(PathBuf),
    /// The issuer's `jwks_uri`, fetched over https (or http, e.g. on loopback).
    Url(String),
}

impl FromStr for JwksSource {
    type Err = std::convert::Infallible;

    /// `http://…` and `https://…` are URLs, anything else a path: one CLI flag takes both.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        Ok(
            if lower.starts_with("https://") || lower.starts_with("http://") {
                Self::Url(s.to_owned())
            } else {
                Self::File(PathBuf::from(s))
            },
        )
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => write!(f, "{}", p.display()),
            Self::Url(u) => f.write_str(u),
        }
    }
}

/// One public key and the algorithms it may verify.
pub(crate) struct VerifyKey {
    /// The JWK's `kid`, if any.
    pub kid: Option<String>,
    /// Its `alg` if it names one, else every algorithm of its type and curve.
    pub algorithms: Vec<Algorithm>,
    /// The key itself.
    pub key: DecodingKey,
}

/// The current key set, and the means to load it again.
pub(crate) struct KeyStore {
    source: JwksSource,
    http: Option<reqwest::Client>,
    keys: RwLock<Arc<[VerifyKey]>>,
    /// When a refetch last ran; `None` until the first (the load at start does not count).
    last_refetch: tokio::sync::Mutex<Option<Instant>>,
    min_refetch_interval: Duration,
}

impl KeyStore {
    /// Loads the key set; fails when it cannot be read or has no usable key.
    pub async fn load(
        source: JwksSource,
        min_refetch_interval: Duration,
    ) -> Result<Self, JwksError> {
        let http = match &source {
            JwksSource::Url(url) => {
                if url.to_ascii_lowercase().starts_with("http://") {
                    tracing::warn!(%url, "the JWKS is fetched over plain http");
                }
                Some(
                    reqwest::Client::builder()
                        .timeout(FETCH_TIMEOUT)
                        .build()
                        .map_err(JwksError::Client)?,
                )
            }
            JwksSource::File(_) => None,
        };
        let keys = read(&source, http.as_ref()).await?;
        tracing::info!(source = %source, keys = keys.len(), "JWKS loaded");
        Ok(Self {
            source,
            http,
            keys: RwLock::new(keys.into()),
            last_refetch: tokio::sync::Mutex::new(None),
            min_refetch_interval,
        })
    }

    /// The keys in force now.
    pub fn current(&self) -> Arc<[VerifyKey]> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// For a `kid` not in [`KeyStore::current`]: loads the set again unless
    /// that was done less than the interval ago, and returns the keys in force
    /// after. Concurrent callers wait for one load instead of each loading.
    pub async fn refetch_for(&self, kid: &str) -> Arc<[VerifyKey]> {
        let mut last = self.last_refetch.lock().await;
        let keys = self.current();
        if has_kid(&keys, kid) {
            return keys; // another request's refetch found it meanwhile
        }
        if last.is_some_and(|t| t.elapsed() < self.min_refetch_interval) {
            return keys;
        }
        *last = Some(Instant::now());
        match read(&self.source, self.http.as_ref()).await {
            Ok(fresh) => {
                tracing::info!(source = %self.source, keys = fresh.len(), %kid, "JWKS refetched for an unknown kid");
                let fresh: Arc<[VerifyKey]> = fresh.into();
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = fresh.clone();
                fresh
            }
            Err(e) => {
                tracing::warn!(source = %self.source, error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "JWKS refetch failed; keeping the old keys");
                keys
            }
        }
    }
}

/// Whether a key with this `kid` is in the set.
pub(crate) fn has_kid(keys: &[VerifyKey], kid: &str) -> bool {
    keys.iter().any(|k| k.kid.as_deref() == Some(kid))
}

async fn read(
    source: &JwksSource,
    http: Option<&reqwest::Client>,
) -> Result<Vec<VerifyKey>, JwksError> {
    let bytes = match (source, http) {
        (JwksSource::File(path), _) => {
            let bytes = tokio::fs::read(path)
                .await
                .map_err(|source| JwksError::Read {
                    path: path.clone(),
                    source,
                })?;
            if bytes.len() > MAX_JWKS_BYTES {
                return Err(too_large(source));
            }
            bytes
        }
        (JwksSource::Url(url), Some(client)) => fetch(client, url).await?,
        (JwksSource::Url(_), None) => unreachable!("a URL source always has a client"),
    };
    parse(&bytes, &source.to_string())
}

async fn fetch(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, JwksError> {
    let fetch_err = |source| JwksError::Fetch {
        url: url.to_owned(),
        source,
    };
    let mut resp = client
        .get(url)
        .header(
            reqwest::header::ACCEPT,
            "application/json, application/jwk-set+json",
        )
        .send()
        .await
        .map_err(fetch_err)?;
    if !resp.status().is_success() {
        return Err(JwksError::Status {
            url: url.to_owned(),
            status: resp.status(),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(fetch_err)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_large(&JwksSource::Url(url.to_owned())));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn too_large(source: &JwksSource) -> JwksError {
    JwksError::TooLarge {
        from: source.to_string(),
        limit: MAX_JWKS_BYTES,
    }
}

/// The usable signature keys of a JWKS document; the others are skipped
/// with a warning, so one exotic key does not take the whole set down.
pub(crate) fn parse(bytes: &[u8], from: &str) -> Result<Vec<VerifyKey>, JwksError> {
    #[derive(Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let doc: Document = serde_json::from_slice(bytes).map_err(|source| JwksError::Parse {
        from: from.to_owned(),
        source,
    })?;
    let keys: Vec<VerifyKey> = doc
        .keys
        .into_iter()
        .enumerate()
        .filter_map(|(i, raw)| match usable(raw) {
            Ok(key) => Some(key),
            Err(why) => {
                tracing::warn!(%from, index = i, %why, "JWKS key skipped");
                None
            }
        })
        .collect();
    if keys.is_empty() {
        return Err(JwksError::NoUsableKeys {
            from: from.to_owned(),
        });
    }
    Ok(keys)
}

fn usable(raw: serde_json::Value) -> Result<VerifyKey, String> {
    let jwk: Jwk = serde_json::from_value(raw).map_err(|e| format!("not a JWK: {e}"))?;
    if matches!(
        jwk.common.public_key_use,
        Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
    ) {
        return Err("not a signature key (\"use\")".into());
    }
    if let Some(ops) = &jwk.common.key_operations {
        if !ops.contains(&KeyOperations::Verify) {
            return Err("not a verification key (\"key_ops\")".into());
        }
    }
    let family: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return Err(format!("unsupported curve {:?}", p.curve)),
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            &[Algorithm::EdDSA]
        }
        AlgorithmParameters::OctetKeyPair(p) => {
            return Err(format!("unsupported curve {:?}", p.curve))
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err("a symmetric key: a resource server verifies with public keys only".into())
        }
        _ => return Err("unsupported key type".into()),
    };
    let algorithms = match jwk.common.key_algorithm {
        None => family.to_vec(),
        Some(named) => {
            let alg = Algorithm::from_str(&named.to_string())
                .map_err(|_| format!("unsupported \"alg\" {named}"))?;
            if !family.contains(&alg) {
                return Err(format!("\"alg\" {named} does not fit the key type"));
            }
            vec![alg]
        }
    };
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("unusable key material: {e}"))?;
    Ok(VerifyKey {
        kid: jwk.common.key_id,
        algorithms,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EC: &str = r#"{"kty":"EC","crv":"P-256","kid":"ec","use":"sig",
        "x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}"#;

    fn doc(keys: &[&str]) -> Vec<u8> {
        format!(r#"{{"keys":[{}]}}"#, keys.join(",")).into_bytes()
    }

    #[test]
    fn sources_parse_from_one_flag() {
        assert_eq!(
            "https://as.example.com/jwks".parse::<JwksSource>().unwrap(),
            JwksSource::Url("https://as.example.com/jwks".into())
        );
        assert_eq!(
            "HTTP://127.0.0.1:9/jwks".parse::<JwksSource>().unwrap(),
            JwksSource::Url("HTTP://127.0.0.1:9/jwks".into())
        );
        assert_eq!(
            "/etc/mcp/jwks.json".parse::<JwksSource>().unwrap(),
            JwksSource::File("/etc/mcp/jwks.json".into())
        );
    }

    #[test]
    fn an_ec_key_verifies_es256_only() {
        let keys = parse(&doc(&[EC]), "t").unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("ec"));
        assert_eq!(keys[0].algorithms, vec![Algorithm::ES256]);
    }

    #[test]
    fn symmetric_encryption_and_exotic_keys_are_skipped() {
        let oct = r#"{"kty":"oct","kid":"hs","k":"c2VjcmV0"}"#;
        let enc = EC.replace("\"sig\"", "\"enc\"");
        let wrap = r#"{"kty":"RSA","kid":"w","key_ops":["wrapKey"],"n":"AQAB","e":"AQAB"}"#;
        let unknown = r#"{"kty":"XYZ","kid":"x"}"#;
        let misfit = EC.replace("\"use\":\"sig\"", "\"alg\":\"RS256\"");
        let keys = parse(&doc(&[oct, &enc, wrap, unknown, &misfit, EC]), "t").unwrap();
        assert_eq!(keys.len(), 1, "only the plain EC key is usable");
        let err = parse(&doc(&[oct, &enc]), "t").err().unwrap();
        assert!(matches!(err, JwksError::NoUsableKeys { .. }), "{err:?}");
    }

    #[test]
    fn a_named_alg_narrows_the_key() {
        let rsa = r#"{"kty":"RSA","kid":"r","alg":"PS256","n":"sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw","e":"AQAB"}"#;
        let keys = parse(&doc(&[rsa]), "t").unwrap();
        assert_eq!(keys[0].algorithms, vec![Algorithm::PS256]);
    }

    #[test]
    fn not_a_jwks_is_a_parse_error() {
        for bad in [&b"[]"[..], b"{\"key\":[]}", b"not json"] {
            let err = parse(bad, "t").err().unwrap();
            assert!(matches!(err, JwksError::Parse { .. }), "{err:?}");
        }
    }
}
