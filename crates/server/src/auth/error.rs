//! Why a request or a configuration is refused, and the HTTP responses of
//! RFC 6750 3 (with the `resource_metadata` parameter of RFC 9728 5.1).

use std::path::PathBuf;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mcp_resume_proto::ErrorBody;

/// A request the authenticator refuses; its response carries the
/// `WWW-Authenticate` challenge a client needs to find the authorization
/// server and the scopes to ask it for.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// 401 without an error code (RFC 6750 3.1): the request carries no bearer token.
    #[error("this endpoint requires a bearer token")]
    Missing {
        /// Where to get a token.
        challenge: Challenge,
    },
    /// 401 `invalid_token`: the token is wrong, expired, forged or not for us.
    #[error("the bearer token was refused")]
    InvalidToken {
        /// What exactly was wrong.
        #[source]
        reason: TokenRejection,
        /// Where to get a better token.
        challenge: Challenge,
    },
    /// 403 `insufficient_scope`: a valid token without the scopes this server
    /// requires (named in `challenge.scope`).
    #[error("the token lacks a scope this server requires")]
    InsufficientScope {
        /// Where to get a token with the scopes.
        challenge: Challenge,
    },
}

/// The parameters of a challenge besides the error: what the MCP
/// authorization spec (2025-11-25) has servers tell clients on every 401/403.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// The scopes required, space-separated (RFC 6750 3), so a client asks for
    /// no more than it needs.
    pub scope: Option<Arc<str>>,
    /// URL of the protected resource metadata (RFC 9728 5.1), when OAuth is on.
    pub resource_metadata: Option<Arc<str>>,
}

