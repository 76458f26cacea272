//! A task's event stream (SEP-2694, resumable task event streams): request
//! stream 1 of the task's log session holds, in order, every event a
//! `tasks/stream` reader is shown: the task's status transitions and the
//! events its work emits ([`super::TaskContext::event`]). Each is stored as
//! `{"type": T, "payload": {..}}`; its `seq` on the wire is its log seq less
//! one (the draft numbers from 0, the log from 1), so it is contiguous and
//! never reused. The stream ends at its first terminal status event; the
//! record stays the truth of the task's state (`fold.rs`), the stream is
//! what a reader replays (docs/protocol.md 3.9).

use bytes::Bytes;
use mcp_resume_log::{Log, LogError, Seq, StreamKey};
use serde_json::{json, Map, Value};

use super::fold::TaskState;
use super::TaskRecord;

/// The stream of a task's log session that holds its events.
pub(crate) const EVENTS: StreamKey = StreamKey::Request(1);

/// The prefix of the status events' types: `…/working`,
/// `…/input_required`, and the terminal `…/completed`, `…/failed`,
/// `…/cancelled` (the draft defines no standard types and forbids
/// unprefixed ones).
pub const STATUS_EVENT_PREFIX: &str = "dev.mcp-resume/task/";

/// The largest payload of an event a task's work emits, as JSON.
pub const MAX_EVENT_PAYLOAD: usize = 64 * 1024;

