//! One mode's run: iterations, faults, ground truth and the accounting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use mcp_resume_client::sse::SseParser;
use mcp_resume_client::McpClient;
use serde_json::{json, Value};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};

use super::target::Target;

/// Which upgrade the server under test does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Echo, replay and gate (PROTOCOL.md 5).
    Safe,
    /// `--unsafe-legacy-upgrade` (PROTOCOL.md 9).
    Legacy,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Safe => "safe",
            Mode::Legacy => "legacy",
        }
    }
}

/// Run settings.
pub struct Options {
    pub iterations: usize,
    pub seed: u64,
    pub max: Duration,
    pub parallel: usize,
    pub quiet: bool,
    /// What the report says the servers ran on (`remote`, `disk`, the redis URL).
    pub store: String,
    pub instances: usize,
}

/// What one mode's run found.
#[derive(Debug, Default)]
pub struct Results {
    pub mode: &'static str,
    pub iterations: usize,
    /// Events in the log that the reader never delivered, without any error.
    pub silent_gaps: u64,
    /// Iterations with at least one silent gap.
    pub gap_iterations: u64,
    pub duplicates: u64,
    pub reorders: u64,
    pub mismatches: u64,
    pub loud_failures: u64,
    pub loud_kinds: BTreeMap<String, u64>,
    pub faults: BTreeMap<String, u64>,
    pub errors: u64,
    /// Harness errors by what failed (the iteration could not be judged).
    pub error_kinds: BTreeMap<String, u64>,
    /// ms from connect to the 101, to the end of the replay, to the first live frame.
    pub t_101: Vec<f64>,
    pub t_replay: Vec<f64>,
    pub t_live: Vec<f64>,
    pub elapsed: Duration,
}

/// A tiny deterministic generator, so `--seed` reproduces the choices.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[derive(Debug, Clone, Copy)]
enum Fault {
    None,
    DropWs,
    Kill,
}

/// The reader under test and what it delivered.
struct Reader {
    http: reqwest::Client,
    url: String,
    sid: String,
    delivered: Vec<(u64, String)>,
    loud: Vec<String>,
    t_101: Option<f64>,
    t_replay: Option<f64>,
    t_live: Option<f64>,
}

enum Stop {
    After(usize),
    Idle,
}

/// How a read segment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Nothing new for a while: the reader has caught up.
    Quiet,
    /// Stopped on purpose (`Stop::After`, or a fault that drops the socket).
    Stopped,
    /// The connection went away: resume from the cursor.
    Dropped,
    /// Refused loudly (409, 426, 404, a fatal close code): allowed, and final.
    Loud,
}

impl Reader {
    fn last(&self) -> u64 {
        self.delivered.last().map(|d| d.0).unwrap_or(0)
    }

