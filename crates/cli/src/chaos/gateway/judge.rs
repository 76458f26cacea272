//! The gateway mode's judgement: a call against the child's own numbering
//! (`progress {n}` reports progress `1..=n` to the call's progress token,
//! then answers `counted n`), a session's
//! answers against the child's own state (`tick` answers `PID N`: its
//! process and a counter only that process keeps). Nothing here asks the
//! gateway what it did: the truth is the child's.

use serde_json::Value;

/// How a call ended, as the client saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEnd {
    /// A JSON-RPC result.
    Result(Value),
    /// A JSON-RPC error; the reason is `data.reason` or the message.
    Error(String),
    /// An HTTP status other than 200 (on the POST or on a resume).
    Refused(u16),
    /// The connection was lost where the client could not resume: before
    /// the stream's first event id.
    Lost(String),
    /// No end within the call's bound.
    Hung,
}

impl CallEnd {
    /// The name of a loud end in the report's tally.
    fn loud_reason(&self) -> String {
        match self {
            CallEnd::Result(_) => "tool error".into(),
            CallEnd::Error(r) => format!("error: {r}"),
            CallEnd::Refused(s) => format!("http {s}"),
            CallEnd::Lost(_) => "connection lost before the first event".into(),
            CallEnd::Hung => "hung".into(),
        }
    }
}

/// The verdict on one `progress` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Answered `counted n` with every step `1..=n` once, in order.
    Complete,
    /// Ended with an error the client saw (allowed), after a prefix of the
    /// steps at most.
    Loud(String),
    /// Steps the child sent are missing while later ones (or the answer)
    /// arrived: the failure this project exists to prevent.
    SilentGap {
        /// How many steps are missing.
        missing: u64,
    },
    /// A step arrived twice.
    Duplicate,
    /// Steps arrived out of order.
    Reorder,
    /// Something arrived that the child cannot have sent (a step out of
    /// range, an answer for another count).
    Mismatch(String),
    /// No end within the bound.
    Hung,
}

/// The step of a `notifications/progress` for `token`, if it is one.
pub fn step_of(message: &Value, token: &Value) -> Option<u64> {
    if message.get("method").and_then(Value::as_str) != Some("notifications/progress") {
        return None;
    }
    let p = &message["params"];
    if &p["progressToken"] != token {
        return None;
    }
    // rmcp sends `1.0` where the Python SDK sends `1`.
    let v = &p["progress"];
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            .map(|f| f as u64)
    })
}

/// The text of a tool result's first content block.
pub fn result_text(result: &Value) -> Option<&str> {
    result["content"][0]["text"].as_str()
}

/// Judges one `progress {n}` call from the steps seen (in arrival order) and
/// how it ended.
pub fn judge_call(n: u64, steps: &[u64], end: &CallEnd) -> Verdict {
    let mut seen = vec![false; n as usize + 1];
    let mut last = 0;
    for &s in steps {
        if s == 0 || s > n {
            return Verdict::Mismatch(format!("step {s} of a count of {n}"));
        }
        if seen[s as usize] {
            return Verdict::Duplicate;
        }
        seen[s as usize] = true;
        if s < last {
            return Verdict::Reorder;
        }
        last = s;
    }
    // Steps are increasing and unique: a hole below the highest one is lost.
    let holes = last - steps.len() as u64;
    match end {
        CallEnd::Hung => Verdict::Hung,
        CallEnd::Result(r) if r["isError"] != Value::Bool(true) => {
            let want = format!("counted {n}");
            if result_text(r) != Some(want.as_str()) {
                return Verdict::Mismatch(format!("answer {r} to a count of {n}"));
            }
            match n - steps.len() as u64 {
                0 => Verdict::Complete,
                missing => Verdict::SilentGap { missing },
            }
        }
        _ if holes > 0 => Verdict::SilentGap { missing: holes },
        other => Verdict::Loud(other.loud_reason()),
    }
}

/// Judges one `confirm {token}` call: the child asked the client once
/// (`elicitation/create`, answered with `token` on an instance picked at
/// random) and must answer with exactly that, or the call ends loudly.
pub fn judge_answer(token: &str, asked: u32, end: &CallEnd) -> Verdict {
    if asked > 1 {
        return Verdict::Duplicate;
    }
    match end {
        CallEnd::Hung => Verdict::Hung,
        CallEnd::Result(r) if r["isError"] != Value::Bool(true) => match result_text(r) {
            Some(t) if t == token && asked == 1 => Verdict::Complete,
            other => Verdict::Mismatch(format!(
                "confirm {token} answered {other:?} after {asked} requests"
            )),
        },
        other => Verdict::Loud(other.loud_reason()),
    }
}

/// One `tick` answer: the child's process id and its counter.
pub fn parse_tick(text: &str) -> Option<(u32, u64)> {
    let (pid, n) = text.split_once(' ')?;
    Some((pid.parse().ok()?, n.parse().ok()?))
}

