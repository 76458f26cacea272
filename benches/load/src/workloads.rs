//! The workloads, each against any Streamable HTTP MCP server.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_resume_client::sse::SseParser;
use serde_json::{json, Value};

use crate::caller::{all_round_trips, in_new_sessions};

const ACCEPT: &str = "application/json, text/event-stream";

/// A raw session: its id and the client it was made with.
#[derive(Clone)]
pub struct Session {
    pub http: reqwest::Client,
    pub url: String,
    pub id: String,
}

/// `initialize` + `notifications/initialized` with a client of its own.
pub async fn session(url: &str) -> Session {
    session_with(
        reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap(),
        url,
    )
    .await
}

/// `initialize` + `notifications/initialized` over `http`.
pub async fn session_with(http: reqwest::Client, url: &str) -> Session {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"load","version":"1"}}});
    let resp = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", ACCEPT)
        .body(init.to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "initialize: {}", resp.status());
    let id = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let _ = resp.bytes().await;
    let s = Session {
        http,
        url: url.to_owned(),
        id,
    };
    s.post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    s
}

impl Session {
    pub async fn post(&self, body: &Value) -> String {
        let resp = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT)
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-06-18")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        String::from_utf8_lossy(&resp.bytes().await.unwrap_or_default()).into_owned()
    }

    pub async fn call(&self, id: u64, tool: &str, args: Value) -> String {
        self.post(&json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":args}})).await
    }

    pub async fn get(&self, last_event_id: Option<&str>) -> reqwest::Response {
        let mut rb = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(l) = last_event_id {
            rb = rb.header("last-event-id", l);
        }
        rb.send().await.unwrap()
    }
}

/// (a) `tools/call echo` round trips per second over `conns` connections.
pub async fn echo_rps(url: &str, conns: usize, duration: Duration) -> f64 {
    echo(url, conns, duration).await.rps
}

/// What (a) measured: round trips per second and the median round trip.
pub struct Echo {
    pub rps: f64,
    pub p50_ms: f64,
}

/// (a) with the time of every answered call kept, for its median, each
/// session's calls through a [`Caller`](crate::caller::Caller) of their own.
pub async fn echo(url: &str, conns: usize, duration: Duration) -> Echo {
    let callers = in_new_sessions(url, conns).await;
    let body = |i| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello"}}}}}}"#
        )
    };
    let label = format!("echo {url}");
    let (mut took, elapsed) =
        all_round_trips(&label, callers, duration, body, &[b"hello", b"result"]).await;
    let rps = took.len() as f64 / elapsed.as_secs_f64();
    took.sort_by(|a, b| a.total_cmp(b));
    let p50_ms = took.get(took.len() / 2).copied().unwrap_or(f64::NAN);
    Echo { rps, p50_ms }
}

/// One received notification of `emit`: its SSE id and its `i`.
pub struct Got {
    pub id: String,
    pub i: u64,
}

/// Reads `emit` notifications from an SSE response until `n` or `idle` of silence.
pub async fn read_emits(resp: reqwest::Response, n: usize, idle: Duration) -> Vec<Got> {
    let mut parser = SseParser::new();
    let mut body = resp.bytes_stream();
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let chunk = match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(Ok(c))) => c,
            _ => break,
        };
        for ev in parser.feed(&chunk) {
            // A cheap scan instead of a full JSON parse: the reader's cost is the same
            // for every server and should not be what the benchmark measures.
            if !ev.data.contains("notifications/message") {
                continue;
            }
            if let Some(i) = field_u64(&ev.data, "\"i\":") {
                got.push(Got {
                    id: ev.id.unwrap_or_default(),
                    i,
                });
            }
        }
    }
    got
}

