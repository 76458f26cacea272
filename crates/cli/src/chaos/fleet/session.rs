//! One session of the fleet experiment, through the balancer only: a
//! reader of its session stream (SSE, resumed with `Last-Event-ID` after
//! every break, on whatever instance the balancer picks) and a caller that
//! makes a call every ~200 ms, each judged by its answer: a call that
//! promises notifications (`emit`, or a gateway child's `count`) counts them
//! as promised once answered, and the reader counts what arrived.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_resume_proto::sse::SseParser;
use serde_json::{json, Value};

use super::tally::{Outcome, Tally};
use crate::fleet::Kind;

/// How long one call may take, answer and stream to its end, before it is hung.
pub(super) const CALL_BOUND: Duration = Duration::from_secs(30);

/// A session's HTTP client and the balancer's URL.
#[derive(Clone)]
pub(super) struct Client {
    pub(super) http: reqwest::Client,
    pub(super) url: String,
}

impl Client {
    fn post(&self, sid: Option<&str>, body: &Value) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = sid {
            rb = rb.header("mcp-session-id", s);
        }
        rb.body(body.to_string())
    }
}

/// Opens a session through the balancer (retried while it answers 5xx or
/// cannot be reached: the fleet may be mid-restart); its id.
pub(super) async fn open(client: &Client) -> Result<String, String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "mcp-resume chaos --fleet", "version": "1"}}});
    let mut last = String::new();
    for _ in 0..50 {
        match client.post(None, &init).send().await {
            Ok(r) if r.status().is_success() => {
                let sid = r
                    .headers()
                    .get("mcp-session-id")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
                    .ok_or("initialize answered without a session id")?;
                let _ = r.bytes().await;
                let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
                let _ = client.post(Some(&sid), &note).send().await;
                return Ok(sid);
            }
            Ok(r) => last = format!("initialize: {}", r.status()),
            Err(e) => last = format!("initialize: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(last)
}

/// What the reader of one session has seen.
#[derive(Default)]
pub(super) struct Read {
    /// The last seq delivered (0: none yet).
    pub(super) last: u64,
    /// Notifications a call promised, as they arrived.
    pub(super) promised_seen: u64,
    /// Whether the server said background work promised to the session was
    /// lost with its instance (`work-lost`).
    pub(super) work_lost: bool,
}

/// Reads `sid`'s session stream until `stop`, resuming after every break;
/// gaps, duplicates, discontinuities, a lost session and each outage (a
/// break until the next `200`) go to `tally`.
pub(super) async fn read(
    client: Client,
    sid: String,
    seen: Arc<Mutex<Read>>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let mut broke: Option<Instant> = None;
    let mut pause = Duration::from_millis(20);
    while !stop.load(Ordering::Acquire) {
        let last = seen.lock().unwrap().last;
        let mut rb = client
            .http
            .get(&client.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", "2025-11-25");
        if last > 0 {
            rb = rb.header("last-event-id", last.to_string());
        }
        let resp = match rb.send().await {
            Ok(r) => r,
            Err(_) => {
                broke.get_or_insert_with(Instant::now);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                continue;
            }
        };
        match resp.status().as_u16() {
            200 => {}
            404 => {
                tally.session_lost();
                return;
            }
            409 => {
                tally.discontinuity();
                return;
            }
            _ => {
                broke.get_or_insert_with(Instant::now);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(500));
                continue;
            }
        }
        if let Some(at) = broke.take() {
            tally.outage(at.elapsed());
        }
        pause = Duration::from_millis(20);
        let mut parser = SseParser::new();
        let mut body = resp.bytes_stream();
        loop {
            let chunk = tokio::select! {
                c = body.next() => c,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Acquire) { return; }
                    continue;
                }
            };
            let Some(Ok(chunk)) = chunk else {
                break;
            };
            for e in parser.feed(&chunk) {
                let Some(seq) = e.id.as_deref().and_then(|i| i.parse::<u64>().ok()) else {
                    continue;
                };
                if e.data.is_empty() {
                    continue; // the priming event: a cursor, no message
                }
                let mut s = seen.lock().unwrap();
                if seq <= s.last {
                    tally.duplicate();
                    continue;
                }
                if seq != s.last + 1 {
                    tally.gap(seq - s.last - 1);
                }
                s.last = seq;
                if promised_notification(&e.data) {
                    s.promised_seen += 1;
                } else if e.data.contains("\"work-lost\"") {
                    s.work_lost = true;
                } else if e.data.contains("\"elicitation/create\"") {
                    // A server that cannot tell which call asked (a
                    // gateway's stdio child) asks on the session stream.
                    if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                        let (client, sid) = (client.clone(), sid.clone());
                        tokio::spawn(async move { answer_elicitation(&client, &sid, &v).await });
                    }
                }
            }
        }
        broke.get_or_insert_with(Instant::now);
    }
}

/// Whether a session-stream message is one a call promised: the `emit`
/// demo tool's (`logger: emit`) or a gateway child's `count` (`step i of n`).
fn promised_notification(data: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return false;
    };
    v["method"] == "notifications/message"
        && (v["params"]["logger"] == "emit"
            || v["params"]["data"]
                .as_str()
                .is_some_and(|d| d.starts_with("step ")))
}

