//! The gateway mode's books: every call and session counted once, the
//! table, the JSON report, and what fails the run.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::judge::Verdict;
use super::session::SessionOutcome;

/// Faults the fault loop made.
#[derive(Debug, Default)]
pub struct Faults {
    /// `kill -9` of an instance, restarted.
    pub kills: u64,
    /// `SIGSTOP` of an instance past its lease, then `SIGCONT`.
    pub freezes: u64,
    /// `kill -9` of the harness's own Redis, restarted on its data.
    pub redis_restarts: u64,
    /// Faults that could not be made (a restart that failed).
    pub errors: Vec<String>,
}

/// Everything counted in a run of the gateway mode.
#[derive(Debug, Default)]
pub struct Tally {
    /// Sessions run (each counted once, started or not).
    pub sessions: usize,
    /// `progress` calls judged.
    pub calls: usize,
    /// Answered with every step once, in order.
    pub complete: usize,
    /// Ended loudly (allowed), by kind.
    pub loud: BTreeMap<String, usize>,
    /// Calls with steps missing before later ones or the answer.
    pub silent_gaps: usize,
    /// Steps missing in those calls.
    pub missing_steps: u64,
    /// Calls where a step arrived twice.
    pub duplicates: usize,
    /// Calls whose steps arrived out of order.
    pub reorders: usize,
    /// Calls with a step or answer the child cannot have sent.
    pub mismatches: usize,
    /// Calls with no end within the bound.
    pub hung: usize,
    /// Cuts made by the client on purpose.
    pub cuts: u64,
    /// Resumes with `Last-Event-ID` (after cuts and lost connections).
    pub resumes: u64,
    /// `confirm` calls (the child's elicitation answered on an instance
    /// picked at random).
    pub asks: usize,
    /// Those answered with what the client said.
    pub asks_complete: usize,
    /// Those that ended loudly (allowed), by kind.
    pub asks_loud: BTreeMap<String, usize>,
    /// `tick` answers read.
    pub ticks: usize,
    /// `tick` calls that ended loudly (allowed).
    pub loud_ticks: usize,
    /// Sessions whose ticks show two processes serving them.
    pub forked_sessions: usize,
    /// Sessions with more than one process still running at their end.
    pub two_children_sessions: usize,
    /// Sessions that could not be judged, with why.
    pub harness_errors: Vec<String>,
    /// Each call's time, POST to end, ms.
    pub call_ms: Vec<f64>,
    /// Faults made.
    pub faults: Faults,
    /// The run's length.
    pub elapsed: Duration,
}

impl Tally {
    /// Counts a session; returns a line to print when it failed.
    pub fn record(&mut self, s: SessionOutcome) -> Option<String> {
        self.sessions += 1;
        if let Some(e) = s.harness_error {
            return self.harness_error(e);
        }
        let mut bad = Vec::new();
        let calls = s.calls.into_iter().map(|c| (c, false));
        for (c, ask) in calls.chain(s.asks.into_iter().map(|c| (c, true))) {
            if ask {
                self.asks += 1;
            } else {
                self.calls += 1;
                self.call_ms.push(c.ms);
            }
            self.cuts += u64::from(c.cuts);
            self.resumes += u64::from(c.resumes);
            match c.verdict {
                Verdict::Complete if ask => self.asks_complete += 1,
                Verdict::Complete => self.complete += 1,
                Verdict::Loud(kind) if ask => *self.asks_loud.entry(kind).or_default() += 1,
                Verdict::Loud(kind) => *self.loud.entry(kind).or_default() += 1,
                Verdict::SilentGap { missing } => {
                    self.silent_gaps += 1;
                    self.missing_steps += missing;
                    bad.push(format!("a silent gap of {missing} steps"));
                }
                Verdict::Duplicate => {
                    self.duplicates += 1;
                    bad.push("a duplicate step".into());
                }
                Verdict::Reorder => {
                    self.reorders += 1;
                    bad.push("steps out of order".into());
                }
                Verdict::Mismatch(m) => {
                    self.mismatches += 1;
                    bad.push(m);
                }
                Verdict::Hung => {
                    self.hung += 1;
                    bad.push("a hung call".into());
                }
            }
        }
        self.ticks += s.ticks;
        self.loud_ticks += s.loud_ticks;
        if let Some(f) = s.forked {
            self.forked_sessions += 1;
            bad.push(format!("two processes served it: {f}"));
        }
        if let Some(t) = s.two_children {
            self.two_children_sessions += 1;
            bad.push(t);
        }
        (!bad.is_empty()).then(|| format!("session: {}", bad.join("; ")))
    }

    /// Counts a session that could not be judged.
    pub fn harness_error(&mut self, why: String) -> Option<String> {
        let line = format!("session not judged: {why}");
        self.harness_errors.push(why);
        Some(line)
    }

