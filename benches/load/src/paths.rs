//! `paths`: every way a user deploys an MCP server here, measured with the
//! same client in one run (issue 24 item 6), and the goals judged
//! from the medians: the bare hyper ceiling, the TypeScript SDK, rmcp alone,
//! native `serve`, an rmcp handler hosted on mcp-resume, and rmcp's own
//! service on mcp-resume's stores. Rounds alternate the order of the rows.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::servers::{self, Server};
use crate::workloads;

/// How much `paths` measures, and where it finds the servers.
#[derive(clap::Args)]
pub struct Args {
    /// Rounds; each runs every row once, alternating the order.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds of `tools/call echo` per row per round.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Connections (one session each) for echo.
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// Notifications of `emit` to one SSE reader per row per round.
    #[arg(long, default_value_t = 20_000)]
    events: usize,
    /// Idle sessions, each with an open GET stream over HTTP/1.1, for RSS per
    /// session (a server of its own); 0 skips it. Needs two descriptors a
    /// session: raise `ulimit -n` first.
    #[arg(long, default_value_t = 2_000)]
    idle_sessions: usize,
    /// The directory holding `mcp-resume` and `examples/rmcp_durable`
    /// (default: this binary's, e.g. target/release).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Write the report here too (e.g. benches/results/paths.md).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One row of the table.
#[derive(Clone, Copy, PartialEq)]
enum Deploy {
    Bare,
    TypeScript,
    RmcpAlone,
    Native,
    Hosted,
    RmcpOnStores,
}

const ROWS: [Deploy; 6] = [
    Deploy::Bare,
    Deploy::TypeScript,
    Deploy::RmcpAlone,
    Deploy::Native,
    Deploy::Hosted,
    Deploy::RmcpOnStores,
];

impl Deploy {
    fn label(self) -> &'static str {
        match self {
            Deploy::Bare => "bare hyper + serde_json (no MCP: the ceiling)",
            Deploy::TypeScript => "TypeScript SDK 1.32.2 (in memory)",
            Deploy::RmcpAlone => "rmcp 3.11 alone (in memory, no replay, `TCP_NODELAY`)",
            Deploy::Native => "`serve`, native tools, disk log",
            Deploy::Hosted => "rmcp handler hosted on mcp-resume (`--transport mcp-resume`, disk)",
            Deploy::RmcpOnStores => {
                "rmcp's own service on mcp-resume's stores (disk, `TCP_NODELAY`)"
            }
        }
    }

    /// The bare server sends no notifications (its GET stream stays silent).
    fn notifies(self) -> bool {
        self != Deploy::Bare
    }

    fn start(self, dir: &Path) -> Server {
        let rmcp = dir.join("examples").join("rmcp_durable");
        match self {
            Deploy::Bare => servers::bare(),
            Deploy::TypeScript => servers::node(&crate::root()),
            Deploy::RmcpAlone => servers::rmcp_durable("rmcp alone", &rmcp, "rmcp-alone"),
            Deploy::Native => servers::ours(&dir.join("mcp-resume"), &[]),
            Deploy::Hosted => servers::rmcp_durable("rmcp hosted", &rmcp, "mcp-resume"),
            Deploy::RmcpOnStores => servers::rmcp_durable("rmcp on stores", &rmcp, "rmcp"),
        }
    }
}

/// Every round's figures of one row.
#[derive(Default)]
struct Figures {
    rps: Vec<f64>,
    p50: Vec<f64>,
    eps: Vec<f64>,
    kib: Vec<f64>,
}

impl Figures {
    fn med(v: &[f64]) -> f64 {
        if v.is_empty() {
            f64::NAN
        } else {
            crate::pct(v, 0.5)
        }
    }
}

