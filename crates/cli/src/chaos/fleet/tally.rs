//! What the fleet experiment counted, and its verdict: calls by outcome,
//! notifications promised against delivered, gaps, duplicates, sessions
//! lost, and how long readers were without their stream.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

/// How one call ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Its result.
    Ok,
    /// An error that says why (the reason, or the HTTP status).
    Loud(String),
    /// Nothing that says whether it ran: the connection cut, a balancer's 502.
    Ambiguous(String),
    /// No end within the call bound.
    Hung,
}

/// Everything counted, shared by the sessions' tasks.
#[derive(Default)]
pub(crate) struct Tally(Mutex<Counts>);

#[derive(Default)]
struct Counts {
    ok: u64,
    loud: BTreeMap<String, u64>,
    ambiguous: BTreeMap<String, u64>,
    hung: u64,
    by_tool: BTreeMap<String, u64>,
    /// Calls that did not end well, by tool and outcome.
    failed_by_tool: BTreeMap<String, BTreeMap<String, u64>>,
    gaps: u64,
    duplicates: u64,
    discontinuities: u64,
    sessions_lost: u64,
    outages_ms: Vec<u64>,
    promised: u64,
    delivered: u64,
    /// Promised notifications missing from sessions the server told that
    /// background work was lost (`work-lost`).
    missing_reported: u64,
    ops: Vec<Value>,
}

impl Tally {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn call(&self, tool: &str, outcome: Outcome) {
        let mut c = self.counts();
        *c.by_tool.entry(tool.to_owned()).or_default() += 1;
        let kind = match &outcome {
            Outcome::Ok => None,
            Outcome::Loud(r) => Some(format!("loud: {r}")),
            Outcome::Ambiguous(r) => Some(format!("ambiguous: {r}")),
            Outcome::Hung => Some("hung".to_owned()),
        };
        if let Some(kind) = kind {
            *c.failed_by_tool
                .entry(tool.to_owned())
                .or_default()
                .entry(kind)
                .or_default() += 1;
        }
        match outcome {
            Outcome::Ok => c.ok += 1,
            Outcome::Loud(r) => *c.loud.entry(r).or_default() += 1,
            Outcome::Ambiguous(r) => *c.ambiguous.entry(r).or_default() += 1,
            Outcome::Hung => c.hung += 1,
        }
    }

    pub(crate) fn gap(&self, missing: u64) {
        self.counts().gaps += missing;
    }

    pub(crate) fn duplicate(&self) {
        self.counts().duplicates += 1;
    }

    pub(crate) fn discontinuity(&self) {
        self.counts().discontinuities += 1;
    }

    pub(crate) fn session_lost(&self) {
        self.counts().sessions_lost += 1;
    }

    pub(crate) fn outage(&self, d: Duration) {
        self.counts().outages_ms.push(d.as_millis() as u64);
    }

    /// A session's notifications promised and delivered, at the end, and
    /// whether the server reported lost work to it.
    pub(crate) fn promises(&self, promised: u64, delivered: u64, reported: bool) {
        let mut c = self.counts();
        c.promised += promised;
        c.delivered += delivered;
        if reported {
            c.missing_reported += promised.saturating_sub(delivered);
        }
    }

    /// An operation on the fleet, as it happened.
    pub(crate) fn op(&self, op: Value) {
        self.counts().ops.push(op);
    }

