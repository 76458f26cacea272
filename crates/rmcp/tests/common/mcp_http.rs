//! A minimal MCP client over reqwest for the tests: POSTs, `initialize`,
//! and SSE events read until a condition holds.

use std::time::Duration;

use mcp_resume_proto::sse::SseParser;
use serde_json::{json, Value};

/// A POST of `body` to `url` accepting JSON and SSE, with the session id if any.
pub fn post(
    http: &reqwest::Client,
    url: &str,
    sid: Option<&str>,
    body: Value,
) -> reqwest::RequestBuilder {
    let mut rb = http
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .json(&body);
    if let Some(s) = sid {
        rb = rb.header("mcp-session-id", s);
    }
    rb
}

/// A stateless-era (MCP 2026-07-28) request: `params` with the `_meta`
/// (declaring `capabilities`), and the SEP-2243 headers (`Mcp-Name` when
/// `name` is given). Returns the answer: JSON, or the response an SSE body
/// carries.
pub async fn stateless(
    url: &str,
    id: u64,
    method: &str,
    name: Option<&str>,
    mut params: Value,
    capabilities: Value,
) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-tests", "version": "1"}
    });
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method);
    if let Some(n) = name {
        rb = rb.header("mcp-name", n);
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let text = rb
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    answer_in(&text, id)
}

/// The answer to request `id` in a POST's body: the JSON, or the message
/// with that id in an SSE body.
fn answer_in(text: &str, id: u64) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("no answer to {id} in {text}"))
    })
}

/// `initialize` (declaring sampling and elicitation) and
/// `notifications/initialized`; answered as JSON or (rmcp's own service) SSE.
pub async fn init(http: &reqwest::Client, url: &str) -> String {
    let resp = post(
        http,
        url,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}, "elicitation": {}},
        "clientInfo": {"name": "test", "version": "0"}}}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let body = answer_in(&resp.text().await.unwrap(), 0);
    assert_eq!(body["result"]["protocolVersion"], "2025-11-25", "{body}");
    let resp = post(
        http,
        url,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(resp.status(), 202);
    sid
}

/// Reads SSE events (id, JSON) from `resp` until `stop` says so; a JSON
/// answer is one message without an id.
pub async fn read_until(
    resp: &mut reqwest::Response,
    mut stop: impl FnMut(&Value) -> bool,
) -> Vec<(String, Value)> {
    let mut got = Vec::new();
    let json = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json {
        // A call that only answered: its response, as JSON (no event id).
        let mut body = Vec::new();
        while let Some(c) = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .expect("no answer")
            .unwrap()
        {
            body.extend_from_slice(&c);
        }
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert!(stop(&v), "the JSON answer {v} is not what was awaited");
        got.push((String::new(), v));
        return got;
    }
    let mut parser = SseParser::new();
    loop {
        let chunk = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("stuck after {got:?}"))
            .unwrap();
        let Some(chunk) = chunk else {
            panic!("the stream ended after {got:?}");
        };
        for e in parser.feed(&chunk) {
            if e.data.is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(&e.data).unwrap();
            let done = stop(&v);
            got.push((e.id.unwrap_or_default(), v));
            if done {
                return got;
            }
        }
    }
}

/// A request POSTed to `url` in session `sid`, its JSON answer.
pub async fn rpc(http: &reqwest::Client, url: &str, sid: &str, body: Value) -> Value {
    post(http, url, Some(sid), body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `GET url` in session `sid` without a cursor: its standalone stream,
/// which must be opened.
pub async fn listen(http: &reqwest::Client, url: &str, sid: &str) -> reqwest::Response {
    stream(http, url, sid, None).await
}

/// `GET url` with `Last-Event-ID: cursor`: a resume, which must be accepted.
pub async fn resume(
    http: &reqwest::Client,
    url: &str,
    sid: &str,
    cursor: &str,
) -> reqwest::Response {
    stream(http, url, sid, Some(cursor)).await
}

/// `GET url` in session `sid`, from `cursor` if any: must answer 200.
async fn stream(
    http: &reqwest::Client,
    url: &str,
    sid: &str,
    cursor: Option<&str>,
) -> reqwest::Response {
    let mut get = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid);
    if let Some(cursor) = cursor {
        get = get.header("last-event-id", cursor);
    }
    let resp = get.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp
}
