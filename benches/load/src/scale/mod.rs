//! `scale`: many live sessions on `serve`, each with an open GET stream,
//! then events at a steady rate to random sessions; every event must reach
//! its session's reader exactly once. Reported: RSS per session, delivery
//! latency (POST sent to the event read), CPU per 1,000 events, and on
//! Redis its memory and commands (per second, per event, the busiest); the
//! maintenance pass time each instance reports. The last line names `lost
//! N` and `duplicates N`.
//!
//! `--compare` runs the disk log (one instance) and the Redis fleet
//! (`--instances` on one Redis) one after the other in one invocation, with
//! the same sessions, rate and client, and prints the ratios Redis / disk:
//! what moving from one machine to a fleet costs per event.

mod measure;
mod probes;

pub(crate) use probes::cpu_secs;

use std::path::PathBuf;

/// What one run measured.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Seconds to open every session and its GET stream.
    pub setup_secs: f64,
    /// Server CPU (all instances) per 1,000 sessions opened: what bounds
    /// the open rate of an instance on a core of its own.
    pub open_cpu_ms_per_1000: f64,
    /// Redis's CPU per 1,000 sessions opened: what bounds the fleet's.
    pub open_redis_cpu_ms_per_1000: Option<f64>,
    /// Resident memory per session, all instances together.
    pub rss_per_session_kib: f64,
    /// Delivery latency, POST sent to event read.
    pub p50_ms: f64,
    /// The same, 99th percentile.
    pub p99_ms: f64,
    /// Server CPU (user + system, all instances) per 1,000 events.
    pub cpu_ms_per_1000: f64,
    /// Redis commands (scripts' own counted) per event sent.
    pub commands_per_event: Option<f64>,
    /// Redis's own CPU (user + system) per 1,000 events.
    pub redis_cpu_ms_per_1000: Option<f64>,
    /// Redis memory grown per session.
    pub redis_bytes_per_session: Option<f64>,
    /// Events sent and never delivered.
    pub lost: u64,
    /// Events delivered twice.
    pub duplicates: u64,
}

/// What `mcp-resume-load scale` takes. Raise the descriptor limit first
/// (`ulimit -n 200000`).
#[derive(clap::Args)]
pub struct Args {
    /// Live sessions, each with a GET stream.
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Seconds of events.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Events per second, each to a random session.
    #[arg(long, default_value_t = 1_000)]
    rate: u64,
    /// On a Redis of its own instead of the disk log.
    #[arg(long, conflicts_with = "compare")]
    redis: bool,
    /// Run the disk log and the Redis fleet one after the other and print
    /// the ratios Redis / disk.
    #[arg(long)]
    compare: bool,
    /// Instances on that Redis (sessions spread round-robin).
    #[arg(long, default_value_t = 2)]
    instances: usize,
    /// Send each session's `emit` calls to the next instance, not the one
    /// that holds its GET stream: every event is committed on one instance
    /// and delivered by another, as behind a balancer without stickiness
    /// (half the time with two instances). By default a session's calls go
    /// to its GET stream's instance, whose readers get the commit from the
    /// append script's reply. The disk log's one instance is both.
    #[arg(long)]
    calls_elsewhere: bool,
    /// Append the report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// An argument for each `serve` (repeat it), e.g.
    /// `--serve-arg=--session-ttl-secs=60` to compare a setting in one build.
    #[arg(long = "serve-arg", allow_hyphen_values = true)]
    serve_args: Vec<String>,
    /// An argument for the Redis it starts (repeat it), e.g.
    /// `--redis-arg=--stream-node-max-bytes --redis-arg=1024`.
    #[arg(long = "redis-arg", allow_hyphen_values = true)]
    redis_args: Vec<String>,
}

/// Runs `scale`.
pub async fn run(args: Args) {
    let one = |redis: bool| measure::run(&args, redis);
    if !args.compare {
        one(args.redis).await;
        return;
    }
    let disk = one(false).await;
    let redis = one(true).await;
    let table = ratios(&disk, &redis, args.instances);
    println!("{table}");
    if let Some(path) = &args.out {
        let mut text = std::fs::read_to_string(path).unwrap_or_default();
        text.push_str(&table);
        text.push('\n');
        std::fs::write(path, text).unwrap();
    }
}

/// The comparison's table: each figure on disk and on Redis, and the ratio.
fn ratios(disk: &Figures, redis: &Figures, instances: usize) -> String {
    let row = |name: &str, d: f64, r: f64, unit: &str| {
        format!(
            "| {name} | {d:.2} {unit} | {r:.2} {unit} | {:.2} |\n",
            r / d
        )
    };
    let mut t = format!(
        "### Redis ({instances} instances) against the disk log (one instance), one run each\n\n\
         | figure | disk | Redis | Redis / disk |\n| --- | ---: | ---: | ---: |\n"
    );
    t += &row("delivery latency p50", disk.p50_ms, redis.p50_ms, "ms");
    t += &row("delivery latency p99", disk.p99_ms, redis.p99_ms, "ms");
    t += &row(
        "server CPU per 1,000 events",
        disk.cpu_ms_per_1000,
        redis.cpu_ms_per_1000,
        "ms",
    );
    t += &row(
        "time to open the sessions",
        disk.setup_secs,
        redis.setup_secs,
        "s",
    );
    t += &row(
        "server CPU per 1,000 sessions opened",
        disk.open_cpu_ms_per_1000,
        redis.open_cpu_ms_per_1000,
        "ms",
    );
    if let Some(c) = redis.open_redis_cpu_ms_per_1000 {
        t += &format!("| Redis CPU per 1,000 sessions opened | | {c:.0} ms | |\n");
    }
    t += &row(
        "RSS per session",
        disk.rss_per_session_kib,
        redis.rss_per_session_kib,
        "KiB",
    );
    if let Some(c) = redis.commands_per_event {
        t += &format!("| Redis commands per event | | {c:.2} | |\n");
    }
    if let Some(c) = redis.redis_cpu_ms_per_1000 {
        t += &format!("| Redis CPU per 1,000 events | | {c:.0} ms | |\n");
    }
    if let Some(b) = redis.redis_bytes_per_session {
        t += &format!("| Redis memory per session | | {b:.0} B | |\n");
    }
    t += &format!(
        "\nlost: disk {}, Redis {}; duplicates: disk {}, Redis {}\n",
        disk.lost, redis.lost, disk.duplicates, redis.duplicates
    );
    t
}
