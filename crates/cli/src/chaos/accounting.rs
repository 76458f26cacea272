//! The accounting: what the reader delivered, judged against what `emit` was
//! asked to number, never against a read-back from the server under test.
//!
//! `emit {count}` commits `notifications/message` events carrying
//! `params.data = {"i": k, "count": count}` for k = 1..=count (docs/protocol.md 8),
//! and an iteration gives each of its `emit` calls a count of its own, so
//! every delivered event names the call and the place it came from. The judge
//! checks three things:
//!
//! - seqs: the reader starts at cursor 0 and resumes from its last seq, so the
//!   distinct seqs it delivered must be exactly `1..=max`, in increasing
//!   order, each once; a seq never delivered is a hole;
//! - content: every message is exactly one emitted event, each `(call, k)`
//!   delivered once and in `k` order within its call;
//! - completeness: a call known to have run to its end ([`Expect::Complete`])
//!   delivered every `k` in `1..=count`; a call that may have been cut short
//!   ([`Expect::Prefix`]: its request failed, or its instance was killed while
//!   it ran) delivered `1..=m` for some `m`, with no hole below `m`.
//!
//! Why a cut-short call's missing tail is not a loss: each iteration ends with
//! a call of its own made after every kill it saw, which must be complete. Its
//! events come after everything committed before it, so seq contiguity up to
//! its last event proves the missing tail was never committed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{json, Value};

/// What the harness may demand of one `emit` call's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Acknowledged and never disturbed by a kill: every event, `1..=count`.
    Complete,
    /// May have been cut short: a prefix `1..=m`, `m` from 0 to `count`.
    Prefix,
}

/// One `emit` call the harness made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emitted {
    /// The `count` argument, unique within the iteration.
    pub count: u64,
    /// What is demanded of its events.
    pub expect: Expect,
}

/// Event `k` of `emit {count}`, as docs/protocol.md 8 defines it.
pub fn emit_message(k: u64, count: u64) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "logger": "emit", "data": {"i": k, "count": count}},
    })
}

/// `(k, count)` of a delivered message that is exactly an emitted event.
fn as_emit(text: &str) -> Option<(u64, u64)> {
    let v: Value = serde_json::from_str(text).ok()?;
    let k = v["params"]["data"]["i"].as_u64()?;
    let count = v["params"]["data"]["count"].as_u64()?;
    (v == emit_message(k, count)).then_some((k, count))
}

/// Whether `text` is the acknowledgement a resumable listen stream starts with.
fn is_listen_ack(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .is_ok_and(|v| v["method"] == "notifications/subscriptions/acknowledged")
}

/// Whether `text` is the server's word that background work promised to
/// the session died with its instance (`work-lost`): after a kill, the
/// `emit` it was sending was cut short, loudly.
fn is_work_lost(text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| v["params"]["data"]["reason"] == "work-lost")
}

/// The positions `k` delivered so far, per call `count`.
pub fn positions(delivered: &[(u64, String)]) -> HashMap<u64, BTreeSet<u64>> {
    let mut ks: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    for (_, text) in delivered {
        if let Some((k, count)) = as_emit(text) {
            ks.entry(count).or_default().insert(k);
        }
    }
    ks
}

/// What one iteration's reader got wrong, if anything.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Events delivered, repeats included.
    pub delivered: u64,
    /// Seqs below the highest one delivered that were never delivered.
    pub seq_holes: u64,
    /// Emitted events never delivered, with no refusal to explain it.
    pub missing: u64,
    /// Events of complete calls not delivered because the reader was finally
    /// refused loudly (allowed: the client was told).
    pub loud_undelivered: u64,
    /// Events delivered again (the same seq, or the same `(call, k)`).
    pub duplicates: u64,
    /// Events delivered after a later one (by seq, or by `k` within a call).
    pub reorders: u64,
    /// Messages that are no emitted event, or a seq delivered with two contents.
    pub mismatches: u64,
}

impl Verdict {
    /// Events lost silently: at least the larger of the seq holes and the
    /// emitted events missing (one lost event usually shows as both).
    pub fn silent_gaps(&self) -> u64 {
        self.seq_holes.max(self.missing)
    }

    /// No silent gap, duplicate, reorder or mismatch.
    pub fn clean(&self) -> bool {
        self.silent_gaps() == 0
            && self.duplicates == 0
            && self.reorders == 0
            && self.mismatches == 0
    }
}

