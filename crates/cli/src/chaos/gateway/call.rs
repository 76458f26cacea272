//! One call as a careful client makes it: POSTed to an instance picked at
//! random, its SSE response read until the answer, cut on purpose where the
//! plan says and resumed with `Last-Event-ID` on an instance picked at
//! random, resumed the same way when a connection is lost (an instance
//! killed), all within one bound. What it saw is handed to the judge.

use std::time::Duration;

use futures_util::StreamExt;
use mcp_resume_client::Xorshift64;
use mcp_resume_proto::headers as h;
use mcp_resume_proto::sse::SseParser;
use serde_json::{json, Value};
use tokio::time::{sleep, timeout_at, Instant};

use super::judge::{step_of, CallEnd};
use super::listen::{count_ask, token_of, Asked};

/// The protocol revision the harness speaks to the gateway.
pub const PROTOCOL: &str = "2025-11-25";

/// Where calls go: every instance's endpoint, one HTTP client.
pub struct Endpoints {
    /// Every instance's MCP endpoint.
    pub urls: Vec<String>,
    /// One client for every request (its pool is per instance).
    pub http: reqwest::Client,
}

impl Endpoints {
    /// An endpoint picked at random.
    pub fn pick(&self, rng: &mut Xorshift64) -> &str {
        &self.urls[rng.range(0, self.urls.len() as u64 - 1) as usize]
    }

    /// A POST of `body` on session `sid` to an endpoint picked at random.
    pub fn post(&self, rng: &mut Xorshift64, sid: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.pick(rng))
            .header(h::MCP_SESSION_ID, sid)
            .header(h::MCP_PROTOCOL_VERSION, PROTOCOL)
            .header("accept", "application/json, text/event-stream")
            .json(body)
    }

    /// A GET of session `sid`'s streams from an endpoint picked at random,
    /// resumed after `last` (an event id) when there is one.
    pub fn get(
        &self,
        rng: &mut Xorshift64,
        sid: &str,
        last: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let rb = self
            .http
            .get(self.pick(rng))
            .header(h::MCP_SESSION_ID, sid)
            .header(h::MCP_PROTOCOL_VERSION, PROTOCOL)
            .header("accept", "text/event-stream");
        match last {
            Some(l) => rb.header(h::LAST_EVENT_ID, l),
            None => rb,
        }
    }
}

/// What the client saw of one call.
#[derive(Debug)]
pub struct Seen {
    /// The `progress` steps, in arrival order.
    pub steps: Vec<u64>,
    /// How it ended.
    pub end: CallEnd,
    /// Cuts the plan made.
    pub cuts: u32,
    /// Resumes with `Last-Event-ID` (after cuts and lost connections).
    pub resumes: u32,
}

