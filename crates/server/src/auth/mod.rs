//! Who may use the server: nobody checked, one static bearer token, or OAuth
//! 2.1 access tokens (MCP authorization, revision 2025-11-25, where the MCP
//! server is a resource server).
//!
//! - [`Authenticator::authenticate`] turns a request's headers into a
//!   [`Principal`] or an [`AuthError`] whose response is the 401/403 with the
//!   `WWW-Authenticate` challenge of RFC 6750 and RFC 9728;
//! - [`Authenticator::metadata_router`] serves the protected resource
//!   metadata (RFC 9728) that the challenge points clients to;
//! - [`require`] is the same check as an axum middleware.
//!
//! ```no_run
//! use mcp_resume_server::auth::{AuthConfig, Authenticator, OAuthConfig};
//!
//! # async fn run(mcp: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! let auth = Authenticator::new(AuthConfig::OAuth(OAuthConfig::new(
//!     "https://auth.example.com",
//!     "https://mcp.example.com/mcp",
//!     "https://auth.example.com/jwks".parse()?,
//! )))
//! .await?;
//! let mut app = mcp.layer(axum::middleware::from_fn_with_state(
//!     auth.clone(),
//!     mcp_resume_server::auth::require,
//! ));
//! if let Some(meta) = auth.metadata_router() {
//!     app = app.merge(meta);
//! }
//! # Ok(()) }
//! ```

mod credentials;
mod error;
#[cfg(test)]
mod http_tests;
mod jwks;
#[cfg(test)]
mod jwks_tests;
mod jwt;
mod metadata;
#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use reqwest::Url;

pub use error::{AuthError, AuthSetupError, Challenge, JwksError, TokenRejection};
pub use jwks::JwksSource;
pub use metadata::{ProtectedResourceMetadata, WELL_KNOWN_PATH};

pub(crate) use credentials::offered_protocols;
use credentials::Presented;
use jwt::{JwtVerifier, Refusal};

/// How requests are authenticated.
#[derive(Debug, Clone, Default)]
pub enum AuthConfig {
    /// Every request is let through (loopback development).
    #[default]
    None,
    /// One shared token, as `Authorization: Bearer <token>`.
    Bearer(String),
    /// OAuth 2.1 JWT access tokens from one authorization server.
    OAuth(OAuthConfig),
}

/// The authorization server whose tokens are accepted, and what they must say.
///
/// Non-exhaustive: build it with [`OAuthConfig::new`] and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OAuthConfig {
    /// The `iss` tokens must carry, exactly; also the authorization server the
    /// metadata names.
    pub issuer: String,
    /// This server's resource URI (RFC 8707), e.g. `https://mcp.example.com/mcp`:
    /// `aud` must contain it, and the metadata URL is derived from it.
    pub audience: String,
    /// Where the issuer's public keys are.
    pub jwks: JwksSource,
    /// Scopes every token must carry (space-separated), if any; announced in
    /// the metadata and in 403 challenges.
    pub scope: Option<String>,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// Least time between two JWKS refetches triggered by unknown `kid`s, so
    /// junk tokens cannot make us hammer the authorization server.
    pub jwks_refetch_interval: Duration,
}

impl OAuthConfig {
    /// A configuration with no required scope, 30 s of leeway and at most one
    /// JWKS refetch a minute.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, jwks: JwksSource) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks,
            scope: None,
            leeway: Duration::from_secs(30),
            jwks_refetch_interval: Duration::from_secs(60),
        }
    }
}

/// Who made a request, for handlers (e.g. to bind sessions to their owner)
/// and logs; [`require`] puts it in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's `sub`, or [`Principal::STATIC_BEARER`].
    pub subject: String,
    /// The token's scopes (`scope` and `scp` claims); empty for a static token.
    pub scopes: Vec<String>,
    /// The token's `exp`; `None` for a static token. A WebSocket outlives the
    /// handshake that checked it, so it should close when this passes.
    pub expires_at: Option<SystemTime>,
}

impl Principal {
    /// The subject of whoever holds the static bearer token.
    pub const STATIC_BEARER: &'static str = "bearer";
}

/// The configured check, cheap to clone into every request's state.
#[derive(Clone, Default)]
pub struct Authenticator {
    mode: Arc<Mode>,
}

#[derive(Default)]
enum Mode {
    #[default]
    Off,
    Bearer(String),
    OAuth(Box<OAuth>),
}

struct OAuth {
    verifier: JwtVerifier,
    /// The required scopes and the metadata URL, for every refusal.
    challenge: Challenge,
    metadata: ProtectedResourceMetadata,
    metadata_paths: Vec<String>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        let mode = match &*self.mode {
            Mode::Off => "off",
            Mode::Bearer(_) => "bearer",
            Mode::OAuth(_) => "oauth",
        };
        f.debug_struct("Authenticator")
            .field("mode", &mode)
            .finish()
    }
}

impl Authenticator {
    /// Checks the configuration and, for OAuth, loads the JWKS: a server
    /// that cannot verify tokens should fail at start, not on every request.
    pub async fn new(config: AuthConfig) -> Result<Self, AuthSetupError> {
        let mode = match config {
            AuthConfig::None => Mode::Off,
            AuthConfig::Bearer(token) if token.is_empty() => {
                return Err(AuthSetupError::EmptyToken)
            }
            AuthConfig::Bearer(token) => Mode::Bearer(token),
            AuthConfig::OAuth(c) => Mode::OAuth(Box::new(OAuth::new(c).await?)),
        };
        Ok(Self {
            mode: Arc::new(mode),
        })
    }