/// The record the events stream is opened with (not a call: the orphan
/// sweep leaves it alone).
pub(crate) fn stream_record() -> Bytes {
    Bytes::from_static(br#"{"task-events":true}"#)
}

/// One event as stored.
pub(crate) fn stored(kind: &str, payload: &Map<String, Value>) -> Bytes {
    Bytes::from(serde_json::to_vec(&json!({"type": kind, "payload": payload})).unwrap_or_default())
}

/// The type of the status event of `status`.
pub(crate) fn status_type(status: &str) -> String {
    format!("{STATUS_EVENT_PREFIX}{status}")
}

/// Whether `kind` is the type of a terminal status event.
pub(crate) fn is_terminal(kind: &str) -> bool {
    kind.strip_prefix(STATUS_EVENT_PREFIX)
        .is_some_and(|s| super::fold::TERMINAL.contains(&s))
}

/// Why an event a task's work emits is refused.
pub(crate) fn check_emitted(kind: &str, payload: &Value) -> Result<(), String> {
    let vendor = kind
        .split_once(['/', '.'])
        .is_some_and(|(prefix, rest)| !prefix.is_empty() && !rest.is_empty());
    if !vendor || kind.chars().any(char::is_whitespace) {
        return Err(format!(
            "event type {kind:?} needs a vendor prefix (reverse DNS, e.g. com.example.progress)"
        ));
    }
    if kind.starts_with(STATUS_EVENT_PREFIX) {
        return Err(format!(
            "event types under {STATUS_EVENT_PREFIX} are the transport's own status events"
        ));
    }
    if !payload.is_object() {
        return Err("an event's payload must be a JSON object".into());
    }
    let size = serde_json::to_vec(payload).map(|v| v.len()).unwrap_or(0);
    if size > MAX_EVENT_PAYLOAD {
        return Err(format!(
            "an event's payload is at most {MAX_EVENT_PAYLOAD} bytes; this one is {size}"
        ));
    }
    Ok(())
}

/// The status event of `state`: the task as `tasks/get` shows it.
pub(crate) fn status_event(id: &str, rec: &TaskRecord, state: &TaskState) -> Bytes {
    let mut payload = rec.wire(id, state);
    for (k, v) in &state.payload {
        payload.insert(k.clone(), v.clone());
    }
    stored(&status_type(&state.status), &payload)
}

/// The `notifications/tasks/event` a reader is shown for the stored event
/// at log seq `seq` of task `id`; `None` for bytes that are no event.
pub(crate) fn notification(id: &str, seq: Seq, stored: &[u8]) -> Option<(Value, bool)> {
    let v: Value = serde_json::from_slice(stored).ok()?;
    let kind = v.get("type")?.as_str()?.to_owned();
    let terminal = is_terminal(&kind);
    let n = json!({"jsonrpc": "2.0", "method": "notifications/tasks/event", "params": {
        "seq": seq - 1,
        "taskId": id,
        "type": kind,
        "payload": v.get("payload").cloned().unwrap_or_else(|| json!({})),
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": id}},
    }});
    Some((n, terminal))
}

/// The key under which a task's terminal event is appended: the same for
/// whoever ends it or finds it ended without one (FNV-1a).
fn end_key(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"task-end\0".iter().chain(id.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Appends the status event of `state` (the task's new status) to its
/// events stream, if it has one: a terminal one at most once (under one key,
/// and not when the stream already holds one).
pub(crate) async fn status(
    log: &dyn Log,
    id: &str,
    rec: &TaskRecord,
    state: &TaskState,
) -> Result<(), LogError> {
    if !rec.events {
        return Ok(());
    }
    let event = status_event(id, rec, state);
    if !state.terminal() {
        log.append(id, EVENTS, vec![event]).await?;
        return Ok(());
    }
    let head = log.bounds(id, EVENTS).await?.head;
    if terminal_at(log, id, head).await?.is_some() {
        return Ok(());
    }
    log.append_once(id, EVENTS, vec![event], end_key(id))
        .await?;
    Ok(())
}

/// How far back from the head a terminal event is looked for: events the
/// work emitted after a cancel it had not noticed yet (never shown).
const TERMINAL_LOOKBACK: u64 = 64;

/// The log seq of the terminal event among the last events up to `head`.
pub(crate) async fn terminal_at(
    log: &dyn Log,
    id: &str,
    head: Seq,
) -> Result<Option<Seq>, LogError> {
    if head == 0 {
        return Ok(None);
    }
    let from = head.saturating_sub(TERMINAL_LOOKBACK);
    let events = match log.read(id, EVENTS, from, TERMINAL_LOOKBACK as usize).await {
        Ok(events) => events,
        // Retention took them: nothing of the end is left to find there.
        Err(LogError::Truncated { .. } | LogError::DataLost { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(events.iter().find_map(|e| {
        let v: Value = serde_json::from_slice(&e.message).ok()?;
        is_terminal(v.get("type")?.as_str()?).then_some(e.seq)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emitted_events_need_a_vendor_prefix_an_object_and_a_bound() {
        assert!(check_emitted("com.example.progress", &json!({})).is_ok());
        assert!(check_emitted("example.com/step", &json!({"n": 1})).is_ok());
        for bad in [
            "progress",
            ".x",
            "x.",
            "a b.c",
            "dev.mcp-resume/task/completed",
        ] {
            assert!(check_emitted(bad, &json!({})).is_err(), "{bad}");
        }
        assert!(check_emitted("com.example.x", &json!([1])).is_err());
        let big = json!({"s": "x".repeat(MAX_EVENT_PAYLOAD)});
        assert!(check_emitted("com.example.x", &big).is_err());
    }

    #[test]
    fn notifications_number_from_zero_and_name_their_task() {
        let s = stored("com.example.x", &Map::from_iter([("n".into(), json!(3))]));
        let (n, terminal) = notification("t1", 1, &s).unwrap();
        assert!(!terminal);
        assert_eq!(n["params"]["seq"], 0);
        assert_eq!(n["params"]["taskId"], "t1");
        assert_eq!(n["params"]["payload"]["n"], 3);
        assert_eq!(
            n["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            "t1"
        );
        let end = stored(&status_type("failed"), &Map::new());
        assert!(notification("t1", 9, &end).unwrap().1);
        assert!(!is_terminal(&status_type("input_required")));
    }
}
