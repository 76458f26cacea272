//! One scale measurement: many live sessions on `serve`, each with an open
//! GET stream, then events at a steady rate to random sessions; every event
//! must reach its session's reader exactly once.
//!
//! Sessions and their GET streams share HTTP/2 connections (h2c, 100
//! streams each), so descriptors are not the limit. Events are
//! `tools/call emit {count: 1}`, which appends one notification to the
//! session stream the GET reads. Reported: RSS per session, delivery
//! latency (POST sent to the event read), CPU per 1,000 events, and on
//! Redis its memory and commands/s; the maintenance pass time each
//! instance reports (`mcp_resume_maintenance_pass_duration_seconds`).
//! The last line names `lost N` and `duplicates N`.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::json;

use super::probes::{busiest, commands_ran, redis_memory, scrape, servers_cpu};
use super::Figures;
use crate::servers::{self, Server};
use crate::workloads::{session_with, Session};

/// One session's reader: what it was sent and what it got.
#[derive(Default)]
struct Tally {
    sent: Mutex<VecDeque<Instant>>,
    got: AtomicU64,
    duplicates: AtomicU64,
}

/// Sessions being opened at once (each an `initialize`, its notification
/// and its GET stream).
const OPENING: usize = 512;

/// How long one `emit` call may take before it is counted as unanswered
/// (the run never waits forever on a call).
const CALL_DEADLINE: Duration = Duration::from_secs(30);

/// What every reader shares.
#[derive(Default)]
struct Totals {
    latencies_us: Mutex<Vec<u64>>,
}

/// Events the readers have read so far, all sessions together.
fn delivered(held: &[(Arc<Session>, Arc<Tally>)]) -> u64 {
    held.iter()
        .map(|(_, t)| t.got.load(Ordering::Relaxed))
        .sum()
}

/// The seq at the end of an SSE id (`5`, `0/5`, ...).
fn seq_of(id: &str) -> Option<u64> {
    let digits: String = id
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// Reads one session's GET stream until it ends, tallying its events.
async fn read(resp: reqwest::Response, tally: Arc<Tally>, totals: Arc<Totals>) {
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut last = 0u64;
    while let Some(Ok(chunk)) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            if !block.contains("notifications/message") {
                continue; // a priming event, a keep-alive comment
            }
            let seq = block
                .lines()
                .find_map(|l| l.strip_prefix("id:"))
                .and_then(|id| seq_of(id.trim()));
            if let Some(seq) = seq {
                if seq <= last {
                    tally.duplicates.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                last = seq;
            }
            tally.got.fetch_add(1, Ordering::Relaxed);
            let sent = tally.sent.lock().unwrap().pop_front();
            if let Some(t) = sent {
                totals
                    .latencies_us
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_micros() as u64);
            }
        }
    }
}

