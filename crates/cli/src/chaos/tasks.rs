//! `mcp-resume chaos --tasks BIN`: resumable task event streams (SEP-2694)
//! under faults. Instances of the `conformance` example (at BIN) share one
//! store; each iteration starts a `stream_events {count}` task on an
//! instance picked at random and reads its events with `tasks/stream`,
//! resumed with `after` on an instance picked at random whenever the
//! connection breaks, and cut on purpose by the client in a third of the
//! iterations. Meanwhile a fault loop kills a random instance with
//! `kill -9` and restarts it (and, with `--spawn-redis`, restarts Redis).
//!
//! The truth is the task's own numbering: its events carry `n` = 1..=count.
//! A task's stream is complete (seq 0 ..= count + 1: its start, every `n`
//! once and in order, then `completed`), or loud (a contiguous prefix, then
//! a terminal `failed`, or an error the client saw); never a silent gap, a
//! duplicate, a second terminal event, or a hang past the bound.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mcp_resume_client::Xorshift64;
use mcp_resume_proto::sse::SseParser;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::target::Target;
use crate::fleet::redis::OwnRedis;

/// Run settings.
pub struct Options {
    /// Tasks to run.
    pub tasks: usize,
    /// Tasks at once.
    pub parallel: usize,
    /// Events each task emits.
    pub count: u64,
    /// The pause between two of a task's events.
    pub interval_ms: u64,
    /// Time between two faults (0: none).
    pub fault_every: Duration,
    /// A task whose stream has not ended after this long is hung.
    pub bound: Duration,
    /// Seed of the random choices.
    pub seed: u64,
}

/// How one task's stream ended, as the client saw it.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    Complete,
    Loud(String),
    SilentGap(String),
    Duplicate(String),
    Hung,
    NotStarted(String),
}

/// The counts of a run.
#[derive(Default)]
pub struct Tally {
    verdicts: BTreeMap<String, u64>,
    failures: Vec<String>,
    cuts: u64,
    resumes: u64,
    kills: u64,
    redis_restarts: u64,
    fault_errors: Vec<String>,
    events: u64,
    elapsed: Duration,
}

impl Tally {
    fn record(&mut self, v: &Verdict) {
        let (key, bad) = match v {
            Verdict::Complete => ("complete".to_owned(), None),
            Verdict::Loud(why) => (format!("loud: {why}"), None),
            Verdict::NotStarted(why) => (format!("not started: {why}"), None),
            Verdict::SilentGap(why) => ("silent gap".into(), Some(why.clone())),
            Verdict::Duplicate(why) => ("duplicate".into(), Some(why.clone())),
            Verdict::Hung => ("hung".into(), Some("a task stream hung".into())),
        };
        *self.verdicts.entry(key).or_default() += 1;
        if let Some(why) = bad {
            self.failures.push(why);
        }
    }

    /// What makes the run fail.
    pub fn failures(&self) -> Vec<String> {
        let mut f = self.failures.clone();
        f.extend(
            self.fault_errors
                .iter()
                .map(|e| format!("a fault failed: {e}")),
        );
        f
    }

    /// The report, as JSON.
    pub fn json(&self, about: Value) -> Value {
        json!({"mode": "tasks", "verdicts": self.verdicts, "failures": self.failures(),
               "cuts": self.cuts, "resumes": self.resumes, "events": self.events,
               "faults": {"kills": self.kills, "redis_restarts": self.redis_restarts},
               "elapsed_s": self.elapsed.as_secs_f64(), "run": about,
               "truth": "the task's own numbering (n = 1..=count), seq 0 ..= count + 1"})
    }

    /// The table, on stdout.
    pub fn print(&self) {
        println!("task streams (SEP-2694) under faults");
        for (k, n) in &self.verdicts {
            println!("  {k:<40} {n:>6}");
        }
        println!("  {:<40} {:>6}", "events read", self.events);
        println!(
            "  {:<40} {:>6} / {}",
            "cuts / resumes", self.cuts, self.resumes
        );
        println!(
            "  {:<40} {:>6} / {}",
            "kills / redis restarts", self.kills, self.redis_restarts
        );
        println!("  {:<40} {:>6.1}", "seconds", self.elapsed.as_secs_f64());
    }
}

