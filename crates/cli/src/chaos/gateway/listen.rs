//! The session's GET stream, read as a client does: a stdio child's own
//! requests (`elicitation/create`) carry no tie to the call that made them,
//! so the gateway sends them on the session stream (a hosted handler's ride
//! the call's own stream, see `call`). The reader resumes with
//! `Last-Event-ID` on an instance picked at random whenever the stream
//! breaks, and answers each `confirm` request with the token it names.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use mcp_resume_client::Xorshift64;
use mcp_resume_proto::sse::SseParser;
use serde_json::Value;
use tokio::time::{sleep, Instant};

use super::call::answer;
use super::session::Shared;

/// How many times each `confirm` token was asked on the session stream.
pub type Asked = Arc<Mutex<HashMap<String, u32>>>;

/// Reads session `sid`'s stream until aborted or the session is gone.
pub async fn listen(shared: Arc<Shared>, mut rng: Xorshift64, sid: String, asked: Asked) {
    let ep = &shared.endpoints;
    let mut last: Option<String> = None;
    loop {
        match ep.get(&mut rng, &sid, last.as_deref()).send().await {
            Ok(r) if r.status() == 404 => return,
            Ok(r) if r.status() == 200 => {
                let mut parser = SseParser::new();
                let mut body = r.bytes_stream();
                while let Some(Ok(chunk)) = body.next().await {
                    for ev in parser.feed(&chunk) {
                        if ev.id.is_some() {
                            last = ev.id.clone();
                        }
                        let Ok(msg) = serde_json::from_str::<Value>(&ev.data) else {
                            continue;
                        };
                        let Some(token) = token_of(&msg) else {
                            continue;
                        };
                        count_ask(&asked, &token);
                        let deadline = Instant::now() + shared.bound;
                        answer(ep, &mut rng, &sid, &msg, &token, deadline).await;
                    }
                }
            }
            _ => {}
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// Counts one sight of the `confirm` request for `token`.
pub fn count_ask(asked: &Asked, token: &str) {
    *asked
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(token.to_owned())
        .or_default() += 1;
}

/// The token of a `confirm` elicitation (`confirm TOKEN`), if it is one.
pub fn token_of(msg: &Value) -> Option<String> {
    if msg.get("method").and_then(Value::as_str) != Some("elicitation/create") {
        return None;
    }
    let m = msg["params"]["message"].as_str()?;
    Some(m.strip_prefix("confirm ")?.to_owned())
}