/// One run: on the disk log (one instance), or with `instances` on one
/// Redis of its own; the report goes to stdout (and appended to `out`), the
/// figures back to the caller.
pub async fn run(args: &super::Args, redis: bool) -> Figures {
    let (sessions, rate, instances) = (args.sessions, args.rate, args.instances);
    let (out, serve_args) = (args.out.as_ref(), &args.serve_args);
    let duration = Duration::from_secs(args.duration);
    let bin = servers::our_binary();
    let redis_args: Vec<&str> = args.redis_args.iter().map(String::as_str).collect();
    let redis_server = redis.then(|| mcp_resume_testkit::RedisServer::start_with(&redis_args));
    let store: Vec<String> = match &redis_server {
        Some(r) => vec!["--store".into(), r.url.clone()],
        None => Vec::new(),
    };
    let n = if redis { instances.max(1) } else { 1 };
    let extra: Vec<&str> = store.iter().chain(serve_args).map(String::as_str).collect();
    let servers: Vec<Server> = (0..n).map(|_| servers::ours(&bin, &extra)).collect();
    let where_ = match &redis_server {
        Some(_) => format!("{n} instances on one Redis"),
        None => "one instance, disk log".to_owned(),
    };
    let mut settings = String::new();
    if !serve_args.is_empty() {
        settings += &format!("; serve {}", serve_args.join(" "));
    }
    if redis && !redis_args.is_empty() {
        settings += &format!("; redis-server {}", redis_args.join(" "));
    }
    if redis && args.calls_elsewhere {
        settings += "; each session's calls to another instance than its GET stream's";
    }
    println!("scale: {sessions} sessions, {where_}, HTTP/2 (100 streams per connection){settings}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before: Vec<u64> = servers.iter().map(Server::rss_kib).collect();
    let redis_mem_before = redis_server.as_ref().map(redis_memory).unwrap_or(0);

    // Sessions and their GET streams, 100 per HTTP/2 connection.
    let clients: Vec<reqwest::Client> = (0..sessions.div_ceil(100))
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .unwrap()
        })
        .collect();
    let totals = Arc::new(Totals::default());
    let mut held: Vec<(Arc<Session>, Arc<Tally>)> = Vec::with_capacity(sessions);
    let open_cpu0 = servers_cpu(&servers);
    let open_redis_cpu0 = redis_server.as_ref().map(|r| r.cpu_secs());
    let started = Instant::now();
    // OPENING at a time, a new one as soon as one is open (not in waves
    // that each wait for their slowest): the rate is the servers'.
    let opening = Arc::new(tokio::sync::Semaphore::new(OPENING));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let permit = opening.clone().acquire_owned().await.unwrap();
        let http = clients[i / 100].clone();
        let url = servers[i % n].url.clone();
        // Where its calls go: the GET stream's instance, or the next one.
        let calls = servers[(i + usize::from(args.calls_elsewhere)) % n]
            .url
            .clone();
        let totals = totals.clone();
        tasks.spawn(async move {
            let s = session_with(http, &url).await;
            let tally = Arc::new(Tally::default());
            let resp = s.get(None).await;
            assert!(resp.status().is_success(), "GET: {}", resp.status());
            tokio::spawn(read(resp, tally.clone(), totals));
            drop(permit);
            (Arc::new(Session { url: calls, ..s }), tally)
        });
        while let Some(done) = tasks.try_join_next() {
            held.push(done.unwrap());
        }
    }
    while let Some(done) = tasks.join_next().await {
        held.push(done.unwrap());
    }
    let setup = started.elapsed();
    // CPU per 1,000 opens: an instance on a core of its own opens at most
    // 1e6 / this many a second (the client and Redis share this machine).
    let per_1k_opens = 1000.0 / sessions.max(1) as f64;
    let open_cpu = (servers_cpu(&servers) - open_cpu0) * 1e3 * per_1k_opens;
    let open_redis_cpu = redis_server
        .as_ref()
        .zip(open_redis_cpu0)
        .map(|(r, before)| (r.cpu_secs() - before) * 1e3 * per_1k_opens);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after: Vec<u64> = servers.iter().map(Server::rss_kib).collect();
    let rss_per = rss_after
        .iter()
        .zip(&rss_before)
        .map(|(a, b)| a.saturating_sub(*b))
        .sum::<u64>() as f64
        * 1024.0
        / sessions as f64;
    println!(
        "{sessions} sessions with a GET stream each in {setup:.1?}; {:.2} KiB RSS per session",
        rss_per / 1024.0
    );

    // Events at `rate`/s to random sessions.
    let cpu0 = servers_cpu(&servers);
    let cmds0 = redis_server.as_ref().map(|r| r.commands_by_name());
    let usec0 = redis_server.as_ref().map(|r| r.command_usec_by_name());
    let redis_cpu0 = redis_server.as_ref().map(|r| r.cpu_secs());
    let sent = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let limit = Arc::new(tokio::sync::Semaphore::new(512));
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    let t0 = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let per_tick = (rate / 100).max(1);
    let mut id = 1u64;
    let unanswered = Arc::new(AtomicU64::new(0));
    let mut last_progress = Instant::now();
    while t0.elapsed() < duration {
        tick.tick().await;
        for _ in 0..per_tick {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let (s, tally) = held[(rng % sessions as u64) as usize].clone();
            let permit = limit.clone().acquire_owned().await.unwrap();
            let (sent, refused, unanswered) = (sent.clone(), refused.clone(), unanswered.clone());
            id += 1;
            let call = id;
            tokio::spawn(async move {
                tally.sent.lock().unwrap().push_back(Instant::now());
                let call = s.call(call, "emit", json!({"count": 1}));
                match tokio::time::timeout(CALL_DEADLINE, call).await {
                    Ok(r) if r.contains("\"error\"") || r.contains("isError\":true") => {
                        tally.sent.lock().unwrap().pop_back();
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    // Its event may still come: counted as sent, so it is
                    // either delivered or lost, never unseen.
                    Err(_) => {
                        sent.fetch_add(1, Ordering::Relaxed);
                        unanswered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                drop(permit);
            });
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let got = delivered(&held);
            eprintln!(
                "scale: {:.0} s: sent {}, delivered {got}, unanswered {}, in flight {}",
                t0.elapsed().as_secs_f64(),
                sent.load(Ordering::Relaxed),
                unanswered.load(Ordering::Relaxed),
                512 - limit.available_permits()
            );
        }
    }
    // Every call ends within its deadline, so this wait is bounded too.
    let _ = limit.acquire_many(512).await;
    let load_secs = t0.elapsed().as_secs_f64();
    // What is still on its way.
    let sent = sent.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered(&held) < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu = servers_cpu(&servers) - cpu0;
    // One reading after the load: the total and the busiest come from it.
    let redis_ran = redis_server
        .as_ref()
        .zip(cmds0)
        .map(|(r, before)| commands_ran(&before, &r.commands_by_name()));
    let redis_cmds = redis_ran
        .as_ref()
        .map(|ran| ran.iter().map(|(n, _)| n).sum::<u64>() as f64 / load_secs);
    let redis_mem = redis_server
        .as_ref()
        .map(|r| redis_memory(r) - redis_mem_before);
    let redis_top = redis_ran.map(|ran| busiest(&ran, load_secs));
    // Where Redis's time went: its CPU, and the time in each command
    // (`usec`), per 1,000 events sent.
    let per_1k = 1000.0 / sent.max(1) as f64;
    let redis_cpu = redis_server
        .as_ref()
        .zip(redis_cpu0)
        .map(|(r, before)| (r.cpu_secs() - before) * 1000.0 * per_1k);
    let redis_costliest = redis_server.as_ref().zip(usec0).map(|(r, before)| {
        let spent = commands_ran(&before, &r.command_usec_by_name());
        spent
            .iter()
            .take(6)
            .map(|(us, name)| format!("{name} {:.1} ms", *us as f64 / 1000.0 * per_1k))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let received = delivered(&held);
    let duplicates: u64 = held
        .iter()
        .map(|(_, t)| t.duplicates.load(Ordering::Relaxed))
        .sum();
    let lost = sent.saturating_sub(received);
    let mut lat = std::mem::take(&mut *totals.latencies_us.lock().unwrap());
    lat.sort_unstable();
    let p = |q: f64| {
        lat.get(((lat.len() as f64 - 1.0) * q) as usize)
            .map(|u| *u as f64 / 1000.0)
            .unwrap_or(f64::NAN)
    };
    let mut passes = Vec::new();
    for s in &servers {
        let sum = scrape(&s.url, "mcp_resume_maintenance_pass_duration_seconds_sum").await;
        let count = scrape(&s.url, "mcp_resume_maintenance_pass_duration_seconds_count").await;
        let buckets = scrape(&s.url, "mcp_resume_maintenance_buckets").await;
        passes.push(format!(
            "{:.1} ms mean over {count} passes, {buckets} buckets",
            sum / count * 1e3
        ));
    }

    let mut md = String::new();
    let mut line = |l: String| {
        println!("{l}");
        let _ = writeln!(md, "{l}");
    };
    line(format!("### {sessions} sessions, {where_}"));
    line(String::new());
    line(format!(
        "`mcp-resume-load scale --sessions {sessions} --duration {} --rate {rate}{}`",
        duration.as_secs(),
        if redis {
            format!(" --redis --instances {n}")
        } else {
            String::new()
        }
    ));
    line(String::new());
    line("| figure | value |".into());
    line("| --- | ---: |".into());
    line(format!(
        "| sessions, each with an open GET stream (HTTP/2, 100 per connection) | {sessions} |"
    ));
    line(format!(
        "| time to open them all | {:.1} s |",
        setup.as_secs_f64()
    ));
    line(format!(
        "| server CPU per 1,000 sessions opened (all instances) | {open_cpu:.0} ms |"
    ));
    if let Some(c) = open_redis_cpu {
        line(format!(
            "| Redis CPU per 1,000 sessions opened | {c:.0} ms |"
        ));
    }
    line(format!(
        "| RSS per session (all instances) | {:.2} KiB |",
        rss_per / 1024.0
    ));
    line(format!(
        "| events sent ({rate}/s asked, {load_secs:.0} s) | {sent} ({:.0}/s) |",
        sent as f64 / load_secs
    ));
    line(format!(
        "| emits refused | {} |",
        refused.load(Ordering::Relaxed)
    ));
    line(format!(
        "| emits unanswered within {} s | {} |",
        CALL_DEADLINE.as_secs(),
        unanswered.load(Ordering::Relaxed)
    ));
    line(format!("| events delivered | {received} |"));
    line(format!(
        "| delivery latency (POST sent to event read), p50 / p99 | {:.2} / {:.2} ms |",
        p(0.5),
        p(0.99)
    ));
    line(format!(
        "| server CPU per 1,000 events (all instances) | {:.0} ms |",
        cpu * 1e3 / (sent.max(1) as f64 / 1000.0)
    ));
    if let (Some(c), Some(m)) = (redis_cmds, redis_mem) {
        line(format!("| Redis commands/s during the load | {c:.0} |"));
        line(format!("| Redis memory (used_memory growth from the start) | {:.1} MiB ({:.0} B per session) |", m as f64 / 1048576.0, m as f64 / sessions as f64));
    }
    if let Some(c) = redis_cpu {
        line(format!("| Redis CPU per 1,000 events | {c:.0} ms |"));
    }
    if let Some(top) = &redis_costliest {
        line(format!(
            "| Redis time in commands per 1,000 events (the costliest) | {top} |"
        ));
    }
    if let Some(top) = &redis_top {
        line(format!(
            "| Redis commands/s by command (the busiest) | {top} |"
        ));
    }
    for (i, p) in passes.iter().enumerate() {
        line(format!("| maintenance pass, instance {} | {p} |", i + 1));
    }
    line(String::new());
    line(format!("scale: sessions {sessions}, sent {sent}, delivered {received}, lost {lost}, duplicates {duplicates}"));
    if let Some(path) = out {
        let mut text = std::fs::read_to_string(path).unwrap_or_default();
        text.push_str(&md);
        text.push('\n');
        std::fs::write(path, text).unwrap();
    }
    drop(held);
    Figures {
        setup_secs: setup.as_secs_f64(),
        open_cpu_ms_per_1000: open_cpu,
        open_redis_cpu_ms_per_1000: open_redis_cpu,
        rss_per_session_kib: rss_per / 1024.0,
        p50_ms: p(0.5),
        p99_ms: p(0.99),
        cpu_ms_per_1000: cpu * 1e3 / (sent.max(1) as f64 / 1000.0),
        commands_per_event: redis_cmds.map(|c| c * load_secs / sent.max(1) as f64),
        redis_cpu_ms_per_1000: redis_cpu,
        redis_bytes_per_session: redis_mem.map(|m| m as f64 / sessions as f64),
        lost,
        duplicates,
    }
}
