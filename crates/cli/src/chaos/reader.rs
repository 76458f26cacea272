//! The reader under test: reads the session stream over SSE or WebSocket
//! from a cursor, follows the protocol (echo, replay, ack) and records what
//! it delivered, without checking seqs itself; the accounting judges that.
//! Against an rmcp server (mcp-resume-rmcp) it reads over SSE only, with
//! event ids `SESSION/0/SEQ`.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use mcp_resume_client::sse::SseParser;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

/// How long a stream may stay silent before the reader counts itself caught up.
const IDLE: Duration = Duration::from_millis(700);

/// The reader and everything it delivered, in delivery order.
pub struct Reader {
    http: reqwest::Client,
    /// The endpoint of the instance the next segment reads from.
    pub url: String,
    sid: String,
    /// `(seq, message as JSON text)`, as delivered.
    pub delivered: Vec<(u64, String)>,
    /// Loud refusals met on the way (`http-409`, `close-4409`, `connect`, ...).
    pub loud: Vec<String>,
    /// ms from connect to the 101, of the timed upgrade.
    pub t_101: Option<f64>,
    /// ms from connect to the end of the replay, of the timed upgrade.
    pub t_replay: Option<f64>,
    /// ms from connect to the first live frame, of the timed upgrade.
    pub t_live: Option<f64>,
    /// Resumes answered 200 with a body that ended at once, no event in it:
    /// rmcp's answer to a cursor its store refused. Not loud: the reader
    /// resumes again, and what it never gets is a silent gap.
    pub empty_200s: u64,
    /// Event ids are mcp-resume-rmcp's `SESSION/0/SEQ`, not plain seqs.
    rmcp_ids: bool,
}

/// When a segment stops reading on purpose.
pub enum Stop {
    /// After this many events.
    After(usize),
    /// Once this message has been delivered.
    At(Value),
    /// Only when the stream goes quiet or ends.
    Idle,
}

/// How a read segment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Nothing new for a while: the reader has caught up.
    Quiet,
    /// Stopped on purpose (`Stop::After`, `Stop::At`, or a fault that drops the socket).
    Stopped,
    /// The connection went away: resume from the cursor.
    Dropped,
    /// Refused loudly (409, 426, 404, a fatal close code, no connection at all).
    Loud,
}

impl Stop {
    fn reached(&self, n: usize, message: &str) -> bool {
        match self {
            Stop::After(k) => n >= *k,
            Stop::At(v) => serde_json::from_str::<Value>(message).is_ok_and(|m| m == *v),
            Stop::Idle => false,
        }
    }
}

impl Reader {
    /// A reader of session `sid` that has delivered nothing yet.
    pub fn new(http: reqwest::Client, url: String, sid: String) -> Self {
        Self {
            http,
            url,
            sid,
            delivered: Vec::new(),
            loud: Vec::new(),
            t_101: None,
            t_replay: None,
            t_live: None,
            empty_200s: 0,
            rmcp_ids: false,
        }
    }

    /// Reads with mcp-resume-rmcp's event ids, `SESSION/0/SEQ` (stream 0,
    /// the standalone stream), when `on`.
    pub fn rmcp_ids(mut self, on: bool) -> Self {
        self.rmcp_ids = on;
        self
    }

    /// The `Last-Event-ID` that resumes after `seq`.
    fn event_id(&self, seq: u64) -> String {
        if self.rmcp_ids {
            format!("{}/0/{seq}", self.sid)
        } else {
            seq.to_string()
        }
    }

    /// The seq an event id names. `None` without a number (the event is
    /// skipped, as any client would); with rmcp ids, an id of another
    /// session or stream is seq 0, which the accounting counts as a mismatch.
    fn seq_of(&self, id: &str) -> Option<u64> {
        if !self.rmcp_ids {
            return id.parse().ok();
        }
        let (prefix, seq) = id.rsplit_once('/')?;
        let seq = seq.parse().ok()?;
        Some(if prefix == format!("{}/0", self.sid) {
            seq
        } else {
            0
        })
    }

    /// The cursor: the seq of the last event delivered (0 before any).
    pub fn last(&self) -> u64 {
        self.delivered.last().map(|d| d.0).unwrap_or(0)
    }