/// Why a presented token is not accepted; the `error_description` of a 401.
#[derive(Debug, thiserror::Error)]
pub enum TokenRejection {
    /// `Authorization: Bearer` with nothing after it.
    #[error("the token is empty")]
    Empty,
    /// The static bearer token differs.
    #[error("the token does not match")]
    Mismatch,
    /// Not three base64url parts with a JSON header and claims.
    #[error("the token is not a well-formed JWT")]
    Malformed(#[source] jsonwebtoken::errors::Error),
    /// HMAC, or an algorithm no key of the authorization server is for.
    #[error("the token's algorithm {0:?} is not accepted")]
    Algorithm(jsonwebtoken::Algorithm),
    /// The `kid` is not in the key set, even after a refetch.
    #[error("no key with kid {0:?} in the authorization server's key set")]
    UnknownKey(String),
    /// The signature does not verify against the key.
    #[error("the token's signature does not verify")]
    Signature,
    /// `exp` is past, beyond the leeway.
    #[error("the token has expired")]
    Expired,
    /// `nbf` is ahead, beyond the leeway.
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another authorization server")]
    Issuer,
    /// `aud` does not contain this server's resource URI.
    #[error("the token is not meant for this resource")]
    Audience,
    /// One of `exp`, `iss`, `aud`, `sub` is absent.
    #[error("the token lacks the {0:?} claim")]
    MissingClaim(String),
    /// Anything else the JWT library refused (a claim of the wrong type, a bad key).
    #[error("the token could not be verified")]
    Verification(#[source] jsonwebtoken::errors::Error),
}

impl From<jsonwebtoken::errors::Error> for TokenRejection {
    fn from(e: jsonwebtoken::errors::Error) -> Self {
        use jsonwebtoken::errors::ErrorKind as K;
        match e.kind() {
            K::InvalidSignature => Self::Signature,
            K::ExpiredSignature => Self::Expired,
            K::ImmatureSignature => Self::NotYetValid,
            K::InvalidIssuer => Self::Issuer,
            K::InvalidAudience => Self::Audience,
            K::MissingRequiredClaim(c) => Self::MissingClaim(c.clone()),
            K::InvalidToken | K::Base64(_) | K::Json(_) | K::Utf8(_) => Self::Malformed(e),
            _ => Self::Verification(e),
        }
    }
}

/// A configuration the authenticator cannot start with; the server should not start either.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    /// An empty static bearer token would lock every client out.
    #[error("the bearer token is empty")]
    EmptyToken,
    /// The issuer or the resource URI is not an absolute http(s) URL.
    #[error("{what} {value:?} is not an absolute http(s) URL without a fragment")]
    InvalidUrl {
        /// `issuer` or `audience`.
        what: &'static str,
        /// The configured value.
        value: String,
    },
    /// The key set could not be loaded.
    #[error("cannot load the JWKS")]
    Jwks(#[from] JwksError),
}

/// Why a JWKS could not be loaded, at start or on a refetch.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    /// The file is missing or unreadable.
    #[error("cannot read the JWKS file {path:?}")]
    Read {
        /// The configured file.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP client could not be built (TLS setup).
    #[error("cannot build the HTTP client for the JWKS")]
    Client(#[source] reqwest::Error),
    /// The URL could not be fetched.
    #[error("cannot fetch the JWKS from {url}")]
    Fetch {
        /// The configured URL.
        url: String,
        /// The transport failure.
        #[source]
        source: reqwest::Error,
    },
    /// The URL answered with a non-2xx status.
    #[error("the JWKS URL {url} answered {status}")]
    Status {
        /// The configured URL.
        url: String,
        /// What it answered.
        status: StatusCode,
    },
    /// The document is larger than any sane key set.
    #[error("the JWKS from {from} is over {limit} bytes")]
    TooLarge {
        /// The file or URL.
        from: String,
        /// The limit.
        limit: usize,
    },
    /// Not a JSON object with a `keys` array.
    #[error("the JWKS from {from} is not a JSON object with a \"keys\" array")]
    Parse {
        /// The file or URL.
        from: String,
        /// The JSON failure.
        #[source]
        source: serde_json::Error,
    },
    /// No key is an RSA, P-256, P-384 or Ed25519 signature key.
    #[error("the JWKS from {from} has no usable signature key (RSA, EC P-256/P-384 or Ed25519)")]
    NoUsableKeys {
        /// The file or URL.
        from: String,
    },
}

impl AuthError {
    /// The HTTP status: 401, or 403 for a missing scope.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InsufficientScope { .. } => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// The `WWW-Authenticate` value of RFC 6750 3 with `resource_metadata` (RFC 9728 5.1).
    pub fn challenge(&self) -> String {
        let mut params: Vec<(&str, String)> = Vec::new();
        let challenge = match self {
            Self::Missing { challenge } => challenge,
            Self::InvalidToken { reason, challenge } => {
                params.push(("error", "invalid_token".into()));
                params.push(("error_description", reason.to_string()));
                challenge
            }
            Self::InsufficientScope { challenge } => {
                params.push(("error", "insufficient_scope".into()));
                challenge
            }
        };
        if let Some(scope) = &challenge.scope {
            params.push(("scope", scope.to_string()));
        }
        if let Some(url) = &challenge.resource_metadata {
            params.push(("resource_metadata", url.to_string()));
        }
        let mut out = String::from("Bearer");
        for (i, (name, value)) in params.iter().enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            out.push_str(name);
            out.push_str("=\"");
            out.push_str(&quotable(value));
            out.push('"');
        }
        out
    }

    fn code(&self) -> &'static str {
        match self {
            Self::InsufficientScope { .. } => "insufficient-scope",
            _ => "unauthorized",
        }
    }

    fn message(&self) -> String {
        match self {
            Self::InvalidToken { reason, .. } => format!("{self}: {reason}"),
            Self::InsufficientScope { challenge } => match &challenge.scope {
                Some(scope) => format!("{self}: {scope}"),
                None => self.to_string(),
            },
            _ => self.to_string(),
        }
    }
}

/// RFC 6750 3 allows `%x20-21 / %x23-5B / %x5D-7E` inside the quotes: no
/// quote, no backslash, nothing outside printable ASCII.
fn quotable(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        tracing::debug!(error = %self, reason = ?std::error::Error::source(&self).map(|s| s.to_string()), "request refused");
        let body = ErrorBody::new(self.code(), self.message());
        let mut resp = (self.status(), axum::Json(body)).into_response();
        let challenge =
            HeaderValue::from_str(&self.challenge()).unwrap_or(HeaderValue::from_static("Bearer"));
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp";

    fn challenge(scope: Option<&str>) -> Challenge {
        Challenge {
            scope: scope.map(Into::into),
            resource_metadata: Some(META.into()),
        }
    }

    #[test]
    fn missing_has_no_error_code() {
        let e = AuthError::Missing {
            challenge: challenge(None),
        };
        assert_eq!(e.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            e.challenge(),
            format!("Bearer resource_metadata=\"{META}\"")
        );
        let scoped = AuthError::Missing {
            challenge: challenge(Some("mcp:tools")),
        };
        assert_eq!(
            scoped.challenge(),
            format!("Bearer scope=\"mcp:tools\", resource_metadata=\"{META}\"")
        );
        let bare = AuthError::Missing {
            challenge: Challenge::default(),
        };
        assert_eq!(bare.challenge(), "Bearer");
    }

    #[test]
    fn invalid_token_names_the_reason() {
        let e = AuthError::InvalidToken {
            reason: TokenRejection::Expired,
            challenge: challenge(None),
        };
        assert_eq!(
            e.challenge(),
            format!(
                "Bearer error=\"invalid_token\", error_description=\"the token has expired\", \
                 resource_metadata=\"{META}\""
            )
        );
        assert_eq!(
            e.message(),
            "the bearer token was refused: the token has expired"
        );
    }

    #[test]
    fn insufficient_scope_is_403_with_the_scope() {
        let e = AuthError::InsufficientScope {
            challenge: Challenge {
                scope: Some("mcp:tools mcp:read".into()),
                resource_metadata: None,
            },
        };
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            e.challenge(),
            "Bearer error=\"insufficient_scope\", scope=\"mcp:tools mcp:read\""
        );
        assert_eq!(e.code(), "insufficient-scope");
        assert_eq!(
            e.message(),
            "the token lacks a scope this server requires: mcp:tools mcp:read"
        );
    }

    #[test]
    fn descriptions_cannot_break_the_header() {
        let e = AuthError::InvalidToken {
            reason: TokenRejection::UnknownKey("a\"b\\c\u{e9}\n".into()),
            challenge: Challenge::default(),
        };
        let c = e.challenge();
        assert!(HeaderValue::from_str(&c).is_ok(), "{c}");
        // the description stays one quoted-string up to its own end
        let desc = c.split("error_description=\"").nth(1).unwrap();
        assert!(desc.split('"').next().unwrap().ends_with("key set"), "{c}");
    }
}
