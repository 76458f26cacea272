//! The round-trip workloads' client (echo, and the stateless and session
//! calls of `stateless`): one HTTP/1.1 connection of hyper's own per
//! caller, and nothing else between the loop and the socket.
//!
//! Why not `reqwest`, which the other workloads use: a round trip through
//! it (its pool, its redirect and header handling, a `String` body) cost
//! this 2-core machine more than `serve` spends answering one, so echo
//! rates measured the client, not the servers (benches/results/paths.md:
//! bare hyper and `serve` at the same rate). This caller does what wrk
//! does per request: writes one prebuilt request, reads one response whole.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Request;
use hyper_util::rt::TokioIo;

/// One connection to a server's MCP endpoint, and the headers every POST
/// on it carries besides `Host`, `Content-Type` and `Accept`.
pub struct Caller {
    send: SendRequest<Full<Bytes>>,
    authority: String,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

/// What went wrong with one call: the connection (then reopen it) or the
/// answer (then count it as not answered).
#[derive(Debug)]
pub enum CallError {
    /// The connection failed or was closed by the server.
    Connection(String),
    /// The server answered, but not with a success.
    Status(hyper::StatusCode),
}

impl Caller {
    /// A connection to `url` for MCP session `session` (2025-06-18).
    pub async fn session(url: &str, session: &str) -> Result<Self, CallError> {
        let headers = [
            ("mcp-session-id", session),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        Self::connect(url, &headers).await
    }

    /// A connection to `url` (`http://HOST:PORT/PATH`), `TCP_NODELAY` set,
    /// whose POSTs carry `headers` too.
    pub async fn connect(url: &str, headers: &[(&'static str, &str)]) -> Result<Self, CallError> {
        let headers = headers
            .iter()
            .map(|&(name, value)| {
                let value = HeaderValue::from_str(value)
                    .map_err(|e| CallError::Connection(format!("{name}: {e}")))?;
                Ok((HeaderName::from_static(name), value))
            })
            .collect::<Result<Vec<_>, CallError>>()?;
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| CallError::Connection(format!("{url}: {e}")))?;
        let authority = uri
            .authority()
            .ok_or_else(|| CallError::Connection(format!("{url}: no host")))?
            .to_string();
        let path = uri.path().to_owned();
        let tcp = tokio::time::timeout(
            Duration::from_secs(10),
            tokio::net::TcpStream::connect(&authority),
        )
        .await
        .map_err(|_| CallError::Connection(format!("{authority}: connect timed out")))?
        .map_err(|e| CallError::Connection(format!("{authority}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| CallError::Connection(e.to_string()))?;
        tokio::spawn(conn);
        Ok(Self {
            send,
            authority,
            path,
            headers,
        })
    }

    /// POSTs `body` (one JSON-RPC message) and returns the response's body
    /// whole (JSON, or an SSE stream read to its end).
    pub async fn post(&mut self, body: String) -> Result<Bytes, CallError> {
        let mut request = Request::post(self.path.as_str())
            .header("host", self.authority.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(Bytes::from(body)))
            .expect("a valid request");
        for (name, value) in &self.headers {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        let conn = |e: hyper::Error| CallError::Connection(e.to_string());
        self.send.ready().await.map_err(conn)?;
        let response = self.send.send_request(request).await.map_err(conn)?;
        if !response.status().is_success() {
            return Err(CallError::Status(response.status()));
        }
        Ok(response
            .into_body()
            .collect()
            .await
            .map_err(conn)?
            .to_bytes())
    }
}

/// Whether `haystack` contains `needle`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_finds_a_needle_anywhere_and_only_whole() {
        assert!(contains(b"{\"result\":\"hello\"}", b"hello"));
        assert!(contains(b"hello", b"hello"));
        assert!(!contains(b"hell", b"hello"));
        assert!(!contains(b"", b"hello"));
    }
}