/// Runs `opts.tasks` task streams against `target`, faults alongside.
pub async fn run(target: Target, redis: Option<OwnRedis>, opts: &Options) -> Result<Tally, String> {
    let urls = target.urls.clone();
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .map_err(|e| e.to_string())?;
    let mut rng = Xorshift64::new(opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let (stop_tx, stop_rx) = watch::channel(false);
    let faults = tokio::spawn(fault_loop(
        target,
        redis,
        Xorshift64::new(rng.next_u64()),
        opts.fault_every,
        stop_rx,
    ));
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut set = tokio::task::JoinSet::new();
    let mut started = 0;
    loop {
        while set.len() < opts.parallel.max(1) && started < opts.tasks {
            started += 1;
            let (urls, http) = (urls.clone(), http.clone());
            let rng = Xorshift64::new(rng.next_u64());
            let (count, interval, bound) = (opts.count, opts.interval_ms, opts.bound);
            set.spawn(async move { one_task(&urls, &http, rng, count, interval, bound).await });
        }
        let Some(done) = set.join_next().await else {
            break;
        };
        match done {
            Ok(seen) => {
                tally.cuts += seen.cuts;
                tally.resumes += seen.resumes;
                tally.events += seen.events;
                if !matches!(seen.verdict, Verdict::Complete) {
                    eprintln!("task {}: {:?}", seen.task, seen.verdict);
                }
                tally.record(&seen.verdict);
            }
            Err(e) => tally.failures.push(format!("a task's harness failed: {e}")),
        }
    }
    let _ = stop_tx.send(true);
    let (kills, restarts, errors) = faults.await.map_err(|e| e.to_string())?;
    (tally.kills, tally.redis_restarts, tally.fault_errors) = (kills, restarts, errors);
    tally.elapsed = start.elapsed();
    Ok(tally)
}

/// `kill -9` and restart of a random instance every `every` (or of the
/// Redis of our own, one time in three); the counts and errors.
async fn fault_loop(
    mut target: Target,
    mut redis: Option<OwnRedis>,
    mut rng: Xorshift64,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) -> (u64, u64, Vec<String>) {
    let (mut kills, mut restarts, mut errors) = (0, 0, Vec::new());
    let n = target.killable();
    loop {
        if every.is_zero() || n == 0 {
            let _ = stop.wait_for(|s| *s).await;
            return (kills, restarts, errors);
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return (kills, restarts, errors),
            _ = tokio::time::sleep(every) => {}
        }
        match redis.as_mut().filter(|_| rng.range(0, 2) == 0) {
            Some(r) => match tokio::task::block_in_place(|| r.restart()) {
                Ok(()) => restarts += 1,
                Err(e) => errors.push(e),
            },
            None => {
                let i = rng.range(0, n as u64 - 1) as usize;
                match tokio::task::block_in_place(|| target.kill_and_restart(i)) {
                    Ok(()) => kills += 1,
                    Err(e) => errors.push(e),
                }
            }
        }
    }
}

/// The judgement of one task's events against its own numbering.
struct Judge {
    task: String,
    count: u64,
    /// The last seq seen.
    last: Option<u64>,
    /// The `n` the next count event must carry.
    next_n: u64,
}

impl Judge {
    fn new(task: &str, count: u64) -> Self {
        Self {
            task: task.to_owned(),
            count,
            last: None,
            next_n: 1,
        }
    }

    /// Takes one event's params; the verdict once there is one.
    fn take(&mut self, p: &Value) -> Option<Verdict> {
        let task = &self.task;
        let seq = p["seq"].as_u64().unwrap_or(u64::MAX);
        let want = self.last.map_or(0, |l| l + 1);
        if seq < want {
            return Some(Verdict::Duplicate(format!(
                "task {task}: seq {seq} again after {:?}",
                self.last
            )));
        }
        if seq > want {
            return Some(Verdict::SilentGap(format!(
                "task {task}: seq {seq} after {:?}",
                self.last
            )));
        }
        self.last = Some(seq);
        let kind = p["type"].as_str().unwrap_or_default();
        if kind == "com.example.count" {
            let n = p["payload"]["n"].as_u64().unwrap_or(0);
            if n != self.next_n {
                return Some(Verdict::SilentGap(format!(
                    "task {task}: n {n} where {} was next",
                    self.next_n
                )));
            }
            self.next_n += 1;
        }
        match kind.strip_prefix("dev.mcp-resume/task/")? {
            "completed" if self.next_n == self.count + 1 => Some(Verdict::Complete),
            "completed" => Some(Verdict::SilentGap(format!(
                "task {task}: completed after n {}",
                self.next_n - 1
            ))),
            s @ ("failed" | "cancelled") => {
                let reason = p["payload"]["error"]["data"]["reason"]
                    .as_str()
                    .unwrap_or(s);
                Some(Verdict::Loud(format!("{s} {reason}")))
            }
            _ => None,
        }
    }
}

/// What the client saw of one task.
struct Seen {
    task: String,
    verdict: Verdict,
    cuts: u64,
    resumes: u64,
    events: u64,
}

/// A stateless-era POST of `method` with `params` (the tasks extension declared).
fn request(
    http: &reqwest::Client,
    url: &str,
    method: &str,
    name: &str,
    mut params: Value,
) -> reqwest::RequestBuilder {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-chaos", "version": env!("CARGO_PKG_VERSION")}});
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name)
        .timeout(Duration::from_secs(60))
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string())
}

