//! JWT access tokens (RFC 9068) checked the way an OAuth 2.1 resource server
//! must: a signature by one of the issuer's public keys, `iss` equal to the
//! issuer, `aud` containing this server's resource URI (RFC 8707, so a token
//! minted for another server is useless here), `exp`/`nbf` with a small
//! leeway, and optionally the scopes this server requires.

use std::collections::HashSet;
use std::time::{Duration, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

use super::error::TokenRejection;
use super::jwks::{has_kid, KeyStore, VerifyKey};
use super::Principal;

/// Why a token is not enough.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// 401: the token itself is bad.
    Invalid(TokenRejection),
    /// 403: a good token without the required scopes.
    Scope,
}

impl From<TokenRejection> for Refusal {
    fn from(r: TokenRejection) -> Self {
        Self::Invalid(r)
    }
}

/// The claims we read beyond those `jsonwebtoken` validates.
#[derive(Deserialize)]
struct Claims {
    /// Checked here: `jsonwebtoken` reads the claims into this type before
    /// it checks that required ones are present.
    #[serde(default)]
    sub: Option<String>,
    /// Present and in the future: `jsonwebtoken` checked it.
    #[serde(default)]
    exp: Option<u64>,
    /// RFC 8693 / RFC 9068: space-separated.
    #[serde(default)]
    scope: Option<String>,
    /// Some issuers (Azure AD, Okta) put scopes in `scp`, as an array or a string.
    #[serde(default)]
    scp: Option<Scp>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    One(String),
}

impl Claims {
    fn scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut add = |s: &str| {
            for word in s.split_whitespace() {
                if !out.iter().any(|o| o == word) {
                    out.push(word.to_owned());
                }
            }
        };
        if let Some(s) = &self.scope {
            add(s);
        }
        match &self.scp {
            Some(Scp::List(list)) => list.iter().for_each(|s| add(s)),
            Some(Scp::One(s)) => add(s),
            None => {}
        }
        out
    }
}

/// Checks JWTs against one issuer, one audience and its key set.
pub(crate) struct JwtVerifier {
    keys: KeyStore,
    issuer: String,
    audience: String,
    leeway: Duration,
    required_scopes: Vec<String>,
}

impl JwtVerifier {
    /// A verifier over loaded keys.
    pub fn new(
        keys: KeyStore,
        issuer: String,
        audience: String,
        leeway: Duration,
        required_scopes: Vec<String>,
    ) -> Self {
        Self {
            keys,
            issuer,
            audience,
            leeway,
            required_scopes,
        }
    }

    /// The token's principal, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(TokenRejection::Malformed)?;
        let alg = header.alg;
        if matches!(alg, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512) {
            // A shared secret would let anyone holding it mint tokens for us.
            return Err(TokenRejection::Algorithm(alg).into());
        }
        let mut keys = self.keys.current();
        if let Some(kid) = &header.kid {
            if !has_kid(&keys, kid) {
                keys = self.keys.refetch_for(kid).await;
                if !has_kid(&keys, kid) {
                    return Err(TokenRejection::UnknownKey(kid.clone()).into());
                }
            }
        }
        let candidates: Vec<&VerifyKey> = keys
            .iter()
            .filter(|k| header.kid.is_none() || k.kid == header.kid)
            .filter(|k| k.algorithms.contains(&alg))
            .collect();
        if candidates.is_empty() {
            return Err(TokenRejection::Algorithm(alg).into());
        }
        let validation = self.validation(alg);
        let mut last = TokenRejection::Signature;
        for key in candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.key, &validation) {
                Ok(data) => return self.admit(data.claims),
                // Without a kid, another key of the set may be the one.
                Err(e) => match TokenRejection::from(e) {
                    TokenRejection::Signature => continue,
                    other => {
                        last = other;
                        break;
                    }
                },
            }
        }
        Err(last.into())
    }

    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.leeway = self.leeway.as_secs();
        v.validate_exp = true;
        v.validate_nbf = true;
        v.validate_aud = true;
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v
    }

    fn admit(&self, claims: Claims) -> Result<Principal, Refusal> {
        let scopes = claims.scopes();
        let subject = claims.sub.filter(|s| !s.is_empty());
        let Some(subject) = subject else {
            return Err(TokenRejection::MissingClaim("sub".into()).into());
        };
        if !self
            .required_scopes
            .iter()
            .all(|r| scopes.iter().any(|s| s == r))
        {
            return Err(Refusal::Scope);
        }
        Ok(Principal {
            subject,
            scopes,
            expires_at: claims.exp.map(|exp| UNIX_EPOCH + Duration::from_secs(exp)),
        })
    }
}

/// The distinct space-separated scopes of a configured `scope` string.
pub(crate) fn split_scopes(scope: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    scope
        .split_whitespace()
        .filter(|s| seen.insert(*s))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(json: &str) -> Claims {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn scopes_come_from_scope_and_scp() {
        assert_eq!(
            claims(r#"{"sub":"a","scope":"mcp:tools  mcp:read"}"#).scopes(),
            ["mcp:tools", "mcp:read"]
        );
        assert_eq!(
            claims(r#"{"sub":"a","scp":["mcp:tools","x"]}"#).scopes(),
            ["mcp:tools", "x"]
        );
        assert_eq!(
            claims(r#"{"sub":"a","scp":"mcp:tools x"}"#).scopes(),
            ["mcp:tools", "x"]
        );
        assert_eq!(
            claims(r#"{"sub":"a","scope":"x","scp":["x","y"]}"#).scopes(),
            ["x", "y"]
        );
        assert!(claims(r#"{"sub":"a"}"#).scopes().is_empty());
    }

    #[test]
    fn configured_scopes_split_on_spaces() {
        assert_eq!(
            split_scopes(" mcp:tools mcp:read mcp:tools "),
            ["mcp:tools", "mcp:read"]
        );
        assert!(split_scopes("  ").is_empty());
    }
}
