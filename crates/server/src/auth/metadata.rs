//! OAuth 2.0 Protected Resource Metadata (RFC 9728): how an MCP client that
//! got a 401 finds the authorization server to get a token from.

use std::sync::Arc;

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use reqwest::Url;
use serde::Serialize;

/// The well-known path of RFC 9728 3.
pub const WELL_KNOWN_PATH: &str = "/.well-known/oauth-protected-resource";

/// The metadata document, as served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProtectedResourceMetadata {
    /// This server's resource URI, the audience its tokens must name.
    pub resource: String,
    /// The issuers whose tokens are accepted.
    pub authorization_servers: Vec<String>,
    /// Scopes a client should ask for, when this server requires some.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// Only the `Authorization` header (RFC 6750 2.1).
    pub bearer_methods_supported: Vec<String>,
}

/// The metadata URL of RFC 9728 3.1 for a resource: the well-known path
/// inserted between the host and the resource's path, so several resources
/// on one host each have their own (`https://h/mcp` ->
/// `https://h/.well-known/oauth-protected-resource/mcp`).
pub(crate) fn metadata_url(resource: &Url) -> String {
    let mut url = resource.clone();
    url.set_path(&format!("{WELL_KNOWN_PATH}{}", suffix(resource)));
    url.set_query(None);
    url.to_string()
}

/// The paths the metadata is served on: the RFC 9728 one with the resource's
/// path, and the bare well-known path that clients try as a fallback.
pub(crate) fn served_paths(resource: &Url) -> Vec<String> {
    let mut paths = vec![WELL_KNOWN_PATH.to_owned()];
    let suffix = suffix(resource);
    if !suffix.is_empty() {
        paths.push(format!("{WELL_KNOWN_PATH}{suffix}"));
    }
    paths
}

/// The resource's path, `""` for the root.
fn suffix(resource: &Url) -> &str {
    match resource.path() {
        "/" => "",
        p => p,
    }
}

/// A router serving `meta` on `paths`, to merge into the application
/// outside any authentication layer.
pub(crate) fn router(meta: ProtectedResourceMetadata, paths: &[String]) -> Router {
    let meta = Arc::new(meta);
    let mut router = Router::new();
    for path in paths {
        let meta = meta.clone();
        router = router.route(path, get(move || serve(meta.clone())));
    }
    router
}

async fn serve(meta: Arc<ProtectedResourceMetadata>) -> Response {
    let mut resp = axum::Json(&*meta).into_response();
    // Public by design; browser-based MCP clients read it cross-origin.
    resp.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn the_well_known_path_goes_before_the_resource_path() {
        assert_eq!(
            metadata_url(&url("https://mcp.example.com/mcp")),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url(&url("http://127.0.0.1:8080/a/b")),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource/a/b"
        );
        assert_eq!(
            metadata_url(&url("https://mcp.example.com")),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn both_paths_are_served_for_a_resource_with_a_path() {
        assert_eq!(
            served_paths(&url("https://h/mcp")),
            [WELL_KNOWN_PATH, "/.well-known/oauth-protected-resource/mcp"]
        );
        assert_eq!(served_paths(&url("https://h/")), [WELL_KNOWN_PATH]);
    }

    #[test]
    fn scopes_supported_is_left_out_when_empty() {
        let meta = ProtectedResourceMetadata {
            resource: "https://h/mcp".into(),
            authorization_servers: vec!["https://as".into()],
            scopes_supported: vec![],
            bearer_methods_supported: vec!["header".into()],
        };
        assert_eq!(
            serde_json::to_value(&meta).unwrap(),
            serde_json::json!({
                "resource": "https://h/mcp",
                "authorization_servers": ["https://as"],
                "bearer_methods_supported": ["header"],
            })
        );
    }
}
