//! `mcp-resume chaos`: the failover experiment as a tool.
//!
//! Each iteration: a fresh session, a sibling SSE reader, `emit` racing with
//! the handshake, a reader that reads over SSE to a random point and upgrades
//! with `Last-Event-ID`, and faults chosen at random (the WebSocket dropped
//! mid-stream, a reconnect over SSE or WebSocket, and with `--spawn` the
//! server killed with `kill -9` and restarted), then a final `emit`. With
//! `--sse-only` the reader never upgrades: the "upgrade" is a resume over SSE,
//! and every drop and reconnect is over SSE too. The rmcp mode
//! (`--rmcp-url`, `--spawn-rmcp`) runs the same iterations, SSE only, against
//! an rmcp server on mcp-resume-rmcp's stores, judged like the safe mode. The
//! reader follows the protocol but does not check seqs itself, so what is
//! measured is the server. The truth is the harness's own: every `emit` call
//! numbers its events `1..=count` with a count no other call of the iteration
//! uses, and what the reader delivered is judged against that, never against
//! what the server under test reads back (see `accounting`). Loud failures
//! (409, 426, close codes) are counted apart; they are allowed. Every
//! iteration is counted: judged in full, ended loudly, or a harness error.
//!
//! The gateway mode (`--gateway -- CMD`) is the deployed path: gateways on
//! one store in front of a stdio server, judged per call against the
//! child's own numbering and per session against its own state (see
//! `gateway`).

mod accounting;
mod fleet;
mod gateway;
mod iteration;
mod reader;
mod report;
mod run;
mod target;
mod tasks;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

pub use run::Mode;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
mcp-resume chaos --spawn --compare-legacy --report chaos.json --chart chaos.svg\n  \
mcp-resume chaos http://127.0.0.1:8080/mcp --iterations 1000 --seed 7\n  \
mcp-resume chaos --spawn --store redis://127.0.0.1:6379/0 --instances 3\n  \
mcp-resume chaos --spawn --store redis-cluster://127.0.0.1:7000,127.0.0.1:7001 --redis-replicas 1 --instances 3\n  \
mcp-resume chaos --spawn --sse-only --spawn-rmcp target/release/examples/rmcp_durable\n  \
mcp-resume chaos --gateway --store redis://127.0.0.1:6379/0 --instances 2 --iterations 500 \\\n    \
-- interop/python/.venv/bin/python interop/python/stdio_server.py\n  \
mcp-resume chaos --hosted target/debug/examples/rmcp_durable --store redis://127.0.0.1:6379/0 --instances 2\n  \
mcp-resume chaos --tasks target/debug/examples/conformance --spawn-redis --instances 2 --iterations 300\n  \
mcp-resume chaos --fleet --rolling-restarts 2 --scale --report fleet.json --chart fleet.svg\n  \
mcp-resume chaos --fleet --kills 1 --freezes 1 --redis-restarts 1 --redis-stalls 1 \\\n    \
-- interop/python/.venv/bin/python interop/python/stdio_server.py\n\n\
Exit codes: 0 every judged mode (safe, and rmcp when run; not legacy) judged every iteration\n\
(no harness error) and found no silent gap, duplicate, reorder or mismatch; 1 otherwise, or an\n\
error; 2 bad usage.")]
pub struct ChaosArgs {
    /// A server to test (its MCP endpoint). Omit with --spawn.
    url: Option<String>,

    /// Start our own `serve` (disk log, temporary data directory); enables the kill -9 fault.
    #[arg(long)]
    spawn: bool,

    /// Also run the same iterations against a server in --unsafe-legacy-upgrade mode
    /// (spawned; or give its URL with --legacy-url) and report both side by side.
    #[arg(long)]
    compare_legacy: bool,

    /// The legacy server's endpoint, instead of spawning one.
    #[arg(long)]
    legacy_url: Option<String>,

    /// The store of the spawned servers, passed to `serve --store`
    /// (default: the disk log in a temporary directory). `redis://HOST:PORT/DB`
    /// lets several instances serve one session (see --instances).
    #[arg(long, value_name = "STORE")]
    store: Option<String>,

    /// Passed to the spawned servers' `serve --redis-replicas`: with a
    /// replica per master, a master killed mid-run loses nothing committed.
    #[arg(long, default_value_t = 0, requires = "store")]
    redis_replicas: usize,

    /// Spawn this many instances on the one store (a redis:// store for more
    /// than one). Each iteration spreads its POSTs, its sibling reader, its
    /// reads, upgrades and resumes over them at random, and the kill fault
    /// kills one of them: the failover case.
    #[arg(long, default_value_t = 1)]
    instances: usize,