fn same(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Judges `delivered` (`(seq, message)` in delivery order, read from cursor
/// 0) against the `calls` made. `ended_loud`: the reader's last attempt was
/// refused loudly, so what complete calls miss after the last `k` each
/// delivered is loud, not silent.
pub fn judge(calls: &[Emitted], delivered: &[(u64, String)], ended_loud: bool) -> Verdict {
    let mut v = Verdict {
        delivered: delivered.len() as u64,
        ..Default::default()
    };
    let known: HashMap<u64, Expect> = calls.iter().map(|c| (c.count, c.expect)).collect();
    let mut seqs: HashMap<u64, &str> = HashMap::new();
    let mut top = 0;
    let mut ks: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    let mut last_k: HashMap<u64, u64> = HashMap::new();
    for (seq, text) in delivered {
        if *seq == 0 {
            v.mismatches += 1; // no event has seq 0
            continue;
        }
        if let Some(first) = seqs.get(seq) {
            v.duplicates += 1;
            if !same(first, text) {
                v.mismatches += 1;
            }
            continue;
        }
        seqs.insert(*seq, text);
        if is_work_lost(text) {
            // The server's report of an emit a kill cut short: said, not
            // silent (what the emit missed is judged against the kills).
            top = top.max(*seq);
            continue;
        }
        if *seq == 1 && is_listen_ack(text) {
            // A listen stream's first event: the server's acknowledgement.
            top = top.max(1);
            continue;
        }
        // Late by seq, or by its place in its call: one reorder per event.
        let mut late = *seq < top;
        top = top.max(*seq);
        match as_emit(text).filter(|(k, c)| known.contains_key(c) && (1..=*c).contains(k)) {
            None => v.mismatches += 1,
            Some((k, count)) if !ks.entry(count).or_default().insert(k) => {
                v.duplicates += 1;
                late = false;
            }
            Some((k, count)) => {
                let last = last_k.entry(count).or_default();
                late |= k < *last;
                *last = (*last).max(k);
            }
        }
        v.reorders += late as u64;
    }
    v.seq_holes = top - seqs.len() as u64;
    for c in calls {
        let got = ks.get(&c.count);
        let n = got.map_or(0, |s| s.len() as u64);
        let high = got.and_then(|s| s.last()).copied().unwrap_or(0);
        v.missing += high - n;
        if c.expect == Expect::Complete {
            let tail = c.count - high;
            if ended_loud {
                v.loud_undelivered += tail;
            } else {
                v.missing += tail;
            }
        }
    }
    v
}

/// Why an iteration could not be judged: the harness failed, not the server
/// (as far as it can tell). Counted, printed, and it fails a judged mode (safe, rmcp).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No session could be initialised.
    #[error("initialize: {0}")]
    Initialize(String),
    /// The first `emit` never went through.
    #[error("first emit: {0}")]
    FirstEmit(String),
    /// A killed instance did not come back.
    #[error("restart: {0}")]
    Restart(String),
    /// No final `emit` ran free of kills, so a cut-short call could not be told from a loss.
    #[error("final emit: {0}")]
    FinalEmit(String),
    /// The iteration's task panicked or was cancelled.
    #[error("task: {0}")]
    Task(String),
}

impl HarnessError {
    /// A short name for the report's `harness_error_kinds`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Initialize(_) => "initialize",
            Self::FirstEmit(_) => "first emit",
            Self::Restart(_) => "restart",
            Self::FinalEmit(_) => "final emit",
            Self::Task(_) => "task",
        }
    }
}

/// What one judged iteration found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The judgement of what the reader delivered.
    pub verdict: Verdict,
    /// The reader's last attempt was refused loudly: judged for what it
    /// delivered, and what it did not is loud.
    pub loud_end: bool,
    /// Every loud refusal the reader met on the way.
    pub loud: Vec<String>,
    /// rmcp's empty 200s the reader met (see `Reader::empty_200s`).
    pub empty_200s: u64,
    /// The fault injected, as carried out (`none`, `dropws`, `kill`, `...-not-reached`).
    pub fault: &'static str,
    /// ms to the 101, to the end of the replay, to the first live frame.
    pub t: (Option<f64>, Option<f64>, Option<f64>),
    /// What went wrong, for the log, when the verdict is not clean.
    pub detail: Option<String>,
}