/// Starts a task and reads its stream to the end, resuming and cutting.
async fn one_task(
    urls: &[String],
    http: &reqwest::Client,
    mut rng: Xorshift64,
    count: u64,
    interval: u64,
    bound: Duration,
) -> Seen {
    let deadline = Instant::now() + bound;
    let pick = |rng: &mut Xorshift64| urls[rng.range(0, urls.len() as u64 - 1) as usize].clone();
    let mut seen = Seen {
        task: String::new(),
        verdict: Verdict::Hung,
        cuts: 0,
        resumes: 0,
        events: 0,
    };
    // The start: a refused connection got nothing and is tried elsewhere;
    // anything else may have created a task whose id never came back.
    let created = loop {
        let params = json!({"name": "stream_events", "arguments": {"count": count, "interval_ms": interval}});
        match request(http, &pick(&mut rng), "tools/call", "stream_events", params)
            .send()
            .await
        {
            Ok(r) => break r.json::<Value>().await.map_err(|e| e.to_string()),
            Err(e) if e.is_connect() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => break Err(e.to_string()),
        }
    };
    let task = match created
        .as_ref()
        .ok()
        .and_then(|v| v["result"]["taskId"].as_str())
    {
        Some(t) => t.to_owned(),
        None => {
            seen.verdict = Verdict::NotStarted(match created {
                Ok(v) => format!("no task in {v}"),
                Err(e) => e,
            });
            return seen;
        }
    };
    seen.task = task.clone();
    let mut judge = Judge::new(&task, count);
    let mut cut_after = (rng.range(0, 2) == 0).then(|| rng.range(1, count + 1) as usize);
    loop {
        if Instant::now() >= deadline {
            return seen; // hung
        }
        let mut params = json!({"taskId": task});
        if let Some(a) = judge.last {
            params["after"] = json!(a);
        }
        let resp = match request(http, &pick(&mut rng), "tasks/stream", &task, params)
            .send()
            .await
        {
            Ok(r) => r,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                seen.resumes += 1;
                continue;
            }
        };
        if resp.status().as_u16() >= 500 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            seen.resumes += 1;
            continue;
        }
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            // A refusal (events_gone, an unknown task): loud, the client knows.
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            let e = &v["error"];
            seen.verdict = Verdict::Loud(format!(
                "refused {} {}",
                e["code"],
                e["data"]["reason"].as_str().unwrap_or_default()
            ));
            return seen;
        }
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut here = 0usize;
        'read: while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout_at(deadline.into(), body.next()).await
        {
            for ev in parser.feed(&chunk) {
                let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
                    continue;
                };
                if v["method"] == "notifications/tasks/event" {
                    if let Some(verdict) = judge.take(&v["params"]) {
                        seen.verdict = verdict;
                        return seen;
                    }
                    seen.events += 1;
                    here += 1;
                    if cut_after.is_some_and(|c| here >= c) {
                        cut_after = None;
                        seen.cuts += 1;
                        break 'read;
                    }
                } else if v.get("error").is_some() {
                    let reason = v["error"]["data"]["reason"].as_str().unwrap_or_default();
                    if ["server-stopping", "log-unavailable", "log-gap"].contains(&reason) {
                        break 'read; // resume from `last`
                    }
                    seen.verdict = Verdict::Loud(format!("error {} {reason}", v["error"]["code"]));
                    return seen;
                } else if v.get("result").is_some() {
                    // A result before the terminal event is a stream that ended short.
                    seen.verdict = Verdict::SilentGap(format!(
                        "task {task}: result after {:?} with no terminal event",
                        judge.last
                    ));
                    return seen;
                }
            }
        }
        seen.resumes += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: &str, payload: Value) -> Value {
        json!({"seq": seq, "type": kind, "payload": payload})
    }

    fn judge(events: &[Value], count: u64) -> Option<Verdict> {
        let mut j = Judge::new("t", count);
        events.iter().find_map(|e| j.take(e))
    }

    #[test]
    fn the_judge_sees_gaps_duplicates_and_short_completions() {
        let start = ev(0, "dev.mcp-resume/task/working", json!({}));
        let n = |seq, n| ev(seq, "com.example.count", json!({"n": n}));
        let done = |seq| ev(seq, "dev.mcp-resume/task/completed", json!({}));
        assert_eq!(
            judge(&[start.clone(), n(1, 1), n(2, 2), done(3)], 2),
            Some(Verdict::Complete)
        );
        assert!(matches!(
            judge(&[start.clone(), n(2, 2)], 2),
            Some(Verdict::SilentGap(_))
        ));
        assert!(matches!(
            judge(&[start.clone(), n(1, 1), n(1, 1)], 2),
            Some(Verdict::Duplicate(_))
        ));
        assert!(matches!(
            judge(&[start.clone(), n(1, 2)], 2),
            Some(Verdict::SilentGap(_))
        ));
        assert!(matches!(
            judge(&[start.clone(), n(1, 1), done(2)], 2),
            Some(Verdict::SilentGap(_))
        ));
        let failed = ev(
            2,
            "dev.mcp-resume/task/failed",
            json!({"error": {"data": {"reason": "server-restarted"}}}),
        );
        assert_eq!(
            judge(&[start, n(1, 1), failed], 2),
            Some(Verdict::Loud("failed server-restarted".into()))
        );
    }
}