/// The calls a session cycles through, for `kind`: (tool, arguments,
/// notifications it promises once answered). `confirm` asks the client
/// (an elicitation) mid-call; the caller answers through the balancer, so
/// the answer may reach any instance.
fn calls(kind: &Kind) -> Vec<(&'static str, Value, u64)> {
    match kind {
        Kind::Serve => vec![
            ("emit", json!({"count": 20, "interval_ms": 20}), 20),
            ("progress", json!({"steps": 5, "interval_ms": 20}), 0),
            ("echo", json!({"text": "fleet"}), 0),
        ],
        Kind::Hosted(_) => vec![
            ("emit", json!({"count": 20, "interval_ms": 20}), 20),
            ("progress", json!({"n": 5, "interval_ms": 20}), 0),
            ("confirm", json!({"token": "fleet"}), 0),
            ("echo", json!({"text": "fleet"}), 0),
        ],
        Kind::Gateway(_) => vec![
            ("count", json!({"n": 5}), 5),
            ("progress", json!({"n": 5, "interval_ms": 20}), 0),
            ("confirm", json!({"token": "fleet"}), 0),
            ("tick", json!({}), 0),
        ],
    }
}

/// Calls tools in `sid` until `stop`, one every ~200 ms; each outcome,
/// and the notifications answered calls promised, go to `tally`.
pub(super) async fn call_loop(
    client: Client,
    sid: String,
    kind: Kind,
    promised: Arc<Mutex<u64>>,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let calls = calls(&kind);
    let mut n: u64 = 0;
    while !stop.load(Ordering::Acquire) {
        let (tool, args, promises) = &calls[(n as usize) % calls.len()];
        n += 1;
        let id = n;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": {"progressToken": format!("p{id}")}}});
        let outcome = tokio::time::timeout(CALL_BOUND, call(&client, &sid, id, &body))
            .await
            .unwrap_or(Outcome::Hung);
        if matches!(outcome, Outcome::Ok) {
            *promised.lock().unwrap() += promises;
        }
        let lost = matches!(&outcome, Outcome::Loud(r) if r == "404");
        tally.call(tool, outcome);
        if lost {
            tally.session_lost();
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One call, its answer read to the end: JSON, or an SSE stream resumed
/// with `Last-Event-ID` after a break until its response comes.
async fn call(client: &Client, sid: &str, id: u64, body: &Value) -> Outcome {
    let resp = match client.post(Some(sid), body).send().await {
        Ok(r) => r,
        // Nothing came back: it may or may not have run.
        Err(_) => return Outcome::Ambiguous("no answer".into()),
    };
    let status = resp.status().as_u16();
    if status == 502 || status == 504 {
        return Outcome::Ambiguous(format!("balancer {status}"));
    }
    if status != 200 {
        return Outcome::Loud(status.to_string());
    }
    let sse = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !sse {
        return match resp.json::<Value>().await {
            Ok(v) => judge(&v),
            Err(_) => Outcome::Ambiguous("answer cut".into()),
        };
    }
    let mut last_id: Option<String> = None;
    let mut resp = resp;
    let mut tries: u64 = 0;
    loop {
        let mut parser = SseParser::new();
        let mut body = resp.bytes_stream();
        while let Some(Ok(chunk)) = body.next().await {
            for e in parser.feed(&chunk) {
                if e.id.is_some() {
                    last_id = e.id.clone();
                }
                if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                    if v["id"] == id && v.get("method").is_none() {
                        return judge(&v);
                    }
                    if v["method"] == "elicitation/create" {
                        answer_elicitation(client, sid, &v).await;
                    }
                }
            }
        }
        // The stream broke before its response: resumed where it stopped.
        let Some(from) = last_id.clone() else {
            return Outcome::Ambiguous("stream cut before its first event".into());
        };
        // Tried until the call's bound (a Redis stall answers 503 for as
        // long as it lasts); past it the call is hung.
        loop {
            tries += 1;
            tokio::time::sleep(Duration::from_millis(100.min(20 * tries))).await;
            let got = client
                .http
                .get(&client.url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", sid)
                .header("last-event-id", &from)
                .send()
                .await;
            match got {
                Ok(r) if r.status() == 200 => {
                    resp = r;
                    break;
                }
                Ok(r) if r.status() == 404 || r.status() == 409 => {
                    return Outcome::Loud(r.status().as_u16().to_string())
                }
                _ => {}
            }
        }
    }
}

/// Answers a server's `elicitation/create` (the tool's `confirm`) with the
/// form filled, POSTed through the balancer to whichever instance it picks.
async fn answer_elicitation(client: &Client, sid: &str, request: &Value) {
    let answer = json!({"jsonrpc": "2.0", "id": request["id"],
        "result": {"action": "accept", "content": {"answer": "fleet"}}});
    for _ in 0..20 {
        match client.post(Some(sid), &answer).send().await {
            Ok(r) if r.status().is_success() => return,
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A call's response: a result, or an error with the reason it gives.
fn judge(v: &Value) -> Outcome {
    if v.get("result").is_some() && v["result"]["isError"] != true {
        return Outcome::Ok;
    }
    let reason = v["error"]["data"]["reason"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| v["error"]["message"].as_str().map(str::to_owned))
        .or_else(|| {
            v["result"]["content"][0]["text"]
                .as_str()
                .map(|t| format!("tool error: {t}"))
        })
        .unwrap_or_else(|| "error without a reason".into());
    Outcome::Loud(reason)
}
