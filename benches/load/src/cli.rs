//! The load tool's command line: each benchmark and its settings, with the
//! help `--help` prints.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::{paths, scale};

#[derive(Parser)]
#[command(about = "Benchmarks: mcp-resume side by side with the official SDK servers")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Workloads (a)-(e) of issue 8 against ours and, unless --ours-only, both SDK servers.
    Compare {
        /// Seconds of (a).
        #[arg(long, default_value_t = 15)]
        duration: u64,
        /// Connections of (a).
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Notifications of (b) and (c).
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Sessions of (d).
        #[arg(long, default_value_t = 2_000)]
        sessions: usize,
        /// WebSockets of (e); 0 skips it. Each side needs one descriptor per socket,
        /// and this machine caps a process at 20,000, hence 18,000.
        #[arg(long, default_value_t = 18_000)]
        ws_conns: usize,
        /// Skip the SDK servers.
        #[arg(long)]
        ours_only: bool,
        /// Also measure (d) for ours with the GET streams multiplexed over HTTP/2 (100 per connection).
        #[arg(long)]
        h2: bool,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Delivery across instances: tools/call on instance A to the event on an SSE
    /// reader on instance B (two `serve` processes on one Redis of its own), beside
    /// the same within one instance on Redis and on the disk log.
    Cross {
        /// Probes per session.
        #[arg(long, default_value_t = 1000)]
        probes: usize,
        /// Sessions probing at once, in the loaded rows.
        #[arg(long, default_value_t = 64)]
        sessions: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// This build against a baseline binary (an older commit's `mcp-resume`),
    /// alternating in one run: tools/call round trips/s (a), notifications/s
    /// to one SSE reader (b) and RSS per idle session with a GET stream (c),
    /// with the ratio this/baseline.
    Baseline {
        /// The baseline `mcp-resume` binary.
        #[arg(long)]
        baseline_bin: PathBuf,
        /// Rounds; each runs both binaries once, in alternating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds of (a) per run.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Connections of (a).
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Notifications of (b).
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Idle sessions, each with a GET stream, for RSS per session (c); 0 skips it.
        #[arg(long, default_value_t = 1_000)]
        idle_sessions: usize,
        /// Extra arguments for both servers' `serve` (e.g. `--bearer-token x`), space-separated.
        #[arg(long, default_value = "")]
        serve_args: String,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The gateway's cost: tools/call latency through `mcp-resume gateway`
    /// against the same stdio server driven directly, and the gateway's
    /// memory per session (the Python SDK stdio server of the gateway tests),
    /// beside the same client's round trip to bare hyper (the HTTP floor).
    Gateway {
        /// The stdio server: `python` (the Python SDK's, as users run) or
        /// `lean` (this tool's `stdio-child`, whose own time is negligible).
        #[arg(long, default_value = "python", value_parser = ["python", "lean"])]
        child: String,
        /// Sequential calls measured on each path.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// Sessions (each with its child) for the memory per session.
        #[arg(long, default_value_t = 50)]
        sessions: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Two gateways on one Redis: a call forwarded to the session's owner
    /// (p50, p99) and the Redis commands/s of idle sessions, this build
    /// against `--baseline` (a previous release's mcp-resume) alternating.
    Forwarded {
        /// A previous release's `mcp-resume` binary to compare with.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// Rounds; each runs every build once, alternating the order.
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Sequential forwarded calls per run.
        #[arg(long, default_value_t = 500)]
        calls: usize,
        /// Idle sessions (each with its child) for the Redis commands/s.
        #[arg(long, default_value_t = 100)]
        idle: usize,
        /// The child behind the gateways: this tool's own `stdio-child` (a
        /// few MiB each, for a thousand idle sessions) instead of the
        /// Python SDK stdio server.
        #[arg(long)]
        lean_child: bool,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The leanest MCP server over stdio (`initialize`, `ping`,
    /// `tools/list`, `tools/call add`), for the gateway benchmarks to run
    /// by the thousand; not a benchmark itself.
    StdioChild,
    /// MCP 2026-07-28's stateless tools/call beside the 2025 session path,
    /// alternating in one run, on the `conformance` example (both eras at one
    /// URL): round trips/s and the ratio stateless/session.
    Stateless {
        /// Rounds; each runs both paths once, in alternating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Seconds per path per round.
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Connections.
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Instead: stateless calls directly to the example against the same
        /// through `mcp-resume gateway --upstream` in front of it.
        #[arg(long)]
        gateway: bool,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// An rmcp handler hosted on mcp-resume (`rmcp_durable --transport mcp-resume`)
    /// beside the native tools, per build directory (each with `mcp-resume` and
    /// `rmcp_durable`), alternating: echo round trips/s and notifications/s.
    Hosted {
        /// Build directories, e.g. target/release/examples-and-bin copies; comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        builds: Vec<PathBuf>,
        /// Rounds; each runs every row once, alternating the order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Notifications per run.
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        /// Seconds of echo per run.
        #[arg(long, default_value_t = 5)]
        duration: u64,
        /// Echo connections.
        #[arg(long, default_value_t = 64)]
        conns: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Resumable task event streams (SEP-2694) on the `conformance` example
    /// (disk log): events/s to one `tasks/stream` reader, and the latency
    /// from the work's `event()` to the client at a paced rate.
    TaskEvents {
        /// Events of the throughput run.
        #[arg(long, default_value_t = 100_000)]
        events: u64,
        /// Events of the latency run (1 ms apart).
        #[arg(long, default_value_t = 2_000)]
        paced: u64,
        /// Rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Many live sessions on `serve`, each with an open GET stream (HTTP/2,
    /// 100 per connection), then events at a steady rate to random sessions:
    /// every event delivered to its reader exactly once (the last line names
    /// `lost` and `duplicates`), with RSS per session, delivery latency, CPU
    /// per 1,000 events, Redis memory and commands/s, maintenance pass time.
    Scale(scale::Args),
    /// What the balancer of a fleet adds: `mcp-resume fleet` (HAProxy from
    /// deploy/haproxy.cfg in front of instances on one Redis) answering echo
    /// through the balancer and directly, rounds alternating.
    Balancer {
        /// Instances behind the balancer.
        #[arg(long, default_value_t = 2)]
        instances: usize,
        /// Connections (each a session of its own).
        #[arg(long, default_value_t = 32)]
        conns: usize,
        /// Seconds of each measurement.
        #[arg(long, default_value_t = 5)]
        secs: u64,
        /// Rounds, the order alternating.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// The cores the instances share (e.g. 0.5), held to it by a cgroup
        /// CPU quota (needs root): the instances then bound the calls, as
        /// when HAProxy and the client have cores of their own. Unset, all
        /// share the machine's cores.
        #[arg(long, value_name = "CORES")]
        instances_cpu: Option<f64>,
        /// The CPUs the instances run on (a list as taskset takes it: 0,
        /// 0,2, 1-3); the client, HAProxy and Redis run on the others, so
        /// that the instances are not preempted by the balancer they are
        /// measured behind. Needs util-linux's taskset. With
        /// --instances-cpu, the instances also share only that much of
        /// these CPUs.
        #[arg(long, value_name = "LIST")]
        instances_cpus: Option<String>,
        /// Append the table to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Every deployed path side by side with the same client (bare hyper,
    /// the TypeScript SDK, rmcp alone, native `serve`, rmcp hosted, rmcp on
    /// our stores): echo/s and p50, notifications/s, idle KiB per session,
    /// and issue 24's goals judged from the medians.
    Paths(paths::Args),
    /// The ceiling `paths` measures against: bare hyper + serde_json
    /// answering echo on a free port; not a benchmark itself.
    BareServer,
    /// Upgrade time to first live frame, safe vs legacy; events/s over WebSocket vs SSE.
    Upgrade {
        /// Upgrades per mode.
        #[arg(long, default_value_t = 300)]
        iterations: usize,
        /// Events for the WebSocket vs SSE rate.
        #[arg(long, default_value_t = 50_000)]
        events: usize,
        /// Write the table here too.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}
