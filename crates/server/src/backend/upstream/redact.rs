//! The upstream as errors and logs name it: its origin, and what failed
//! with its causes, never its credentials, path or query.

/// A request to the upstream that failed, as a client or a log line may
/// read it: the upstream named by [`origin`] only, then what failed with
/// its causes ("error sending request: client error (Connect): tcp connect
/// error: Connection refused"), none of which carries the URL. reqwest's own
/// text names the whole URL, and its query or path may hold a credential
/// (`?api_key=...`).
pub(super) fn describe(e: reqwest::Error, url: &reqwest::Url) -> String {
    let text = chain(&e.without_url());
    format!("{}: {}", origin(url), scrub(text, url))
}

/// The upstream as errors name it: scheme, host and port, nothing of its
/// credentials, path or query.
pub(super) fn origin(url: &reqwest::Url) -> String {
    let host = url.host_str().unwrap_or("?");
    match url.port_or_known_default() {
        Some(port) => format!("{}://{host}:{port}", url.scheme()),
        None => format!("{}://{host}", url.scheme()),
    }
}

/// `text` with anything of `url` beyond its origin taken out, should a
/// cause have quoted it.
fn scrub(mut text: String, url: &reqwest::Url) -> String {
    let secret = [
        Some(url.as_str()),
        url.query(),
        url.password(),
        Some(url.username()),
        Some(url.path()).filter(|p| p.len() > 1),
    ];
    for s in secret.into_iter().flatten().filter(|s| !s.is_empty()) {
        text = text.replace(s, "…");
    }
    text
}

/// `e` with its causes ("error sending request: ...: Connection refused"):
/// reqwest's own message alone does not say what failed.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