    /// What went wrong; empty when nothing did. `faults`: the run had
    /// faults (kill -9, freezes, Redis) that may fail calls, loudly or
    /// ambiguously (a connection cut), and lose what a killed instance had
    /// promised, which are then allowed; graceful operations alone must
    /// fail none.
    pub(crate) fn failures(&self, faults: bool) -> Vec<String> {
        let c = self.counts();
        let mut f = Vec::new();
        let loud: u64 = c.loud.values().sum();
        let ambiguous: u64 = c.ambiguous.values().sum();
        if c.gaps > 0 {
            f.push(format!("{} events missing (silent gaps)", c.gaps));
        }
        if c.duplicates > 0 {
            f.push(format!("{} events delivered twice", c.duplicates));
        }
        if c.sessions_lost > 0 {
            f.push(format!("{} sessions lost", c.sessions_lost));
        }
        if c.hung > 0 {
            f.push(format!("{} calls hung past their bound", c.hung));
        }
        // A kill -9 takes the work an instance had started with it (a
        // tool's background sends); the server must say so, never drop it
        // silently. Graceful operations lose nothing at all.
        let missing = c.promised.saturating_sub(c.delivered);
        let silent = missing.saturating_sub(c.missing_reported);
        if (!faults && missing > 0) || silent > 0 {
            f.push(format!(
                "{missing} of {} promised notifications never arrived ({silent} without a word)",
                c.promised
            ));
        }
        if !faults && (loud > 0 || ambiguous > 0 || c.discontinuities > 0) {
            f.push(format!(
                "graceful operations failed calls: {loud} loud {:?}, {ambiguous} ambiguous {:?}, {} discontinuities",
                c.loud, c.ambiguous, c.discontinuities
            ));
        }
        if c.ok == 0 {
            f.push("no call succeeded".into());
        }
        f
    }

    fn percentile(sorted: &[u64], p: f64) -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[i.min(sorted.len() - 1)]
    }

    /// The report, as JSON.
    pub(crate) fn json(&self, about: Value) -> Value {
        let c = self.counts();
        let mut out = c.outages_ms.clone();
        out.sort_unstable();
        json!({
            "about": about,
            "calls": {
                "ok": c.ok,
                "loud": c.loud,
                "ambiguous": c.ambiguous,
                "hung": c.hung,
                "by_tool": c.by_tool,
                "failed_by_tool": c.failed_by_tool,
            },
            "notifications": {"promised": c.promised, "delivered": c.delivered,
                "missing_reported": c.missing_reported},
            "gaps": c.gaps,
            "duplicates": c.duplicates,
            "discontinuities": c.discontinuities,
            "sessions_lost": c.sessions_lost,
            "reader_outage_ms": {
                "count": out.len(),
                "p50": Self::percentile(&out, 0.5),
                "p99": Self::percentile(&out, 0.99),
                "max": out.last().copied().unwrap_or(0),
            },
            "ops": c.ops,
        })
    }

    /// One screen of it.
    pub(crate) fn print(&self, about: &str) {
        let j = self.json(Value::Null);
        println!("fleet chaos ({about})");
        println!(
            "  calls: {} ok, loud {}, ambiguous {}, hung {}",
            j["calls"]["ok"], j["calls"]["loud"], j["calls"]["ambiguous"], j["calls"]["hung"]
        );
        println!(
            "  notifications promised {} delivered {}; gaps {}, duplicates {}, discontinuities {}, sessions lost {}",
            j["notifications"]["promised"],
            j["notifications"]["delivered"],
            j["gaps"],
            j["duplicates"],
            j["discontinuities"],
            j["sessions_lost"]
        );
        let o = &j["reader_outage_ms"];
        println!(
            "  reader outages: {} (p50 {} ms, p99 {} ms, max {} ms)",
            o["count"], o["p50"], o["p99"], o["max"]
        );
    }

    /// An SVG of the reader outages (a bar per outage, sorted) and the
    /// calls by outcome.
    pub(crate) fn svg(&self) -> String {
        let c = self.counts();
        let mut out = c.outages_ms.clone();
        out.sort_unstable();
        let max = out.last().copied().unwrap_or(1).max(1) as f64;
        let (w, h) = (640.0, 240.0);
        let mut s = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{}" font-family="sans-serif" font-size="12">"#,
            h + 60.0
        );
        s.push_str(&format!(
            r#"<text x="8" y="16">reader outages, sorted (max {} ms); calls: {} ok, {} loud, {} ambiguous, {} hung</text>"#,
            max as u64,
            c.ok,
            c.loud.values().sum::<u64>(),
            c.ambiguous.values().sum::<u64>(),
            c.hung
        ));
        let bw = if out.is_empty() {
            0.0
        } else {
            w / out.len() as f64
        };
        for (i, ms) in out.iter().enumerate() {
            let bh = (*ms as f64 / max) * h;
            s.push_str(&format!(
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#4477aa"/>"##,
                i as f64 * bw,
                30.0 + h - bh,
                (bw - 1.0).max(1.0),
                bh
            ));
        }
        s.push_str("</svg>\n");
        s
    }
}