/// Runs every row `rounds` times, prints the report and writes it to `out`.
pub async fn run(a: Args) {
    let dir = a.bin_dir.clone().unwrap_or_else(|| {
        servers::our_binary()
            .parent()
            .expect("a directory")
            .to_owned()
    });
    for need in [
        dir.join("mcp-resume"),
        dir.join("examples/rmcp_durable"),
        crate::root().join("benches/peers/node/node_modules"),
    ] {
        assert!(
            need.exists(),
            "{} is missing: cargo build --release -p mcp-resume -p mcp-resume-load && \
             cargo build --release -p mcp-resume-rmcp --example rmcp_durable, and \
             (cd benches/peers/node && npm ci)",
            need.display()
        );
    }
    let mut figs: Vec<Figures> = ROWS.iter().map(|_| Figures::default()).collect();
    for round in 0..a.rounds {
        let mut order: Vec<usize> = (0..ROWS.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            measure(ROWS[i], &dir, &a, &mut figs[i], round).await;
        }
    }
    let report = report(&a, &figs);
    print!("{report}");
    if let Some(p) = &a.out {
        std::fs::write(p, &report).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
}

/// One row, one round: echo and notifications on one server, idle memory on
/// a fresh one (nothing the load left in its heap).
async fn measure(row: Deploy, dir: &Path, a: &Args, f: &mut Figures, round: usize) {
    let server = row.start(dir);
    let echo = workloads::echo(&server.url, a.conns, Duration::from_secs(a.duration)).await;
    let mut line = format!(
        "round {} {}: {:.0} echo/s, p50 {:.2} ms",
        round + 1,
        server.name,
        echo.rps,
        echo.p50_ms
    );
    f.rps.push(echo.rps);
    f.p50.push(echo.p50_ms);
    if row.notifies() {
        let d = workloads::delivery(&server.url, a.events).await;
        assert!(
            d.delivered == a.events,
            "{}: {} of {} notifications delivered",
            server.name,
            d.delivered,
            a.events
        );
        let _ = write!(line, ", {:.0} notifications/s", d.per_sec);
        if d.lagged_resumes > 0 {
            let _ = write!(
                line,
                " ({} resumes after the stream ended early)",
                d.lagged_resumes
            );
        }
        f.eps.push(d.per_sec);
    }
    drop(server);
    if a.idle_sessions > 0 {
        let idle = row.start(dir);
        let bytes = workloads::rss_per_idle_session(&idle, a.idle_sessions, false).await;
        let _ = write!(line, ", {:.1} KiB per idle session", bytes / 1024.0);
        f.kib.push(bytes / 1024.0);
    }
    eprintln!("{line}");
}

/// The table of medians, then each of the goals against them.
fn report(a: &Args, figs: &[Figures]) -> String {
    let med = Figures::med;
    let mut t = format!(
        "| path | tools/call echo/s ({} connections, {} s) | p50 ms | notifications/s ({} to one SSE reader) | KiB of RSS per idle session + GET stream ({} sessions, HTTP/1.1) |\n\
         | --- | ---: | ---: | ---: | ---: |\n",
        a.conns, a.duration, a.events, a.idle_sessions
    );
    let cell = |v: f64, prec: usize| {
        if v.is_nan() {
            "n/a".to_owned()
        } else {
            format!("{v:.prec$}")
        }
    };
    for (row, f) in ROWS.iter().zip(figs) {
        let _ = writeln!(
            t,
            "| {} | {} | {} | {} | {} |",
            row.label(),
            cell(med(&f.rps), 0),
            cell(med(&f.p50), 2),
            cell(med(&f.eps), 0),
            cell(med(&f.kib), 1),
        );
    }
    let _ = writeln!(t, "\nMedians of {} alternating rounds.\n", a.rounds);
    let at = |p: Deploy| &figs[ROWS.iter().position(|r| *r == p).expect("a row")];
    let (native, hosted) = (at(Deploy::Native), at(Deploy::Hosted));
    let (alone, stores) = (at(Deploy::RmcpAlone), at(Deploy::RmcpOnStores));
    let bare = at(Deploy::Bare);
    // (goal, measured, bound, whether the bound is a floor)
    let goals = [
        (
            "hosted rmcp echo / native echo",
            med(&hosted.rps) / med(&native.rps),
            0.9,
            true,
        ),
        (
            "hosted rmcp notifications / native",
            med(&hosted.eps) / med(&native.eps),
            0.5,
            true,
        ),
        (
            "hosted rmcp idle KiB / native",
            med(&hosted.kib) / med(&native.kib),
            1.2,
            false,
        ),
        (
            "rmcp on our stores echo / rmcp alone",
            med(&stores.rps) / med(&alone.rps),
            0.9,
            true,
        ),
        (
            "rmcp on our stores notifications / rmcp alone",
            med(&stores.eps) / med(&alone.eps),
            1.0,
            true,
        ),
        (
            "native echo / bare hyper",
            med(&native.rps) / med(&bare.rps),
            0.8,
            true,
        ),
        ("native KiB per idle session", med(&native.kib), 8.0, false),
        (
            "hosted rmcp KiB per idle session",
            med(&hosted.kib),
            8.0,
            false,
        ),
    ];
    let _ = writeln!(
        t,
        "| issue 24's goal | measured | target | met |\n| --- | ---: | ---: | --- |"
    );
    for (goal, m, bound, floor) in goals {
        let target = format!("{} {bound}", if floor { "≥" } else { "≤" });
        let met = match (m.is_nan(), floor) {
            (true, _) => "n/a",
            (false, true) if m >= bound => "yes",
            (false, false) if m <= bound => "yes",
            _ => "no",
        };
        let _ = writeln!(t, "| {goal} | {} | {target} | {met} |", cell(m, 3));
    }
    let _ = writeln!(
        t,
        "\nEcho: one session a connection, each call written and read whole through \
         a hyper connection of its own (`benches/load/src/caller.rs`). wrk on one \
         session is the second opinion: `benches/wrk/ab target/release/mcp-resume-load \
         target/release/mcp-resume`."
    );
    if med(&bare.rps) < 1.02 * med(&native.rps) {
        // The ceiling hardly faster than what it bounds: the client, or the
        // machine, may have been the limit.
        let _ = writeln!(
            t,
            "\n**The bare server answered hardly faster than `serve` (under 2 %): this \
             run's echo may have been bound by the client or the machine, not the \
             servers; read echo from wrk.**"
        );
    }
    t
}
