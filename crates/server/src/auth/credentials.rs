//! Where a request carries its token, and comparing a static one safely.
//!
//! The `Authorization` header (RFC 6750 2.1) with the scheme matched
//! case-insensitively (RFC 9110 11.1: `bearer`, `BEARER`), or, for a WebSocket
//! upgrade whose caller allows it, an offered subprotocol `mcp.auth.<token>`
//! (browsers cannot set headers on a WebSocket).

use axum::http::{header, HeaderMap};
use mcp_resume_proto::AUTH_SUBPROTOCOL_PREFIX;
use subtle::ConstantTimeEq;

/// What a request presents.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Presented<'a> {
    /// No bearer credentials (or another scheme, e.g. `Basic`).
    Nothing,
    /// `Bearer` with an empty token.
    Empty,
    /// A token.
    Token(&'a str),
}

/// The token of the first `Authorization: Bearer` header, else (when
/// `allow_subprotocol`) of the first offered `mcp.auth.` subprotocol.
pub(crate) fn presented(headers: &HeaderMap, allow_subprotocol: bool) -> Presented<'_> {
    let from_header = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(bearer_token);
    if let Some(token) = from_header {
        return if token.is_empty() {
            Presented::Empty
        } else {
            Presented::Token(token)
        };
    }
    if allow_subprotocol {
        let offered =
            offered_protocols(headers).find_map(|p| p.strip_prefix(AUTH_SUBPROTOCOL_PREFIX));
        match offered {
            Some("") => return Presented::Empty,
            Some(token) => return Presented::Token(token),
            None => {}
        }
    }
    Presented::Nothing
}

/// `Bearer <token>` with the scheme in any case; `None` for another scheme.
fn bearer_token(value: &str) -> Option<&str> {
    let value = value.trim_matches(' ');
    let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim_start_matches(' '))
}

/// Equality whose time does not depend on where the first difference is, so
/// a caller cannot guess a static token byte by byte. The length is not
/// secret (it shows in the time of a short compare only).
pub(crate) fn same_token(presented: &str, expected: &str) -> bool {
    presented.as_bytes().ct_eq(expected.as_bytes()).into()
}

/// The subprotocols a request offers, one by one.
pub(crate) fn offered_protocols(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_scheme_is_case_insensitive() {
        for v in [
            "Bearer abc",
            "bearer abc",
            "BEARER abc",
            "bEaReR   abc",
            " Bearer abc ",
        ] {
            let h = headers(&[(header::AUTHORIZATION, v)]);
            assert_eq!(presented(&h, false), Presented::Token("abc"), "{v:?}");
        }
    }

    #[test]
    fn other_schemes_and_empty_tokens() {
        let basic = headers(&[(header::AUTHORIZATION, "Basic YTpi")]);
        assert_eq!(presented(&basic, false), Presented::Nothing);
        let glued = headers(&[(header::AUTHORIZATION, "Bearerabc")]);
        assert_eq!(presented(&glued, false), Presented::Nothing);
        let empty = headers(&[(header::AUTHORIZATION, "Bearer ")]);
        assert_eq!(presented(&empty, false), Presented::Empty);
        let bare = headers(&[(header::AUTHORIZATION, "Bearer")]);
        assert_eq!(presented(&bare, false), Presented::Empty);
        assert_eq!(presented(&HeaderMap::new(), true), Presented::Nothing);
    }

    #[test]
    fn the_subprotocol_counts_only_when_allowed() {
        let h = headers(&[(
            header::SEC_WEBSOCKET_PROTOCOL,
            "mcp.resume.v1, mcp.auth.abc",
        )]);
        assert_eq!(presented(&h, false), Presented::Nothing);
        assert_eq!(presented(&h, true), Presented::Token("abc"));
        let empty = headers(&[(header::SEC_WEBSOCKET_PROTOCOL, "mcp.auth.")]);
        assert_eq!(presented(&empty, true), Presented::Empty);
    }

    #[test]
    fn the_header_wins_over_the_subprotocol() {
        let h = headers(&[
            (header::SEC_WEBSOCKET_PROTOCOL, "mcp.auth.sub"),
            (header::AUTHORIZATION, "bearer hdr"),
        ]);
        assert_eq!(presented(&h, true), Presented::Token("hdr"));
    }

    #[test]
    fn same_token_compares_whole_tokens() {
        assert!(same_token("s3cret", "s3cret"));
        assert!(!same_token("s3cre", "s3cret"));
        assert!(!same_token("s3cret!", "s3cret"));
        assert!(!same_token("S3cret", "s3cret"));
        assert!(!same_token("", "s3cret"));
    }
}