    /// One progress line.
    pub fn progress(&self, sessions: usize) -> String {
        format!(
            "{}/{sessions} sessions, {} calls: complete {} loud {} gaps {} dup {} hung {} forked {} two children {}",
            self.sessions,
            self.calls,
            self.complete,
            self.loud.values().sum::<usize>(),
            self.silent_gaps,
            self.duplicates,
            self.hung,
            self.forked_sessions,
            self.two_children_sessions
        )
    }

    /// What fails the run: any silent loss, duplicate, reorder, foreign
    /// step, hang, second process, session not judged, or fault not made.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        let mut count = |n: usize, what: &str| {
            if n > 0 {
                f.push(format!("{n} {what}"));
            }
        };
        count(self.silent_gaps, "calls with a silent gap");
        count(self.duplicates, "calls with a duplicate");
        count(self.reorders, "calls reordered");
        count(self.mismatches, "calls with foreign content");
        count(self.hung, "hung calls");
        count(self.forked_sessions, "sessions served by two processes");
        count(
            self.two_children_sessions,
            "sessions with two children left",
        );
        count(self.harness_errors.len(), "sessions not judged");
        count(self.faults.errors.len(), "faults that could not be made");
        f
    }
}

fn pct(v: &[f64], p: f64) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
        .copied()
}

/// Prints the run's table.
pub fn print_table(t: &Tally) {
    let ms = |p| pct(&t.call_ms, p).map_or("-".into(), |x| format!("{x:.1}"));
    println!();
    for (name, v) in [
        ("sessions", t.sessions.to_string()),
        ("progress calls", t.calls.to_string()),
        ("  complete", t.complete.to_string()),
        (
            "  ended loudly (allowed)",
            t.loud.values().sum::<usize>().to_string(),
        ),
        ("silent gaps (calls)", t.silent_gaps.to_string()),
        ("  steps missing", t.missing_steps.to_string()),
        ("duplicates", t.duplicates.to_string()),
        ("reorders", t.reorders.to_string()),
        ("foreign content", t.mismatches.to_string()),
        ("hung calls", t.hung.to_string()),
        (
            "asks answered / loud",
            format!(
                "{} / {}",
                t.asks_complete,
                t.asks_loud.values().sum::<usize>()
            ),
        ),
        (
            "ticks read (loud)",
            format!("{} ({})", t.ticks, t.loud_ticks),
        ),
        ("sessions served by two", t.forked_sessions.to_string()),
        (
            "sessions with two left",
            t.two_children_sessions.to_string(),
        ),
        (
            "not judged (harness err)",
            t.harness_errors.len().to_string(),
        ),
        ("cuts / resumes", format!("{} / {}", t.cuts, t.resumes)),
        (
            "kills / freezes / redis",
            format!(
                "{} / {} / {}",
                t.faults.kills, t.faults.freezes, t.faults.redis_restarts
            ),
        ),
        ("call p50 / p99 ms", format!("{} / {}", ms(0.5), ms(0.99))),
    ] {
        println!("{name:<28}{v:>16}");
    }
    if !t.loud.is_empty() {
        println!("loud ends: {:?}", t.loud);
    }
    if !t.asks_loud.is_empty() {
        println!("loud ends of asks: {:?}", t.asks_loud);
    }
    if !t.faults.errors.is_empty() {
        println!("faults not made: {:?}", t.faults.errors);
    }
}

/// Writes the JSON report.
pub fn write_json(
    path: &Path,
    mode: &str,
    t: &Tally,
    about: serde_json::Value,
) -> std::io::Result<()> {
    let doc = json!({
        "mode": mode,
        "run": about,
        "truth": "the child's own numbering (progress: 1..=n to the call's token; tick: PID N)",
        "sessions": t.sessions,
        "calls": t.calls,
        "complete": t.complete,
        "loud": t.loud,
        "silent_gaps": t.silent_gaps,
        "missing_steps": t.missing_steps,
        "duplicates": t.duplicates,
        "reorders": t.reorders,
        "mismatches": t.mismatches,
        "hung": t.hung,
        "asks": t.asks,
        "asks_complete": t.asks_complete,
        "asks_loud": t.asks_loud,
        "ticks": t.ticks,
        "loud_ticks": t.loud_ticks,
        "forked_sessions": t.forked_sessions,
        "two_children_sessions": t.two_children_sessions,
        "harness_errors": t.harness_errors,
        "cuts": t.cuts,
        "resumes": t.resumes,
        "faults": {"kills": t.faults.kills, "freezes": t.faults.freezes,
                   "redis_restarts": t.faults.redis_restarts, "errors": t.faults.errors},
        "call_ms": {"p50": pct(&t.call_ms, 0.5), "p99": pct(&t.call_ms, 0.99)},
        "elapsed_s": t.elapsed.as_secs_f64(),
        "failures": t.failures(),
    });
    std::fs::write(path, serde_json::to_vec_pretty(&doc).unwrap_or_default())
}
