//! Two `rmcp_durable` instances (rmcp's own `StreamableHttpService`) on one
//! Redis: a session initialised on A is used, read and resumed on B; then the
//! official TypeScript and Python SDK clients, behind a proxy that fails over
//! from A to B, see A killed with `kill -9` in the middle of a stream and
//! resume on B, getting every committed event once, in order.
//!
//! The SDK clients are installed by `scripts/test` (pinned in `interop/`); a
//! missing one fails these tests, it never skips them.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::proc::{Instance, Proxy, SdkClient};
use common::{rt, RedisServer};
use mcp_resume_log::EventLog;
use mcp_resume_log::{RedisLog, Retention, StreamKey};
use serde_json::{json, Value};

const PROTOCOL: &str = "2025-06-18";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One parsed SSE event: its id (if any) and its JSON data (if any).
#[derive(Debug)]
struct Sse {
    id: Option<String>,
    data: Option<Value>,
}

fn parse_sse(text: &str) -> Vec<Sse> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| Sse {
            id: block
                .lines()
                .find_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
                .map(str::to_owned),
            data: block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str(d).ok()),
        })
        .collect()
}

/// A raw Streamable HTTP client, to see exactly what rmcp sends.
struct Raw {
    http: reqwest::Client,
    session: String,
}

impl Raw {
    async fn initialize(url: &str) -> Self {
        let http = reqwest::Client::new();
        let resp = http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
                "protocolVersion": PROTOCOL, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}})
                .to_string(),
            )
            .send()
            .await
            .expect("initialize");
        assert_eq!(resp.status(), 200);
        let session = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = resp.text().await;
        let raw = Self { http, session };
        let status = raw
            .post(
                url,
                json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            )
            .await
            .status();
        assert_eq!(status, 202);
        raw
    }

    async fn post(&self, url: &str, body: Value) -> reqwest::Response {
        self.http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", PROTOCOL)
            .body(body.to_string())
            .send()
            .await
            .expect("post")
    }

    /// `tools/call`; returns the result's first text.
    async fn call(&self, url: &str, id: u64, name: &str, args: Value) -> String {
        let body = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}});
        let resp = self.post(url, body).await;
        assert_eq!(resp.status(), 200, "{name} on {url}");
        let text = resp.text().await.unwrap();
        parse_sse(&text)
            .into_iter()
            .filter_map(|e| e.data)
            .find(|d| d["id"] == json!(id))
            .and_then(|d| {
                d["result"]["content"][0]["text"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("no result for {name}: {text}"))
    }

    /// Opens `GET` with `Last-Event-ID` (none if empty): the open response.
    async fn get(&self, url: &str, last: &str) -> reqwest::Response {
        let mut rb = self
            .http
            .get(url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", PROTOCOL);
        if !last.is_empty() {
            rb = rb.header("last-event-id", last);
        }
        rb.send().await.expect("get")
    }
}

/// Reads `resp` until `n` events with data arrived (or 10 s passed).
async fn read_events(resp: &mut reqwest::Response, n: usize) -> Vec<Sse> {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let events: Vec<Sse> = parse_sse(&text)
            .into_iter()
            .filter(|e| e.data.is_some())
            .collect();
        if events.len() >= n {
            return events;
        }
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!(
                "after {} of {n} events: {other:?}; got {text:?}",
                events.len()
            ),
        }
    }
}

/// Reads until the response ends (it must, within 5 s): the whole body.
async fn read_to_end(resp: reqwest::Response) -> String {
    tokio::time::timeout(Duration::from_secs(5), resp.text())
        .await
        .expect("the response ends")
        .expect("a body")
}