    /// Reads over SSE from `from`.
    async fn sse(&mut self, from: u64, stop: Stop) -> End {
        let mut resp = None;
        for _ in 0..100 {
            match self
                .http
                .get(&self.url)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &self.sid)
                .header("last-event-id", from.to_string())
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
            let idle = Duration::from_millis(700);
            let chunk = match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(Ok(c))) => c,
                Ok(_) => return End::Dropped,
                Err(_) => return End::Quiet,
            };
            for ev in parser.feed(&chunk) {
                if ev.data.is_empty() {
                    continue;
                }
                let Some(seq) = ev.id.and_then(|i| i.parse().ok()) else {
                    continue;
                };
                self.delivered.push((seq, ev.data));
                n += 1;
                if let Stop::After(k) = stop {
                    if n >= k {
                        return End::Stopped;
                    }
                }
            }
        }
    }

    /// Upgrades from `from`; follows the echo, replay and ack when the server offers them.
    /// Drops the socket abruptly after `drop_after` live events, if given.
    async fn ws(&mut self, from: u64, drop_after: Option<usize>, timed: bool) -> End {
        let ws_url = format!(
            "{}/session/{}/events",
            self.url.replacen("http", "ws", 1),
            self.sid
        );
        let Ok(mut req) = ws_url.into_client_request() else {
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
        let mut live = 0;
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
            let msg = match tokio::time::timeout(Duration::from_millis(700), ws.next()).await {
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
                    self.delivered.push((seq, v["message"].to_string()));
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
                }
                Message::Close(f) => {
                    let code = f.map(|f| u16::from(f.code)).unwrap_or(1005);
                    if code != 1000 && code != 1005 {
                        self.loud.push(format!("close-{code}"));
                    }
                    // 1001, 4408, 4409, 4429: resume from the cursor; the others are final.
                    return if matches!(code, 1001 | 4408 | 4409 | 4429) {
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

/// The committed head, as the server's 409 for an impossible cursor names it.
async fn current_head(http: &reqwest::Client, url: &str, sid: &str) -> Option<u64> {
    let r = http
        .get(url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", sid)
        .header("last-event-id", u64::MAX.to_string())
        .send()
        .await
        .ok()?;
    let v: Value = r.json().await.ok()?;
    v["head"].as_u64()
}

/// The log as the server has it: every event from 0, read over SSE.
async fn ground_truth(http: &reqwest::Client, url: &str, sid: &str) -> Option<Vec<(u64, String)>> {
    let mut r = Reader {
        http: http.clone(),
        url: url.to_owned(),
        sid: sid.to_owned(),
        delivered: Vec::new(),
        loud: Vec::new(),
        t_101: None,
        t_replay: None,
        t_live: None,
    };
    match r.sse(0, Stop::Idle).await {
        End::Loud => None,
        _ => Some(r.delivered),
    }
}

/// Canonical JSON text, so the same message compares equal whichever transport carried it.
fn canon(s: &str) -> String {
    serde_json::from_str::<Value>(s)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| s.to_owned())
}

struct Outcome {
    silent: u64,
    duplicates: u64,
    reorders: u64,
    mismatches: u64,
    loud: Vec<String>,
    fault: Fault,
    t: (Option<f64>, Option<f64>, Option<f64>),
    detail: Option<String>,
}

async fn iteration(
    urls: Arc<Vec<String>>,
    mut rng: Rng,
    target: Arc<Mutex<Target>>,
    killable: usize,
) -> Result<Outcome, String> {
    // With several instances every step goes to one of them at random: the
    // session must not care which.
    let pick = |rng: &mut Rng| urls[rng.range(0, urls.len() as u64 - 1) as usize].clone();
    let url = pick(&mut rng);
    let http = reqwest::Client::new();
    let mut client = McpClient::new(&url);
    let mut tries = 0;
    while let Err(e) = client.initialize().await {
        tries += 1;
        if tries > 100 {
            return Err(format!("initialize: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sid = client.session_id().unwrap_or_default().to_owned();
    // The sibling reader of the seed: reads the whole stream over SSE, concurrently.
    let sibling = {
        let (http, url, sid) = (http.clone(), pick(&mut rng), sid.clone());
        tokio::spawn(async move { ground_truth(&http, &url, &sid).await })
    };
    let e1 = rng.range(5, 30);
    let client = McpClient::new(pick(&mut rng)).with_session(&sid);
    // Another iteration may be restarting the server: retry like initialize
    // (a retried emit that had gone through only adds events; the log is the truth).
    let mut tries = 0;
    while let Err(e) = client.call_tool("emit", json!({"count": e1})).await {
        tries += 1;
        if tries > 100 {
            return Err(format!("first emit: {e}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut reader = Reader {
        http: http.clone(),
        url: pick(&mut rng),
        sid: sid.clone(),
        delivered: Vec::new(),
        loud: Vec::new(),
        t_101: None,
        t_replay: None,
        t_live: None,
    };
    let k = rng.range(1, e1) as usize;
    reader.sse(0, Stop::After(k)).await;
    // Usually k, fewer if the stream went quiet first: what the upgrade is measured from.
    let first_segment = reader.delivered.len();
    // `emit` races with the handshake.
    let e2 = rng.range(10, 60);
    let interval = rng.range(0, 3);
    let racer = {
        let c = client.clone();
        tokio::spawn(async move {
            c.call_tool("emit", json!({"count": e2, "interval_ms": interval}))
                .await
        })
    };
    let fault = match rng.range(0, 9) {
        0..=3 => Fault::None,
        4..=7 => Fault::DropWs,
        _ if killable > 0 => Fault::Kill,
        _ => Fault::DropWs,
    };
    let drop_after = match fault {
        Fault::None => None,
        _ => Some(rng.range(1, 8) as usize),
    };
    let prior = reader.last();
    reader.url = pick(&mut rng);
    let mut end = reader.ws(prior, drop_after, true).await;
    if let Fault::Kill = fault {
        if end == End::Stopped {
            // The instance the reader was on, when there is only one; any otherwise.
            let victim = rng.range(0, killable as u64 - 1) as usize;
            let t = target.clone();
            tokio::task::spawn_blocking(move || t.blocking_lock().kill_and_restart(victim))
                .await
                .map_err(|e| format!("restart: {e}"))?
                .map_err(|e| format!("restart: {e}"))?;
        }
    }
    // Resume, over SSE or WebSocket at random, until caught up: a reader never stops at a drop.
    let mut rounds = 0;
    while matches!(end, End::Stopped | End::Dropped) && rounds < 50 {
        rounds += 1;
        let from = reader.last();
        reader.url = pick(&mut rng);
        end = if rng.range(0, 1) == 0 {
            reader.sse(from, Stop::Idle).await
        } else {
            reader.ws(from, None, false).await
        };
    }
    let ok = end == End::Quiet;
    let _ = racer.await;
    let _ = sibling.await;
    // Wait until the log stops growing: all of emit's events, or what a kill left of them.
    let url = pick(&mut rng);
    let expected = e1 + e2;
    let mut head = 0;
    let mut still = Instant::now();
    loop {
        let h = current_head(&http, &url, &sid).await.unwrap_or(head);
        if h >= expected {
            head = h;
            break;
        }
        if h != head {
            head = h;
            still = Instant::now();
        } else if still.elapsed() > Duration::from_secs(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A quiet spell is not the end: the reader catches up from its cursor to the head.
    let mut ok = ok;
    let mut rounds = 0;
    while ok && reader.last() < head && rounds < 20 {
        rounds += 1;
        let from = reader.last();
        reader.url = pick(&mut rng);
        let end = if rng.range(0, 1) == 0 {
            reader.sse(from, Stop::Idle).await
        } else {
            reader.ws(from, None, false).await
        };
        ok = end != End::Loud;
    }
    // The ground truth, not what is judged: a read back that meets a store
    // failing over (a loud 503 or a stream ended loudly) is tried again, as
    // initialize and emit are.
    let mut truth = None;
    for _ in 0..100 {
        truth = ground_truth(&http, &url, &sid).await;
        if truth.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let truth = truth.ok_or("read back: the log could not be read back")?;
    let _ = client.end().await;
    // Accounting: what the reader delivered after k, against the log.
    let truth_map: BTreeMap<u64, String> = truth.into_iter().map(|(s, m)| (s, canon(&m))).collect();
    let after_k: Vec<&(u64, String)> = reader.delivered.iter().skip(first_segment).collect();
    let mut seen = std::collections::BTreeSet::new();
    let (mut duplicates, mut reorders, mut mismatches) = (0, 0, 0);
    let mut prev = prior;
    for (seq, msg) in &after_k {
        if !seen.insert(*seq) {
            duplicates += 1;
        }
        if *seq < prev {
            reorders += 1;
        }
        prev = *seq;
        if truth_map.get(seq).is_some_and(|t| *t != canon(msg)) {
            mismatches += 1;
        }
    }
    let silent = if ok && reader.loud.is_empty() {
        truth_map
            .keys()
            .filter(|s| **s > prior && !seen.contains(*s))
            .count() as u64
    } else {
        0
    };
    let detail = (silent > 0).then(|| {
        let missing: Vec<u64> = truth_map.keys().filter(|s| **s > prior && !seen.contains(*s)).copied().collect();
        format!(
            "session {sid}: fault {fault:?}, read over SSE to {prior}, missing {missing:?}, delivered {:?}..{:?}, head {head}",
            after_k.first().map(|d| d.0),
            after_k.last().map(|d| d.0)
        )
    });
    Ok(Outcome {
        silent,
        duplicates,
        reorders,
        mismatches,
        loud: reader.loud,
        fault,
        t: (reader.t_101, reader.t_replay, reader.t_live),
        detail,
    })
}

/// Runs `opts.iterations` iterations against `target` in `mode`.
pub async fn run(mode: Mode, target: Target, opts: &Options) -> Result<Results, String> {
    let urls = Arc::new(target.urls.clone());
    let killable = target.killable();
    let target = Arc::new(Mutex::new(target));
    let mut res = Results {
        mode: mode.name(),
        ..Default::default()
    };
    let bar = if opts.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new(opts.iterations as u64)
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>7} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(mode.name());
    let start = Instant::now();
    let mut rng = Rng(opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // A sliding window: `parallel` iterations in flight, a new one starts as
    // soon as one ends (the seed of each is drawn in order, so `--seed` still
    // fixes every iteration's choices).
    let mut started = 0;
    let mut set = tokio::task::JoinSet::new();
    loop {
        while set.len() < opts.parallel && started < opts.iterations && start.elapsed() < opts.max {
            started += 1;
            let sub = Rng(rng.next() | 1);
            set.spawn(iteration(urls.clone(), sub, target.clone(), killable));
        }
        let Some(r) = set.join_next().await else {
            break;
        };
        res.iterations += 1;
        match r.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(o) => {
                if let Some(d) = &o.detail {
                    eprintln!("silent gap: {d}");
                }
                res.silent_gaps += o.silent;
                res.gap_iterations += (o.silent > 0) as u64;
                res.duplicates += o.duplicates;
                res.reorders += o.reorders;
                res.mismatches += o.mismatches;
                res.loud_failures += o.loud.len() as u64;
                for l in o.loud {
                    *res.loud_kinds.entry(l).or_default() += 1;
                }
                *res.faults
                    .entry(format!("{:?}", o.fault).to_lowercase())
                    .or_default() += 1;
                if let Some(t) = o.t.0 {
                    res.t_101.push(t);
                }
                if let Some(t) = o.t.1 {
                    res.t_replay.push(t);
                }
                if let Some(t) = o.t.2 {
                    res.t_live.push(t);
                }
            }
            Err(e) => {
                res.errors += 1;
                let kind = e.split(':').next().unwrap_or("other").to_owned();
                *res.error_kinds.entry(kind).or_default() += 1;
                if opts.quiet {
                    eprintln!("iteration failed: {e}");
                } else {
                    bar.println(format!("iteration failed: {e}"));
                }
            }
        }
        bar.set_message(format!(
            "silent gaps {} dup {} loud {}",
            res.silent_gaps, res.duplicates, res.loud_failures
        ));
        bar.inc(1);
    }
    bar.finish();
    res.elapsed = start.elapsed();
    Ok(res)
}
