//! A task's state and its transitions (no I/O).
//!
//! The state lives in the task's record ([`super::TaskRecord::state`]),
//! changed by compare-and-set (`cell.rs`), so `tasks/get` reads one record
//! however long the task's history and wherever retention has moved its
//! stream's floor. Each transition is a method here: the work asks for
//! input ([`TaskState::ask`]), a client answers ([`TaskState::answer`]),
//! the work takes its answers ([`TaskState::take`]), the task ends
//! ([`TaskState::end`]). The **first end wins**: a cancel that lands before
//! the owner's result, or the failure that marks a dead owner, is final.
//!
//! Every change but `take` is also committed to the task's stream, as an
//! event: status snapshots (`{"s": "working"}`, `{"s": "input_required",
//! "inputRequests": {..}}`), answers (`{"in": {KEY: RESPONSE}}`) and terminal
//! states (`completed` with a `result`, `failed` with an `error`,
//! `cancelled`), each with its time (`"at"`, ms). The stream wakes the work
//! and keeps the history; [`fold`] reads a state from it for a record written
//! before states were kept in records.

use serde_json::{json, Map, Value};

/// The statuses of a task (SEP-2663), as on the wire.
pub(crate) const TERMINAL: &[&str] = &["completed", "failed", "cancelled"];

pub(crate) use crate::session::TaskState;

impl TaskState {
    /// A task just created.
    pub(crate) fn new(created_ms: u64) -> Self {
        Self {
            status: "working".into(),
            updated_ms: created_ms,
            payload: Map::new(),
            answers: Map::new(),
        }
    }

    /// The work asks for input under `key`: the task is `input_required`
    /// with every outstanding request. False once the task has ended.
    pub(crate) fn ask(&mut self, key: &str, request: Value, at: u64) -> bool {
        if self.terminal() {
            return false;
        }
        let mut pending = self.pending();
        pending.insert(key.to_owned(), request);
        self.status = "input_required".into();
        self.payload = Map::from_iter([("inputRequests".to_owned(), Value::Object(pending))]);
        self.updated_ms = at;
        true
    }

    /// A client answers (`tasks/update`): answers to outstanding requests
    /// are kept for the work, any other key is ignored (SEP-2663: unknown,
    /// already answered or superseded keys). The task is `working` again
    /// once nothing is outstanding. Returns the keys it accepted.
    pub(crate) fn answer(&mut self, responses: &Map<String, Value>, at: u64) -> Vec<String> {
        if self.terminal() {
            return Vec::new();
        }
        let Some(Value::Object(pending)) = self.payload.get_mut("inputRequests") else {
            return Vec::new();
        };
        let mut accepted = Vec::new();
        for (key, response) in responses {
            if pending.remove(key).is_some() {
                self.answers.insert(key.clone(), response.clone());
                accepted.push(key.clone());
            }
        }
        if accepted.is_empty() {
            return accepted;
        }
        if pending.is_empty() {
            self.status = "working".into();
            self.payload.clear();
        }
        self.updated_ms = at;
        accepted
    }

    /// The work has taken the answers under `keys`; whether any was there.
    pub(crate) fn take(&mut self, keys: &[String]) -> bool {
        let before = self.answers.len();
        for k in keys {
            self.answers.remove(k);
        }
        self.answers.len() != before
    }

    /// The task ends as `status` (`completed`, `failed`, `cancelled`) with
    /// its `result` or `error`; false if it had ended already: the first
    /// end wins.
    pub(crate) fn end(&mut self, status: &str, payload: Option<(&str, Value)>, at: u64) -> bool {
        if self.terminal() {
            return false;
        }
        self.status = status.to_owned();
        self.updated_ms = at;
        self.payload.clear();
        self.answers.clear();
        if let Some((k, v)) = payload {
            self.payload.insert(k.to_owned(), v);
        }
        true
    }

    /// Whether it has ended.
    pub(crate) fn terminal(&self) -> bool {
        TERMINAL.contains(&self.status.as_str())
    }