fn i_of(e: &Sse) -> u64 {
    e.data.as_ref().unwrap()["params"]["data"]["i"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_session_initialized_on_a_is_used_read_and_resumed_on_b() {
    let redis = RedisServer::start();
    let a = Instance::spawn(&redis.url);
    let b = Instance::spawn(&redis.url);
    rt().block_on(async {
        let s = Raw::initialize(&a.url).await;
        // B restores the session from the log (rmcp replays `initialize`).
        assert_eq!(s.call(&b.url, 2, "echo", json!({"text": "hi"})).await, "hi");
        assert_eq!(
            s.call(&a.url, 3, "emit", json!({"count": 5})).await,
            "emitting 5 notifications"
        );
        // Read on B what A committed, from the start of the standalone stream.
        let mut live = s.get(&b.url, &format!("{}/0/0", s.session)).await;
        assert_eq!(live.status(), 200);
        let got = read_events(&mut live, 5).await;
        assert_eq!(got.iter().map(i_of).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert_eq!(
            got[4].id.as_deref(),
            Some(format!("{}/0/5", s.session).as_str())
        );
        // The replay stays open: what A appends later arrives on B's stream.
        s.call(&a.url, 4, "emit", json!({"count": 3})).await;
        let more = read_events(&mut live, 3).await;
        let count_i = |e: &Sse| {
            (
                e.data.as_ref().unwrap()["params"]["data"]["count"].as_u64(),
                i_of(e),
            )
        };
        assert_eq!(
            more.iter().map(count_i).collect::<Vec<_>>(),
            [(Some(3), 1), (Some(3), 2), (Some(3), 3)]
        );
        assert_eq!(
            more[0].id.as_deref(),
            Some(format!("{}/0/6", s.session).as_str())
        );
        drop(live);
        // Resume on B after event 6: 7 and 8, nothing twice.
        let mut resumed = s.get(&b.url, &format!("{}/0/6", s.session)).await;
        let got = read_events(&mut resumed, 2).await;
        assert_eq!(got.iter().map(i_of).collect::<Vec<_>>(), [2, 3]);
        drop(resumed);
        // Two GETs without Last-Event-ID at once, on A and B: each reads the
        // stream from the log's floor (rmcp's own channel would start both at
        // "now", and give the second a shadow stream that receives nothing).
        let mut first = s.get(&a.url, "").await;
        let mut second = s.get(&b.url, "").await;
        for r in [&mut first, &mut second] {
            assert_eq!(r.status(), 200);
            let all = read_events(r, 8).await;
            assert_eq!(
                all.iter().map(i_of).collect::<Vec<_>>(),
                [1, 2, 3, 4, 5, 1, 2, 3]
            );
        }

        // Ids the store refuses. rmcp answers every refusal (and every store
        // error) the same way: 200, an SSE body with no event, closed at once.
        // Not loud: the client cannot tell it from "nothing new"; only a WARN
        // in the server's log says why.
        let other = Raw::initialize(&b.url).await;
        for bad in [
            format!("{}/0/1", other.session), // another session's stream
            format!("{}/0/99", s.session),    // ahead of the head
            "garbage".to_owned(),
        ] {
            let resp = s.get(&b.url, &bad).await;
            assert_eq!(resp.status(), 200, "{bad}");
            let body = read_to_end(resp).await;
            assert!(
                parse_sse(&body)
                    .iter()
                    .all(|e| e.data.is_none() && e.id.is_none()),
                "{bad}: {body:?}"
            );
        }
    });
}

/// How many of `emit count`'s events the session's standalone stream holds,
/// read from the log itself.
fn committed(redis: &RedisServer, session: &str, count: u64) -> u64 {
    rt().block_on(async {
        let log = RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .expect("connect");
        let evs = log
            .read(session, StreamKey::Session, 0, 100_000)
            .await
            .expect("read");
        evs.iter()
            .filter_map(|e| serde_json::from_slice::<Value>(&e.message).ok())
            .filter(|v| v["params"]["data"]["count"].as_u64() == Some(count))
            .count() as u64
    })
}

fn failover(program: &str, script: &str) {
    let redis = RedisServer::start();
    let mut a = Instance::spawn(&redis.url);
    let b = Instance::spawn(&redis.url);
    let rt = rt();
    let proxy = Proxy::start(&rt, a.addr);
    let mut client = SdkClient::spawn(program, &[script.to_owned(), proxy.url.clone()]);
    let session = client
        .wait_for("SESSION", |l| l.starts_with("SESSION "))
        .trim_start_matches("SESSION ")
        .to_owned();
    let tools = client.wait_for("TOOLS", |l| l.starts_with("TOOLS "));
    assert!(tools.contains("echo") && tools.contains("emit"), "{tools}");
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO ")),
        "ECHO hello"
    );
    // Notifications on A's GET stream, then A dies in the middle of them.
    client.send("emit 60 20");
    client.wait_for("EMITTED", |l| l == "EMITTED");
    client.wait_for("some events", |l| l == "EVENT 60 10");
    // The path to A stalls while A keeps committing, then A dies: what the
    // client missed can only come from B's replay of the log.
    proxy.stall();
    std::thread::sleep(Duration::from_millis(300));
    proxy.switch(b.addr);
    a.kill9();
    client.drain_for(Duration::from_millis(0));
    let seen_before_failover = client.events(60).len() as u64;
    // The client resumes on B on its own; B's own events reach it too.
    client.send("emit 5 0");
    client.wait_for("EMITTED on B", |l| l == "EMITTED");
    client.wait_for("B's events", |l| l == "EVENT 5 5");
    let m = committed(&redis, &session, 60);
    eprintln!(
        "{program}: A committed {m} of emit 60; the client had seen {seen_before_failover} from A"
    );
    assert!(
        m > seen_before_failover,
        "A committed more ({m}) than the client saw from it ({seen_before_failover})"
    );
    let last = format!("EVENT 60 {m}");
    if !client.seen.contains(&last) {
        client.wait_for("the rest of A's emit", |l| l == last);
    }
    client.drain_for(Duration::from_millis(500));
    assert_eq!(
        client.events(60),
        (1..=m).collect::<Vec<_>>(),
        "every event A committed, once, in order"
    );
    assert_eq!(client.events(5), (1..=5).collect::<Vec<_>>());
    client.send("quit");
    drop(rt);
}

#[test]
fn typescript_sdk_client_resumes_on_b_after_kill_9_of_a() {
    let root = root();
    assert!(
        root.join("interop/node/node_modules/@modelcontextprotocol/sdk")
            .exists(),
        "the TypeScript SDK is not installed: run scripts/test (cd interop/node && npm ci)"
    );
    failover(
        "node",
        root.join("interop/node/client.mjs").to_str().unwrap(),
    );
}

#[test]
fn python_sdk_client_resumes_on_b_after_kill_9_of_a() {
    let root = root();
    let python = root.join("interop/python/.venv/bin/python");
    assert!(
        python.exists(),
        "the Python SDK is not installed: run scripts/test (interop/python/.venv)"
    );
    failover(
        python.to_str().unwrap(),
        root.join("interop/python/client.py").to_str().unwrap(),
    );
}