/// The unsigned number after `key` in `text`.
fn field_u64(text: &str, key: &str) -> Option<u64> {
    let rest = &text[text.find(key)? + key.len()..];
    let rest = rest.trim_start();
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// `n` notifications from the stream `resp`, resuming from the last id
/// each time the server ends the stream early (at most 50 times); what it
/// got and how many resumes that took.
async fn read_emits_resuming(s: Session, resp: reqwest::Response, n: usize) -> (Vec<Got>, usize) {
    let mut got = read_emits(resp, n, Duration::from_secs(10)).await;
    let mut resumes = 0;
    while got.len() < n && resumes < 50 {
        let Some(last) = got.last().map(|g| g.id.clone()) else {
            break;
        };
        let resp = s.get(Some(&last)).await;
        if !resp.status().is_success() {
            break;
        }
        resumes += 1;
        got.extend(read_emits(resp, n - got.len(), Duration::from_secs(10)).await);
    }
    (got, resumes)
}

/// (b) notifications/s to one SSE reader, and (c) the resume from the first event.
pub struct Delivery {
    pub per_sec: f64,
    pub delivered: usize,
    /// How often the stream ended (or went silent for 10 s) early and the
    /// reader resumed from its last id, as any SSE client does (a reader
    /// that fell behind is ended with `reader-lagged` by `serve`,
    /// docs/protocol.md 4.6).
    pub lagged_resumes: usize,
    pub resume_ms: f64,
    pub resume_complete: bool,
    pub resume_in_order: bool,
    pub resumed: usize,
}

pub async fn delivery(url: &str, count: usize) -> Delivery {
    let s = session(url).await;
    let resp = s.get(None).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let start = Instant::now();
    let reader = tokio::spawn(read_emits_resuming(s.clone(), resp, count));
    s.call(1, "emit", json!({"count": count, "interval_ms": 0}))
        .await;
    let (got, lagged_resumes) = reader.await.unwrap();
    let per_sec = got.len() as f64 / start.elapsed().as_secs_f64();
    let delivered = got.len();
    let (resume_ms, resume_complete, resume_in_order, resumed) = match got.first() {
        Some(first) => {
            // Some servers allow one GET stream per session: let the first one close.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let t = Instant::now();
            let resp = s.get(Some(&first.id)).await;
            if !resp.status().is_success() {
                eprintln!("   (c) the resume was answered {}", resp.status());
            }
            let again = read_emits(resp, count - 1, Duration::from_secs(3)).await;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let is: Vec<u64> = again.iter().map(|g| g.i).collect();
            let complete = is.len() == count - 1;
            let mut sorted = is.clone();
            sorted.sort();
            let in_order =
                is == sorted && is.windows(2).all(|w| w[1] == w[0] + 1) && is.first() == Some(&2);
            (ms, complete, in_order, is.len())
        }
        None => (f64::NAN, false, false, 0),
    };
    Delivery {
        per_sec,
        delivered,
        lagged_resumes,
        resume_ms,
        resume_complete,
        resume_in_order,
        resumed,
    }
}

/// (d) RSS per session with one idle GET stream, in bytes. With `h2`, every
/// session and stream shares one HTTP/2 connection (prior knowledge, h2c).
pub async fn rss_per_idle_session(
    server: &crate::servers::Server,
    sessions: usize,
    h2: bool,
) -> f64 {
    // One HTTP/2 connection per 100 sessions (servers cap concurrent streams per connection).
    let clients: Vec<reqwest::Client> = if h2 {
        (0..sessions.div_ceil(100))
            .map(|_| {
                reqwest::Client::builder()
                    .http2_prior_knowledge()
                    .build()
                    .unwrap()
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut next_client = 0usize;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss_kib();
    let mut held = Vec::with_capacity(sessions);
    for chunk in (0..sessions).collect::<Vec<_>>().chunks(50) {
        let mut tasks = Vec::new();
        for _ in chunk {
            let url = server.url.clone();
            let shared = clients.get(next_client / 100).cloned();
            next_client += 1;
            tasks.push(tokio::spawn(async move {
                let s = match shared {
                    Some(http) => session_with(http, &url).await,
                    None => session(&url).await,
                };
                let resp = s.get(None).await;
                (s, resp)
            }));
        }
        for t in tasks {
            held.push(t.await.unwrap());
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.rss_kib();
    drop(held);
    (after.saturating_sub(before) * 1024) as f64 / sessions as f64
}