    /// Readers never upgrade to WebSocket: every read, drop and resume is over SSE.
    #[arg(long)]
    sse_only: bool,

    /// The MCP 2026-07-28 era: each iteration opens a resumable listen
    /// stream (`subscriptions/listen` with the dev.mcp-resume/resumable-listen
    /// extension) instead of initializing a session, `emit` writes to it, and
    /// every read, upgrade, drop, kill and resume is on it.
    #[arg(long)]
    listen_streams: bool,

    /// Also run the same iterations, SSE only, against an rmcp server on
    /// mcp-resume-rmcp's stores at this URL (event ids `SESSION/0/SEQ`).
    #[arg(long, value_name = "URL", conflicts_with = "spawn_rmcp")]
    rmcp_url: Option<String>,

    /// Also run the same iterations, SSE only, against a spawned
    /// `rmcp_durable` (mcp-resume-rmcp's example, at BIN): a private copy on
    /// a temporary disk log; the kill -9 fault applies.
    #[arg(long, value_name = "BIN")]
    spawn_rmcp: Option<PathBuf>,

    /// Iterations per mode.
    #[arg(long, default_value_t = 200)]
    iterations: usize,

    /// Seed of the random choices, to reproduce a run.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Stop after this many seconds per mode, whatever the iteration count.
    #[arg(long, default_value_t = 900)]
    max_secs: u64,

    /// Iterations run at once.
    #[arg(long, default_value_t = 4)]
    parallel: usize,

    /// Write a JSON report here.
    #[arg(long)]
    report: Option<PathBuf>,

    /// Write an SVG chart of upgrade latencies and gap counts here.
    #[arg(long)]
    chart: Option<PathBuf>,

    /// No progress bar.
    #[arg(long)]
    quiet: bool,

    /// Test the gateway instead: spawn `mcp-resume gateway -- CMD`
    /// (--instances of them, on --store) and make --iterations `progress`
    /// calls through them in sessions, with kill -9, freezes past the lease
    /// (SIGSTOP, SIGCONT) and client cuts resumed on any instance. CMD must
    /// offer the tools of interop/python/stdio_server.py: `progress {n}`
    /// (reports progress 1..=n to the call's progress token, answers
    /// `counted n`), `tick` (answers `PID N`, its process id and a
    /// counter of its own) and `confirm {token}` (asks the client with
    /// `elicitation/create` and answers with what it said; the harness
    /// answers on an instance picked at random). Fails on any silent gap,
    /// duplicate, hang, or session served by two processes.
    #[arg(long, requires = "command", conflicts_with_all = ["url", "spawn", "compare_legacy", "legacy_url", "rmcp_url", "spawn_rmcp", "sse_only", "listen_streams"])]
    gateway: bool,

    /// Test rmcp handlers hosted on mcp-resume instead: spawn --instances
    /// of `rmcp_durable --transport mcp-resume` (mcp-resume-rmcp's example,
    /// at BIN) on --store and run the --gateway sessions against them
    /// (`progress` and `confirm`; no `tick`: a hosted handler runs wherever
    /// a message lands).
    #[arg(long, value_name = "BIN", conflicts_with_all = ["gateway", "url", "spawn", "compare_legacy", "legacy_url", "rmcp_url", "spawn_rmcp", "sse_only", "listen_streams"])]
    hosted: Option<PathBuf>,

    /// Test resumable task event streams (SEP-2694) instead: spawn
    /// --instances of the `conformance` example (mcp-resume-rmcp's, at BIN)
    /// on --store, start --iterations tasks that each emit --task-events
    /// numbered events, and read each with `tasks/stream`, resumed with
    /// `after` on an instance picked at random after every break, a third
    /// of them cut by the client, while instances are killed with kill -9
    /// (and, with --spawn-redis, Redis restarted). Fails on any silent gap,
    /// duplicate or hung stream.
    #[arg(long, value_name = "BIN", conflicts_with_all = ["gateway", "hosted", "url", "spawn", "compare_legacy", "legacy_url", "rmcp_url", "spawn_rmcp", "sse_only", "listen_streams"])]
    tasks: Option<PathBuf>,

    /// --tasks: events each task emits (then it completes).
    #[arg(long, default_value_t = 50)]
    task_events: u64,

    /// --tasks: milliseconds between two of a task's events.
    #[arg(long, default_value_t = 20)]
    task_interval_ms: u64,