/// What one mode's run found. Every iteration that ran is in exactly one of
/// `judged_iterations`, `loud_iterations` and `errors`.
#[derive(Debug, Default)]
pub struct Results {
    /// `safe`, `legacy` or `rmcp`.
    pub mode: &'static str,
    /// Iterations that ran (judged, loud or harness error).
    pub iterations: usize,
    /// Iterations whose reader caught up and were judged in full.
    pub judged_iterations: usize,
    /// Iterations whose reader was finally refused loudly: judged for what it delivered.
    pub loud_iterations: usize,
    /// Events lost without any error (per iteration the larger of seq holes and missing events).
    pub silent_gaps: u64,
    /// Iterations with at least one silent gap.
    pub gap_iterations: u64,
    /// Seqs skipped between delivered events.
    pub seq_holes: u64,
    /// Emitted events never delivered, with no refusal to explain it.
    pub missing_events: u64,
    /// Events not delivered because the reader was finally refused loudly (allowed).
    pub loud_undelivered: u64,
    /// Events delivered twice.
    pub duplicates: u64,
    /// Events delivered out of order.
    pub reorders: u64,
    /// Messages that were no emitted event, or changed.
    pub mismatches: u64,
    /// Loud refusals met (allowed), also those the reader resumed after.
    pub loud_failures: u64,
    /// Loud refusals by kind.
    pub loud_kinds: BTreeMap<String, u64>,
    /// rmcp only: resumes answered 200 with no event and the end (a cursor
    /// its store refused). Not loud; what they cost shows as silent gaps.
    pub empty_200s: u64,
    /// Faults by kind, as carried out.
    pub faults: BTreeMap<String, u64>,
    /// Harness errors: iterations that could not be judged.
    pub errors: u64,
    /// Harness errors by what failed.
    pub error_kinds: BTreeMap<String, u64>,
    /// ms from connect to the 101.
    pub t_101: Vec<f64>,
    /// ms from connect to the end of the replay.
    pub t_replay: Vec<f64>,
    /// ms from connect to the first live frame.
    pub t_live: Vec<f64>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl Results {
    /// Empty results for `mode`.
    pub fn new(mode: &'static str) -> Self {
        Self {
            mode,
            ..Default::default()
        }
    }

    /// Counts one iteration, whatever became of it. Returns a line worth printing, if any.
    pub fn record(&mut self, r: Result<Outcome, HarnessError>) -> Option<String> {
        self.iterations += 1;
        let o = match r {
            Ok(o) => o,
            Err(e) => {
                self.errors += 1;
                *self.error_kinds.entry(e.kind().to_owned()).or_default() += 1;
                return Some(format!("iteration not judged: {e}"));
            }
        };
        if o.loud_end {
            self.loud_iterations += 1;
        } else {
            self.judged_iterations += 1;
        }
        let v = &o.verdict;
        self.silent_gaps += v.silent_gaps();
        self.gap_iterations += (v.silent_gaps() > 0) as u64;
        self.seq_holes += v.seq_holes;
        self.missing_events += v.missing;
        self.loud_undelivered += v.loud_undelivered;
        self.duplicates += v.duplicates;
        self.reorders += v.reorders;
        self.mismatches += v.mismatches;
        self.loud_failures += o.loud.len() as u64;
        self.empty_200s += o.empty_200s;
        for l in o.loud {
            *self.loud_kinds.entry(l).or_default() += 1;
        }
        *self.faults.entry(o.fault.to_owned()).or_default() += 1;
        let (a, b, c) = o.t;
        self.t_101.extend(a);
        self.t_replay.extend(b);
        self.t_live.extend(c);
        o.detail.map(|d| format!("not clean: {d}"))
    }

    /// Why this run fails (for a judged mode, safe or rmcp, which must have
    /// no silent problem and judge every iteration); empty when it passes.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        let mut count = |n: u64, what: &str| {
            if n > 0 {
                f.push(format!("{n} {what}"));
            }
        };
        count(self.errors, "harness errors (iterations not judged)");
        count(self.silent_gaps, "events lost silently");
        count(self.duplicates, "duplicates");
        count(self.reorders, "reorders");
        count(self.mismatches, "content mismatches");
        if self.judged_iterations + self.loud_iterations + self.errors as usize != self.iterations {
            f.push("iterations unaccounted for".into());
        }
        if self.judged_iterations == 0 {
            f.push("no iteration was judged in full".into());
        }
        f
    }
}

#[cfg(test)]
#[path = "accounting_tests.rs"]
mod tests;
