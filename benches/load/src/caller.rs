//! The round-trip workloads' client (echo, and the stateless and session
//! calls of `stateless`): one HTTP/1.1 connection of hyper's own per
//! caller, and nothing else between the loop and the socket.
//!
//! Why not `reqwest`, which the other workloads use: a round trip through
//! it (its pool, its redirect and header handling, a `String` body) cost
//! this 2-core machine more than `serve` spends answering one, so echo
//! rates measured the client, not the servers (benches/results/paths.md:
//! bare hyper and `serve` at the same rate). This caller does what wrk
//! does per request: writes one request, reads its response whole. It
//! follows no redirect: a server that answers the endpoint with one counts
//! as refusing every call.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderName, HeaderValue};
use hyper::Request;
use hyper_util::rt::TokioIo;

/// How long after its loop's deadline a call may still be waited for: a
/// server that never answers ends the loop, it does not hang the run.
const LATE: Duration = Duration::from_secs(5);

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
    /// The URL, a header, the connection, or the server closed it.
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
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
        Ok(Self {
            send: open(&authority).await?,
            authority,
            path,
            headers,
        })
    }

    /// A new connection in place of this one (the server closed it).
    pub async fn reopen(&mut self) -> Result<(), CallError> {
        self.send = open(&self.authority).await?;
        Ok(())
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

/// An HTTP/1.1 connection to `authority` (`HOST:PORT`), driven by a task of
/// its own that ends with the connection or its last sender.
async fn open(authority: &str) -> Result<SendRequest<Full<Bytes>>, CallError> {
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect(authority),
    )
    .await
    .map_err(|_| CallError::Connection(format!("{authority}: connect timed out")))?
    .map_err(|e| CallError::Connection(format!("{authority}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| CallError::Connection(e.to_string()))?;
    tokio::spawn(conn);
    Ok(send)
}

/// Round trips through `caller` until `deadline`: call `i`'s body is
/// `body(i)`, and it counts as answered when its response is a success
/// containing every one of `expect`. Returns each answered call's time in
/// ms; prints, under `label`, what did not count (refused, answered
/// without what was expected, connections reopened) and why it stopped
/// early, if it did.
async fn round_trips(
    label: &str,
    mut caller: Caller,
    deadline: Instant,
    body: impl Fn(u64) -> String,
    expect: &[&[u8]],
) -> Vec<f64> {
    let mut took = Vec::new();
    let (mut refused, mut unexpected, mut reopened) = (0u64, 0u64, 0u64);
    let mut first_refusal = None;
    let late = tokio::time::Instant::from_std(deadline + LATE);
    let mut i = 1;
    while Instant::now() < deadline {
        let t = Instant::now();
        let Ok(answer) = tokio::time::timeout_at(late, caller.post(body(i))).await else {
            eprintln!("{label}: a call still unanswered {LATE:?} after the deadline");
            break;
        };
        match answer {
            Ok(b) if expect.iter().all(|e| contains(&b, e)) => {
                took.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            Ok(_) => unexpected += 1,
            Err(CallError::Status(status)) => {
                refused += 1;
                first_refusal.get_or_insert(status);
            }
            // Closed by the server: reopen it, or give up if that fails.
            Err(CallError::Connection(e)) => {
                reopened += 1;
                if let Err(again) = caller.reopen().await {
                    eprintln!("{label}: {e}; reopening: {again:?}");
                    break;
                }
            }
        }
        i += 1;
    }
    if refused + unexpected + reopened > 0 {
        eprintln!(
            "{label}: {refused} calls refused (the first with {first_refusal:?}), \
             {unexpected} answered without what was expected, {reopened} connections reopened"
        );
    }
    took
}

/// `conns` callers, each in a new MCP session of its own (opened with
/// `reqwest`, as the other workloads open theirs).
pub async fn in_new_sessions(url: &str, conns: usize) -> Vec<Caller> {
    let mut callers = Vec::new();
    for _ in 0..conns {
        let s = crate::workloads::session(url).await;
        let caller = Caller::session(url, &s.id)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e:?}"));
        callers.push(caller);
    }
    callers
}

/// [`round_trips`] through every one of `callers` at once for `duration`:
/// each answered call's time (ms), and how long they all took.
pub async fn all_round_trips(
    label: &str,
    callers: Vec<Caller>,
    duration: Duration,
    body: fn(u64) -> String,
    expect: &'static [&'static [u8]],
) -> (Vec<f64>, Duration) {
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|caller| {
            let label = label.to_owned();
            tokio::spawn(async move { round_trips(&label, caller, deadline, body, expect).await })
        })
        .collect();
    let mut took = Vec::new();
    for t in tasks {
        took.extend(t.await.unwrap_or_default());
    }
    (took, start.elapsed())
}

/// Whether `haystack` contains `needle` (an empty one is everywhere).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_finds_a_needle_anywhere_and_only_whole() {
        assert!(contains(b"{\"result\":\"hello\"}", b"hello"));
        assert!(contains(b"hello", b"hello"));
        assert!(contains(b"hello", b""));
        assert!(!contains(b"hell", b"hello"));
        assert!(!contains(b"", b"hello"));
    }
}