    /// --gateway, --hosted, --tasks: run a Redis of our own (`redis-server` from
    /// PATH, append-only file synced on every write) as the store, and add
    /// its restart (`kill -9`, then the same port and data) to the faults.
    #[arg(long, conflicts_with = "store")]
    spawn_redis: bool,

    /// --gateway, --hosted: `progress` calls per session.
    #[arg(long, default_value_t = 5)]
    calls_per_session: usize,

    /// --gateway, --hosted: seconds an instance stays frozen; past the 10 s lease by default.
    #[arg(long, default_value_t = 12)]
    freeze_secs: u64,

    /// --gateway, --hosted: seconds between faults (each a kill -9 and
    /// restart, or a freeze, of an instance picked at random); 0 for none.
    #[arg(long, default_value_t = 5)]
    fault_every_secs: u64,

    /// --gateway, --hosted: a call with no end after this many seconds is hung.
    #[arg(long, default_value_t = 60)]
    call_bound_secs: u64,

    /// The fleet mode (--fleet and its operations).
    #[command(flatten)]
    fleet: fleet::FleetFlags,

    /// --gateway, or --fleet of gateways: the MCP server (stdio) behind them, after `--`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the experiment.
pub async fn chaos(args: ChaosArgs) -> Result<ExitCode, String> {
    if args.fleet.on() {
        let cx = fleet::Context {
            instances: if args.instances > 1 {
                args.instances
            } else {
                3
            },
            hosted: args.hosted.as_deref(),
            command: &args.command,
            seed: args.seed,
            freeze_secs: args.freeze_secs,
            report: args.report.as_deref(),
            chart: args.chart.as_deref(),
        };
        let clean = fleet::run(&args.fleet, &cx).await?;
        return Ok(if clean {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    if let Some(bin) = &args.tasks {
        return chaos_tasks(&args, bin).await;
    }
    if args.gateway || args.hosted.is_some() {
        return chaos_gateway(&args).await;
    }
    if !args.command.is_empty() {
        return Err("a command after -- is for --gateway".into());
    }
    if args.url.is_some() == args.spawn {
        return Err("give either a URL or --spawn".into());
    }
    if !args.spawn && (args.store.is_some() || args.instances > 1) {
        return Err("--store and --instances are for --spawn or --gateway".into());
    }
    let opts = run::Options {
        iterations: args.iterations,
        seed: args.seed,
        max: Duration::from_secs(args.max_secs),
        parallel: args.parallel.max(1),
        quiet: args.quiet,
        store: match (&args.url, &args.store) {
            (Some(_), _) => "remote".into(),
            (None, Some(s)) => s.clone(),
            (None, None) => "disk".into(),
        },
        instances: if args.url.is_some() {
            1
        } else {
            args.instances
        },
        sse_only: args.sse_only,
        listen: args.listen_streams,
    };
    shared_store(&args)?;
    let spawn = |legacy| {
        target::Target::spawn(&target::SpawnOptions {
            legacy,
            store: args.store.clone(),
            redis_replicas: args.redis_replicas,
            instances: args.instances,
        })
    };
    let safe_target = match &args.url {
        Some(u) => target::Target::remote(u),
        None => spawn(false)?,
    };
    let mut results = vec![run::run(Mode::Safe, safe_target, &opts).await?];
    if args.compare_legacy {
        let legacy_target = match &args.legacy_url {
            Some(u) => target::Target::remote(u),
            None => spawn(true)?,
        };
        results.push(run::run(Mode::Legacy, legacy_target, &opts).await?);
    }
    let rmcp_target = match (&args.rmcp_url, &args.spawn_rmcp) {
        (Some(u), _) => Some(target::Target::remote(u)),
        (None, Some(bin)) => Some(target::Target::spawn_rmcp(bin)?),
        (None, None) => None,
    };
    if let Some(t) = rmcp_target {
        results.push(run::run(Mode::Rmcp, t, &opts).await?);
    }
    report::print_table(&results);
    if let Some(p) = &args.report {
        report::write_json(p, &results, &opts)
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    if let Some(p) = &args.chart {
        report::write_svg(p, &results).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    // The exit code judges every mode but legacy, each on its own.
    let mut failed = false;
    for r in results.iter().filter(|r| r.mode != Mode::Legacy.name()) {
        let failures = r.failures();
        if !failures.is_empty() {
            eprintln!(
                "mcp-resume chaos: the {} mode fails: {}",
                r.mode,
                failures.join(", ")
            );
            failed = true;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `--instances` above 1 needs a store the instances share.
fn shared_store(args: &ChaosArgs) -> Result<(), String> {
    let shared = args
        .store
        .as_deref()
        .is_some_and(|s| s.starts_with("redis://") || s.starts_with("redis-cluster://"));
    if args.instances > 1 && !shared {
        return Err(
            "--instances above 1 needs a shared store: --store redis://HOST:PORT/DB \
             or redis-cluster://HOST:PORT,..."
                .into(),
        );
    }
    Ok(())
}

/// The Redis of our own with --spawn-redis (the store then); without it,
/// --store must be one the instances share.
fn own_store(args: &ChaosArgs) -> Result<Option<crate::fleet::redis::OwnRedis>, String> {
    if args.spawn_redis {
        return crate::fleet::redis::OwnRedis::start().map(Some);
    }
    shared_store(args)?;
    Ok(None)
}

/// The tasks mode: its own run, table, report and verdict.
async fn chaos_tasks(args: &ChaosArgs, bin: &std::path::Path) -> Result<ExitCode, String> {
    let redis = own_store(args)?;
    let store = redis
        .as_ref()
        .map(|r| r.url.as_str())
        .or(args.store.as_deref());
    let store_name = store.unwrap_or("disk").to_owned();
    let target = target::Target::spawn_hosted(bin, store, args.instances.max(1))?;
    let opts = tasks::Options {
        tasks: args.iterations,
        parallel: args.parallel.max(1),
        count: args.task_events,
        interval_ms: args.task_interval_ms,
        fault_every: Duration::from_secs(args.fault_every_secs),
        bound: Duration::from_secs(args.call_bound_secs),
        seed: args.seed,
    };
    let tally = tasks::run(target, redis, &opts).await?;
    tally.print();
    if let Some(p) = &args.report {
        let about = serde_json::json!({
            "seed": args.seed, "store": store_name, "spawn_redis": args.spawn_redis,
            "instances": args.instances, "tasks": args.iterations, "parallel": args.parallel,
            "task_events": args.task_events, "task_interval_ms": args.task_interval_ms,
            "fault_every_secs": args.fault_every_secs, "bound_secs": args.call_bound_secs,
        });
        let text = serde_json::to_string_pretty(&tally.json(about)).unwrap_or_default();
        std::fs::write(p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    let failures = tally.failures();
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "mcp-resume chaos: the tasks mode fails: {}",
        failures.join(", ")
    );
    Ok(ExitCode::FAILURE)
}

/// The gateway and hosted modes: their own run, table, report and verdict.
async fn chaos_gateway(args: &ChaosArgs) -> Result<ExitCode, String> {
    if args.hosted.is_some() && !args.command.is_empty() {
        return Err("--hosted runs rmcp_durable: no command after --".into());
    }
    let redis = own_store(args)?;
    let store = redis
        .as_ref()
        .map(|r| r.url.as_str())
        .or(args.store.as_deref());
    let n = args.instances.max(1);
    let (target, mode) = match &args.hosted {
        Some(bin) => (target::Target::spawn_hosted(bin, store, n)?, "hosted"),
        None => (
            target::Target::spawn_gateway(store, n, &args.command)?,
            "gateway",
        ),
    };
    let opts = gateway::Options {
        calls: args.iterations,
        calls_per_session: args.calls_per_session,
        ticks: args.hosted.is_none(),
        parallel: args.parallel.max(1),
        seed: args.seed,
        max: Duration::from_secs(args.max_secs),
        freeze: Duration::from_secs(args.freeze_secs),
        fault_every: Duration::from_secs(args.fault_every_secs),
        bound: Duration::from_secs(args.call_bound_secs),
        quiet: args.quiet,
    };
    let store_name = store.unwrap_or("disk").to_owned();
    let tally = gateway::run(target, redis, &opts).await?;
    gateway::print_table(&tally);
    if let Some(p) = &args.report {
        let about = serde_json::json!({
            "seed": args.seed,
            "store": store_name,
            "spawn_redis": args.spawn_redis,
            "instances": args.instances,
            "command": args.command,
            "calls_asked": args.iterations,
            "calls_per_session": args.calls_per_session,
            "parallel": args.parallel,
            "freeze_secs": args.freeze_secs,
            "fault_every_secs": args.fault_every_secs,
            "call_bound_secs": args.call_bound_secs,
        });
        gateway::write_json(p, mode, &tally, about)
            .map_err(|e| format!("writing {}: {e}", p.display()))?;
    }
    let failures = tally.failures();
    if failures.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "mcp-resume chaos: the {mode} mode fails: {}",
        failures.join(", ")
    );
    Ok(ExitCode::FAILURE)
}