/// One request on session `sid`. `cut_after`: drop the response after that
/// many events once (a client's own disconnect) and resume elsewhere. A
/// `confirm` elicitation on its stream is counted in `asked` and answered.
pub async fn call(
    ep: &Endpoints,
    rng: &mut Xorshift64,
    sid: &str,
    request: Value,
    mut cut_after: Option<usize>,
    asked: &Asked,
    bound: Duration,
) -> Seen {
    let deadline = Instant::now() + bound;
    let id = request["id"].clone();
    let token = request["params"]["_meta"]["progressToken"].clone();
    let mut seen = Seen {
        steps: Vec::new(),
        end: CallEnd::Hung,
        cuts: 0,
        resumes: 0,
    };
    let mut last_id: Option<String> = None;
    // The POST: an instance that refuses connections (killed, restarting)
    // got nothing, so another is tried; any other failure may have
    // delivered the call, which is then only resumed.
    let mut resp = loop {
        let rb = ep.post(rng, sid, &request);
        match timeout_at(deadline, rb.send()).await {
            Err(_) => return seen,
            Ok(Ok(r)) => break r,
            Ok(Err(e)) if e.is_connect() => sleep(Duration::from_millis(100)).await,
            Ok(Err(e)) => {
                seen.end = CallEnd::Lost(e.to_string());
                return seen;
            }
        }
    };
    loop {
        if resp.status() != 200 {
            seen.end = CallEnd::Refused(resp.status().as_u16());
            return seen;
        }
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            seen.end = match timeout_at(deadline, resp.json::<Value>()).await {
                Err(_) => CallEnd::Hung,
                Ok(Ok(v)) => {
                    end_of(&v).unwrap_or(CallEnd::Lost("a JSON body that is no answer".into()))
                }
                Ok(Err(e)) => CallEnd::Lost(e.to_string()),
            };
            return seen;
        }
        // Read until the answer, a cut, or the stream's end.
        let mut parser = SseParser::new();
        let mut body = resp.bytes_stream();
        let mut events = 0usize;
        let mut planned = false;
        'read: loop {
            let chunk = match timeout_at(deadline, body.next()).await {
                Err(_) => return seen,
                Ok(Some(Ok(c))) => c,
                Ok(_) => break 'read,
            };
            for ev in parser.feed(&chunk) {
                if ev.id.is_some() {
                    last_id = ev.id.clone();
                }
                events += 1;
                if let Ok(msg) = serde_json::from_str::<Value>(&ev.data) {
                    // A server request tied to the call rides its stream.
                    if let Some(token) = token_of(&msg) {
                        count_ask(asked, &token);
                        answer(ep, rng, sid, &msg, &token, deadline).await;
                    }
                    if msg.get("id") == Some(&id) && msg.get("method").is_none() {
                        if let Some(end) = end_of(&msg) {
                            seen.end = end;
                            return seen;
                        }
                    }
                    seen.steps.extend(step_of(&msg, &token));
                }
                if cut_after.is_some_and(|c| events >= c) {
                    cut_after = None;
                    seen.cuts += 1;
                    planned = true;
                    break 'read;
                }
            }
        }
        drop(body);
        // Resume where the client got to, on any instance.
        let Some(from) = last_id.clone() else {
            seen.end = CallEnd::Lost("the stream ended before its first event".into());
            return seen;
        };
        if !planned {
            // Not the plan's cut: the stream broke; do not spin on it.
            sleep(Duration::from_millis(50)).await;
        }
        seen.resumes += 1;
        resp = loop {
            match timeout_at(deadline, ep.get(rng, sid, Some(&from)).send()).await {
                Err(_) => return seen,
                Ok(Ok(r)) => break r,
                // Any failure to reach an instance: try again (a GET is safe).
                Ok(Err(_)) => sleep(Duration::from_millis(100)).await,
            }
        };
    }
}

/// Accepts the server's elicitation request `asked` with `{"answer": with}`
/// on an instance picked at random; a refused connection or a 503 (the
/// answer could not be forwarded to the instance that asked) is tried again
/// elsewhere until `deadline`, anything else is left to the call's end.
pub async fn answer(
    ep: &Endpoints,
    rng: &mut Xorshift64,
    sid: &str,
    asked: &Value,
    with: &str,
    deadline: Instant,
) {
    let body = json!({"jsonrpc": "2.0", "id": asked["id"],
                      "result": {"action": "accept", "content": {"answer": with}}});
    while Instant::now() < deadline {
        let rb = ep.post(rng, sid, &body);
        match timeout_at(deadline, rb.send()).await {
            Ok(Ok(r)) if r.status() != 503 => return,
            Err(_) => return,
            _ => sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The end a JSON-RPC response makes, if it is one.
fn end_of(msg: &Value) -> Option<CallEnd> {
    if let Some(r) = msg.get("result") {
        return Some(CallEnd::Result(r.clone()));
    }
    let e = msg.get("error")?;
    let reason = e["data"]["reason"]
        .as_str()
        .or_else(|| e["message"].as_str())
        .unwrap_or("no message");
    Some(CallEnd::Error(format!("{} {reason}", e["code"])))
}

/// A `tools/call` request, with a progress token of its own (`c` and its id).
pub fn tool_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments,
                      "_meta": {"progressToken": format!("c{id}")}}})
}