    /// Reads over SSE from `from`.
    pub async fn sse(&mut self, from: u64, stop: &Stop) -> End {
        let mut resp = None;
        for _ in 0..100 {
            match self
                .http
                .get(&self.url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &self.sid)
                .header("last-event-id", self.event_id(from))
                .send()
                .await
            {
                Ok(r) => {
                    resp = Some(r);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let Some(resp) = resp else {
            self.loud.push("connect".into());
            return End::Loud;
        };
        if !resp.status().is_success() {
            self.loud.push(format!("http-{}", resp.status().as_u16()));
            return End::Loud;
        }
        let mut parser = SseParser::new();
        let mut body = resp.bytes_stream();
        let mut n = 0;
        loop {
            let chunk = match tokio::time::timeout(IDLE, body.next()).await {
                Ok(Some(Ok(c))) => c,
                Ok(None) if self.rmcp_ids && n == 0 => {
                    // rmcp's answer to a refused cursor: 200, no event, the end.
                    self.empty_200s += 1;
                    return End::Dropped;
                }
                Ok(_) => return End::Dropped,
                Err(_) => return End::Quiet,
            };
            for ev in parser.feed(&chunk) {
                if ev.data.is_empty() {
                    continue;
                }
                let Some(seq) = ev.id.as_deref().and_then(|i| self.seq_of(i)) else {
                    continue;
                };
                n += 1;
                let reached = stop.reached(n, &ev.data);
                self.delivered.push((seq, ev.data));
                if reached {
                    return End::Stopped;
                }
            }
        }
    }

    /// Upgrades from `from`; follows the echo, replay and ack when the server offers them.
    /// Drops the socket abruptly after `drop_after` live events, if given.
    pub async fn ws(&mut self, from: u64, drop_after: Option<usize>, timed: bool) -> End {
        self.ws_until(from, drop_after, timed, &Stop::Idle).await
    }

    /// [`Reader::ws`], also stopping (closing the socket) as `stop` says.
    pub async fn ws_until(
        &mut self,
        from: u64,
        drop_after: Option<usize>,
        timed: bool,
        stop: &Stop,
    ) -> End {
        let ws_url = format!(
            "{}/session/{}/events",
            self.url.replacen("http", "ws", 1),
            self.sid
        );
        let Ok(mut req) = ws_url.into_client_request() else {
            self.loud.push("bad-url".into());
            return End::Loud;
        };
        req.headers_mut().insert(
            "sec-websocket-protocol",
            tungstenite::http::HeaderValue::from_static("mcp.resume.v1"),
        );
        if let Ok(v) = from.to_string().parse() {
            req.headers_mut().insert("last-event-id", v);
        }
        let t0 = Instant::now();
        let mut conn = None;
        for _ in 0..100 {
            match tokio_tungstenite::connect_async(req.clone()).await {
                Ok(c) => {
                    conn = Some(c);
                    break;
                }
                Err(tungstenite::Error::Http(resp)) => {
                    self.loud.push(format!("http-{}", resp.status().as_u16()));
                    return End::Loud;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let Some((mut ws, resp)) = conn else {
            self.loud.push("connect".into());
            return End::Loud;
        };
        let ms = |t: Instant| t.elapsed().as_secs_f64() * 1000.0;
        if timed {
            self.t_101 = Some(ms(t0));
        }
        let echo: Option<u64> = resp
            .headers()
            .get("x-mcp-resume-cursor")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let mut acked = echo.is_none();
        let (mut live, mut n) = (0, 0);
        if let Some(c) = echo {
            if c == from {
                if timed {
                    self.t_replay = Some(ms(t0));
                }
                acked = ws
                    .send(Message::Text(
                        json!({"type":"cursor-ack","cursor":c}).to_string().into(),
                    ))
                    .await
                    .is_ok();
            }
        }
        loop {
            let msg = match tokio::time::timeout(IDLE, ws.next()).await {
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(_))) | Ok(None) => return End::Dropped,
                Err(_) => {
                    let _ = ws.close(None).await;
                    return End::Quiet;
                }
            };
            match msg {
                Message::Text(t) => {
                    let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
                        continue;
                    };
                    if v["type"] != "event" {
                        continue;
                    }
                    let seq = v["seq"].as_u64().unwrap_or(0);
                    let message = v["message"].to_string();
                    n += 1;
                    let reached = stop.reached(n, &message);
                    self.delivered.push((seq, message));
                    if !acked && Some(seq) == echo {
                        if timed {
                            self.t_replay = Some(ms(t0));
                        }
                        acked = ws
                            .send(Message::Text(
                                json!({"type":"cursor-ack","cursor":seq}).to_string().into(),
                            ))
                            .await
                            .is_ok();
                    } else if echo.is_none_or(|c| seq > c) {
                        if timed && self.t_live.is_none() {
                            self.t_live = Some(ms(t0));
                        }
                        live += 1;
                        if drop_after.is_some_and(|d| live >= d) {
                            return End::Stopped; // dropped abruptly: no close frame
                        }
                    }
                    if reached {
                        let _ = ws.close(None).await;
                        return End::Stopped;
                    }
                }
                Message::Close(f) => {
                    let code = f.map(|f| u16::from(f.code)).unwrap_or(1005);
                    if code != 1000 && code != 1005 {
                        self.loud.push(format!("close-{code}"));
                    }
                    // 1000, 1005, 1001, 4408, 4409, 4429: resume from the cursor;
                    // the others are refusals.
                    return if matches!(code, 1000 | 1005 | 1001 | 4408 | 4409 | 4429) {
                        End::Dropped
                    } else {
                        End::Loud
                    };
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(rmcp: bool) -> Reader {
        Reader::new(reqwest::Client::new(), String::new(), "abc".into()).rmcp_ids(rmcp)
    }

    #[test]
    fn plain_ids_are_seqs() {
        let r = reader(false);
        assert_eq!((r.event_id(7), r.seq_of("7")), ("7".into(), Some(7)));
        assert_eq!(r.seq_of("abc/0/7"), None);
    }

    #[test]
    fn rmcp_ids_name_the_session_and_stream_0_and_any_other_is_seq_0() {
        let r = reader(true);
        assert_eq!(r.event_id(7), "abc/0/7");
        assert_eq!(r.seq_of("abc/0/7"), Some(7));
        // Another session's or another stream's event: a mismatch, not skipped.
        assert_eq!(r.seq_of("xyz/0/7"), Some(0));
        assert_eq!(r.seq_of("abc/1/7"), Some(0));
        assert_eq!(r.seq_of("7"), None);
        assert_eq!(r.seq_of("abc/0/x"), None);
    }
}
