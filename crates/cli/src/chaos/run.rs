//! One mode's run: iterations in a sliding window, each counted once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mcp_resume_client::Xorshift64;
use tokio::sync::Mutex;

use super::accounting::{HarnessError, Results};
use super::iteration::{iteration, Shared};
use super::target::Target;

/// Which server is under test, and which upgrade it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Echo, replay and gate (docs/protocol.md 5).
    Safe,
    /// `--unsafe-legacy-upgrade` (docs/protocol.md 9).
    Legacy,
    /// An rmcp server on mcp-resume-rmcp's stores (`rmcp_durable`): SSE only,
    /// its event ids are `SESSION/0/SEQ`. Judged like the safe mode.
    Rmcp,
}

impl Mode {
    /// The mode's name in the table and the report.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Safe => "safe",
            Mode::Legacy => "legacy",
            Mode::Rmcp => "rmcp",
        }
    }
}

/// Run settings.
pub struct Options {
    /// Iterations per mode.
    pub iterations: usize,
    /// Seed of the random choices.
    pub seed: u64,
    /// Stop starting iterations after this long.
    pub max: Duration,
    /// Iterations in flight at once.
    pub parallel: usize,
    /// No progress bar.
    pub quiet: bool,
    /// What the report says the servers ran on (`remote`, `disk`, the redis URL).
    pub store: String,
    /// How many instances share the store.
    pub instances: usize,
    /// Readers never upgrade: every read, drop and resume is over SSE
    /// (always so in the rmcp mode).
    pub sse_only: bool,
    /// Resumable listen streams (MCP 2026-07-28) instead of session streams.
    pub listen: bool,
}

/// Runs `opts.iterations` iterations against `target` in `mode`.
pub async fn run(mode: Mode, target: Target, opts: &Options) -> Result<Results, String> {
    let shared = Arc::new(Shared {
        urls: target.urls.clone(),
        killable: target.killable(),
        kills: target.kills(),
        target: Arc::new(Mutex::new(target)),
        rmcp: mode == Mode::Rmcp,
        sse_only: opts.sse_only || mode == Mode::Rmcp,
        listen: opts.listen && mode != Mode::Rmcp,
    });
    let mut res = Results::new(mode.name());
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
    let mut rng = Xorshift64::new(opts.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // A sliding window: `parallel` iterations in flight, a new one starts as
    // soon as one ends (the seed of each is drawn in order, so `--seed` still
    // fixes every iteration's choices).
    let mut started = 0;
    let mut set = tokio::task::JoinSet::new();
    loop {
        while set.len() < opts.parallel && started < opts.iterations && start.elapsed() < opts.max {
            started += 1;
            let sub = Xorshift64::new(rng.next_u64());
            set.spawn(iteration(shared.clone(), sub));
        }
        let Some(r) = set.join_next().await else {
            break;
        };
        // A panicked iteration is counted too, as a harness error.
        let r = r.unwrap_or_else(|e| Err(HarnessError::Task(e.to_string())));
        if let Some(line) = res.record(r) {
            if opts.quiet {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        }
        bar.set_message(format!(
            "silent gaps {} dup {} loud {} empty 200 {} not judged {}",
            res.silent_gaps, res.duplicates, res.loud_failures, res.empty_200s, res.errors
        ));
        bar.inc(1);
    }
    bar.finish();
    if res.iterations < opts.iterations {
        eprintln!(
            "mcp-resume chaos: {} ran {} of {} iterations within --max-secs",
            mode.name(),
            res.iterations,
            opts.iterations
        );
    }
    res.elapsed = start.elapsed();
    Ok(res)
}