    /// Applies one event of the task's stream (the state of a record
    /// written before records kept it, [`fold`]).
    pub(crate) fn apply(&mut self, event: &Value) {
        if self.terminal() {
            return;
        }
        let at = event
            .get("at")
            .and_then(Value::as_u64)
            .unwrap_or(self.updated_ms);
        if let Some(answers) = event.get("in").and_then(Value::as_object) {
            if let Some(Value::Object(pending)) = self.payload.get_mut("inputRequests") {
                for key in answers.keys() {
                    pending.remove(key);
                }
                if pending.is_empty() {
                    self.status = "working".into();
                    self.payload.clear();
                }
                self.updated_ms = at;
            }
            return;
        }
        let Some(status) = event.get("s").and_then(Value::as_str) else {
            return; // not a task event
        };
        self.status = status.to_owned();
        self.updated_ms = at;
        self.payload.clear();
        for key in ["inputRequests", "result", "error"] {
            if let Some(v) = event.get(key) {
                self.payload.insert(key.to_owned(), v.clone());
            }
        }
    }

    /// The input requests still waiting for an answer.
    pub(crate) fn pending(&self) -> Map<String, Value> {
        match self.payload.get("inputRequests") {
            Some(Value::Object(m)) if self.status == "input_required" => m.clone(),
            _ => Map::new(),
        }
    }
}

/// Folds a task's events, in order: the state of a task whose record was
/// written by an earlier release, which kept states only in streams.
pub(crate) fn fold<'a>(created_ms: u64, events: impl IntoIterator<Item = &'a Value>) -> TaskState {
    let mut state = TaskState::new(created_ms);
    for e in events {
        state.apply(e);
    }
    state
}

/// An event saying the task is now `status`, with its payload.
pub(crate) fn event(status: &str, at: u64, payload: Option<(&str, Value)>) -> Value {
    let mut e = json!({"s": status, "at": at});
    if let Some((k, v)) = payload {
        e[k] = v;
    }
    e
}

/// UTC `YYYY-MM-DDTHH:MM:SS.mmmZ` (ISO 8601) of a Unix time in ms.
pub(crate) fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_terminal_event_wins() {
        let s = fold(
            1,
            &[
                event("cancelled", 5, None),
                event("completed", 6, Some(("result", json!({"content": []})))),
            ],
        );
        assert_eq!(s.status, "cancelled");
        assert_eq!(s.updated_ms, 5);
        assert!(s.payload.is_empty());
    }

    #[test]
    fn answered_input_requests_are_no_longer_pending() {
        let asked = event(
            "input_required",
            2,
            Some((
                "inputRequests",
                json!({"a": {"method": "elicitation/create"}, "b": {"method": "elicitation/create"}}),
            )),
        );
        let partial = json!({"in": {"a": {"action": "accept"}}, "at": 3});
        let s = fold(1, [&asked, &partial]);
        assert_eq!(s.status, "input_required");
        assert_eq!(s.pending().keys().collect::<Vec<_>>(), ["b"]);
        let rest = json!({"in": {"b": {"action": "accept"}}, "at": 4});
        let s = fold(1, [&asked, &partial, &rest]);
        assert_eq!(s.status, "working", "every request answered");
        assert!(s.pending().is_empty());
        // Answers with no request pending change nothing.
        let s = fold(1, [&rest]);
        assert_eq!((s.status.as_str(), s.updated_ms), ("working", 1));
    }

    #[test]
    fn a_failure_carries_its_error_and_ends_the_task() {
        let s = fold(
            1,
            &[
                event("working", 2, None),
                event(
                    "failed",
                    3,
                    Some(("error", json!({"code": -32603, "message": "x"}))),
                ),
                json!({"in": {"a": 1}, "at": 9}),
            ],
        );
        assert!(s.terminal());
        assert_eq!(s.payload["error"]["code"], -32603);
        assert_eq!(s.updated_ms, 3);
    }

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(iso8601(1_796_083_199_999), "2026-11-30T23:59:59.999Z");
    }
}