    /// The static-token check without the async setup (for `ServerConfig::bearer_token`).
    /// An empty token matches nothing.
    pub fn bearer(token: impl Into<String>) -> Self {
        Self {
            mode: Arc::new(Mode::Bearer(token.into())),
        }
    }

    /// Whether requests are checked at all.
    pub fn is_enabled(&self) -> bool {
        !matches!(*self.mode, Mode::Off)
    }

    /// The principal of a request, `None` when authentication is off.
    ///
    /// `allow_subprotocol_token`: also accept the token as an offered
    /// WebSocket subprotocol `mcp.auth.<token>` (pass true for upgrades only).
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        allow_subprotocol_token: bool,
    ) -> Result<Option<Principal>, AuthError> {
        let challenge = match &*self.mode {
            Mode::Off => return Ok(None),
            Mode::Bearer(_) => Challenge::default(),
            Mode::OAuth(o) => o.challenge.clone(),
        };
        let invalid = |reason| AuthError::InvalidToken {
            reason,
            challenge: challenge.clone(),
        };
        let token = match credentials::presented(headers, allow_subprotocol_token) {
            Presented::Nothing => return Err(AuthError::Missing { challenge }),
            Presented::Empty => return Err(invalid(TokenRejection::Empty)),
            Presented::Token(t) => t,
        };
        match &*self.mode {
            Mode::Off => Ok(None),
            Mode::Bearer(want) => {
                if !want.is_empty() && credentials::same_token(token, want) {
                    Ok(Some(Principal {
                        subject: Principal::STATIC_BEARER.to_owned(),
                        scopes: Vec::new(),
                        expires_at: None,
                    }))
                } else {
                    Err(invalid(TokenRejection::Mismatch))
                }
            }
            Mode::OAuth(o) => match o.verifier.verify(token).await {
                Ok(p) => Ok(Some(p)),
                Err(Refusal::Invalid(reason)) => Err(invalid(reason)),
                Err(Refusal::Scope) => Err(AuthError::InsufficientScope { challenge }),
            },
        }
    }

    /// The metadata routes (RFC 9728) for OAuth, `None` otherwise; merge them
    /// outside the authentication layer, since clients read them without a token.
    pub fn metadata_router(&self) -> Option<Router> {
        match &*self.mode {
            Mode::OAuth(o) => Some(metadata::router(o.metadata.clone(), &o.metadata_paths)),
            _ => None,
        }
    }

    /// The metadata document for OAuth, e.g. to serve it elsewhere.
    pub fn metadata(&self) -> Option<&ProtectedResourceMetadata> {
        match &*self.mode {
            Mode::OAuth(o) => Some(&o.metadata),
            _ => None,
        }
    }

    /// The URL the 401 challenges point to (`resource_metadata`), for OAuth.
    pub fn resource_metadata_url(&self) -> Option<&str> {
        match &*self.mode {
            Mode::OAuth(o) => o.challenge.resource_metadata.as_deref(),
            _ => None,
        }
    }
}

impl OAuth {
    async fn new(c: OAuthConfig) -> Result<Self, AuthSetupError> {
        absolute_url("issuer", &c.issuer)?;
        let resource = absolute_url("audience", &c.audience)?;
        let required = c
            .scope
            .as_deref()
            .map(jwt::split_scopes)
            .unwrap_or_default();
        let keys = jwks::KeyStore::load(c.jwks, c.jwks_refetch_interval).await?;
        let metadata = ProtectedResourceMetadata {
            resource: c.audience.clone(),
            authorization_servers: vec![c.issuer.clone()],
            scopes_supported: required.clone(),
            bearer_methods_supported: vec!["header".into()],
        };
        let challenge = Challenge {
            scope: (!required.is_empty()).then(|| required.join(" ").into()),
            resource_metadata: Some(metadata::metadata_url(&resource).into()),
        };
        Ok(Self {
            verifier: JwtVerifier::new(keys, c.issuer, c.audience, c.leeway, required),
            challenge,
            metadata,
            metadata_paths: metadata::served_paths(&resource),
        })
    }
}

fn absolute_url(what: &'static str, value: &str) -> Result<Url, AuthSetupError> {
    let bad = || AuthSetupError::InvalidUrl {
        what,
        value: value.to_owned(),
    };
    let url = Url::parse(value).map_err(|_| bad())?;
    if !matches!(url.scheme(), "https" | "http") || url.fragment().is_some() || !url.has_host() {
        return Err(bad());
    }
    Ok(url)
}

/// Axum middleware: lets a request through with its [`Principal`] in the
/// extensions, or answers with the [`AuthError`]. A token in a subprotocol is
/// accepted on a `GET` with `Upgrade` (a WebSocket handshake) only.
///
/// `router.layer(axum::middleware::from_fn_with_state(auth, require))`
pub async fn require(State(auth): State<Authenticator>, mut req: Request, next: Next) -> Response {
    let upgrade = req.method() == Method::GET && req.headers().contains_key(header::UPGRADE);
    match auth.authenticate(req.headers(), upgrade).await {
        Ok(principal) => {
            if let Some(p) = principal {
                req.extensions_mut().insert(p);
            }
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}