/// Whether a session's `tick` answers (in the order the client got them)
/// show two processes serving it: a process answering again after another
/// one has, or a counter that does not grow (two processes with one pid
/// are not a case). `None` when one state was seen at a time.
pub fn forked(ticks: &[(u32, u64)]) -> Option<String> {
    let mut retired: Vec<u32> = Vec::new();
    let mut current: Option<(u32, u64)> = None;
    for &(pid, n) in ticks {
        match current {
            Some((p, last)) if p == pid && n <= last => {
                return Some(format!("process {pid} counted {n} after {last}"));
            }
            Some((p, _)) if p == pid => {}
            Some((p, _)) => {
                if retired.contains(&pid) {
                    return Some(format!("process {pid} answered again after {p} had"));
                }
                retired.push(p);
            }
            None => {}
        }
        current = Some((pid, n));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counted(n: u64) -> CallEnd {
        CallEnd::Result(json!({"content": [{"type": "text", "text": format!("counted {n}")}]}))
    }

    #[test]
    fn every_step_and_the_answer_is_complete() {
        assert_eq!(judge_call(3, &[1, 2, 3], &counted(3)), Verdict::Complete);
    }

    #[test]
    fn an_answer_after_missing_steps_is_a_silent_gap() {
        assert_eq!(
            judge_call(4, &[1, 2, 4], &counted(4)),
            Verdict::SilentGap { missing: 1 }
        );
        assert_eq!(
            judge_call(4, &[], &counted(4)),
            Verdict::SilentGap { missing: 4 }
        );
    }

    #[test]
    fn a_hole_before_a_loud_end_is_still_a_gap() {
        let err = CallEnd::Error("lease-lost".into());
        assert_eq!(
            judge_call(5, &[1, 3], &err),
            Verdict::SilentGap { missing: 1 }
        );
        assert_eq!(
            judge_call(5, &[1, 2], &err),
            Verdict::Loud("error: lease-lost".into())
        );
    }

    #[test]
    fn repeats_reorders_and_foreign_steps_are_caught() {
        assert_eq!(
            judge_call(3, &[1, 1, 2, 3], &counted(3)),
            Verdict::Duplicate
        );
        assert_eq!(judge_call(3, &[2, 1, 3], &counted(3)), Verdict::Reorder);
        assert!(matches!(
            judge_call(3, &[1, 2, 3, 4], &counted(3)),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            judge_call(3, &[1, 2, 3], &counted(4)),
            Verdict::Mismatch(_)
        ));
        assert_eq!(judge_call(3, &[1], &CallEnd::Hung), Verdict::Hung);
    }

    #[test]
    fn steps_are_the_childs_progress_for_the_calls_token() {
        let p = |token: Value, progress: Value| {
            json!({"method": "notifications/progress",
            "params": {"progressToken": token, "progress": progress, "total": 9}})
        };
        let t = json!("c7");
        assert_eq!(step_of(&p(json!("c7"), json!(7)), &t), Some(7));
        assert_eq!(step_of(&p(json!("c8"), json!(7)), &t), None);
        assert_eq!(step_of(&p(json!("c7"), json!(7.0)), &t), Some(7));
        assert_eq!(step_of(&p(json!("c7"), json!(0.5)), &t), None);
        assert_eq!(
            step_of(&json!({"method": "notifications/message"}), &t),
            None
        );
    }

    #[test]
    fn an_answer_must_come_back_once_and_unchanged() {
        let said = |t: &str| CallEnd::Result(json!({"content": [{"type": "text", "text": t}]}));
        assert_eq!(judge_answer("k1", 1, &said("k1")), Verdict::Complete);
        assert!(matches!(
            judge_answer("k1", 1, &said("k2")),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            judge_answer("k1", 1, &said("cancel")),
            Verdict::Mismatch(_)
        ));
        assert!(matches!(
            judge_answer("k1", 0, &said("k1")),
            Verdict::Mismatch(_)
        ));
        assert_eq!(judge_answer("k1", 2, &said("k1")), Verdict::Duplicate);
        assert_eq!(judge_answer("k1", 1, &CallEnd::Hung), Verdict::Hung);
        assert!(matches!(
            judge_answer("k1", 1, &CallEnd::Error("lease-lost".into())),
            Verdict::Loud(_)
        ));
    }

    #[test]
    fn one_process_at_a_time_is_one_state() {
        assert_eq!(forked(&[(10, 1), (10, 2), (20, 1), (20, 2)]), None);
        assert_eq!(forked(&[(10, 1), (10, 3)]), None);
    }

    #[test]
    fn two_processes_serving_one_session_are_seen() {
        // The old child answers again after the new one has.
        assert!(forked(&[(10, 1), (20, 1), (10, 2)]).is_some());
        // One process whose counter went back: its answers were not its own.
        assert!(forked(&[(10, 2), (10, 2)]).is_some());
        assert_eq!(parse_tick("123 4"), Some((123, 4)));
        assert_eq!(parse_tick("x"), None);
    }
}
