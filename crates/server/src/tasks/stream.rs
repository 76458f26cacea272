//! `tasks/stream {taskId, after?}` (SEP-2694): a task's events from a
//! cursor, replayed from the log and then followed live, on any instance, as
//! `notifications/tasks/event` on the POST's SSE response, ending after the
//! terminal status event with the request's result. Nothing is skipped: a
//! cursor the log cannot continue from is `events_gone` (-32010), and a
//! stream the log breaks ends with an error naming where to resume.
//!
//! A reader also keeps the task honest: once a second it looks at the
//! task's record, fails the task if its owner died ([`super::serve::state`]:
//! `server-restarted`, once, whoever looks first), and adds the terminal
//! event if the record ended without one reaching the stream.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use mcp_resume_log::{Event, LogError, Seq, Subscription};
use mcp_resume_proto::sse::{encode, KEEPALIVE};
use mcp_resume_proto::task::{self, AfterAhead};
use mcp_resume_proto::CursorDiscontinuity;

use serde_json::{json, Value};
use tokio::sync::watch;

use super::events::{self, EVENTS};
use super::serve::{check, record, state, Checked, Lookup, Refused};
use super::{Caller, TaskRecord, TaskStore};
use crate::jsonrpc;

/// The JSON-RPC code of `events_gone` (the draft's, in the range the
/// 2026-07-28 schema leaves to implementations: key on `data.reason`).
pub const EVENTS_GONE: i64 = -32010;
/// How often a reader looks at the task's record.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Events read from the log at once.
const CHUNK: usize = 512;

/// A stream admitted: where it starts and what it follows.
pub(crate) struct Opened {
    rpc_id: Value,
    task: String,
    record: TaskRecord,
    /// The last log seq the reader has (its `after` + 1).
    cursor: Seq,
    head: Seq,
    sub: Subscription,
    /// The terminal event is at or below the cursor: answer at once.
    done: bool,
}

impl Opened {
    /// Where the reader starts and the commit point it was admitted at, in
    /// log seqs (the wire's plus one): for the WebSocket's gate.
    pub(crate) fn positions(&self) -> (Seq, Seq) {
        (self.cursor, self.head)
    }

    /// The task's id.
    pub(crate) fn task(&self) -> &str {
        &self.task
    }
}

/// Checks a `tasks/stream` request and takes the commit point of the
/// task's events; a refusal is the HTTP status and JSON-RPC error.
pub(crate) async fn open(
    store: &TaskStore,
    caller: &Caller,
    headers: &HeaderMap,
    message: &Value,
) -> Result<Opened, Refused> {
    let Checked {
        id,
        params,
        task_id,
        ..
    } = check(headers, message)?;
    let refuse = |code, msg: String, data: Option<Value>| {
        let reply = match data {
            Some(d) => jsonrpc::error_with_data(&id, code, msg, d),
            None => jsonrpc::error(&id, code, msg),
        };
        (StatusCode::OK, reply)
    };
    let unavailable = |e: LogError| {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::error(&id, jsonrpc::INTERNAL_ERROR, e.to_string()),
        )
    };
    let after = match params.get("after") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(a) => Some(a),
            None => {
                return Err(refuse(
                    jsonrpc::INVALID_PARAMS,
                    format!("after must be a non-negative integer, not {v}"),
                    None,
                ))
            }
        },
    };
    let unknown = || {
        refuse(
            jsonrpc::INVALID_PARAMS,
            format!("no task {task_id:?} (unknown, expired, or not yours)"),
            None,
        )
    };
    let rec = match record(store, caller, task_id).await {
        Ok(rec) => rec,
        Err(Lookup::Unknown) => return Err(unknown()),
        Err(Lookup::Log(e)) => return Err(unavailable(e)),
    };
    if !rec.events {
        return Err(refuse(
            jsonrpc::INVALID_PARAMS,
            format!("task {task_id:?} has no event stream (an earlier release created it)"),
            None,
        ));
    }
    let log = store.log();
    let (bounds, sub) = match log.subscribe(task_id, EVENTS).await {
        Ok(b) => b,
        Err(LogError::NoSession(_) | LogError::SessionEnded) => return Err(unknown()),
        Err(e) => return Err(unavailable(e)),
    };
    // The draft's seq is the log's less one: checked (in the proto crate,
    // where fuzz/ exercises it), so that `after` = u64::MAX is past the
    // head, never a wrap to the stream's start.
    let cursor = match task::start_cursor(after, bounds.head, bounds.floor) {
        Ok(c) => c,
        Err(AfterAhead { after, latest }) => {
            return Err(refuse(
                jsonrpc::INVALID_PARAMS,
                format!(
                    "after {after} is past the task's latest event {}",
                    bounds.head as i64 - 1
                ),
                Some(json!({"reason": "after-ahead", "latestSeq": latest})),
            ))
        }
    };

    if let Err(d) = bounds.admit(cursor) {
        let e = events_gone(task_id, &d);
        return Err((
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "error": e}),
        ));
    }
    let terminal = match events::terminal_at(&**log, task_id, bounds.head).await {
        Ok(t) => t,
        Err(e) => return Err(unavailable(e)),
    };
    Ok(Opened {
        rpc_id: id,
        task: task_id.to_owned(),
        record: rec,
        cursor,
        head: bounds.head,
        sub,
        done: terminal.is_some_and(|t| t <= cursor),
    })
}

/// The error object of `events_gone` (-32010) for task `task`, whose reader
/// met `d` (in log seqs): what is gone and where to resume, in the wire's
/// seqs (the log's less one). `earliestSeq` is the first event it can still
/// have and `resumeAfter` the `after` that asks for it (none when nothing
/// is retained before the next event); a lost range of damaged storage
/// (docs/protocol.md 6.1) is named by `lostFrom ..= lostTo`, as the session
/// stream's 409 `data-lost` names it.
pub(crate) fn events_gone(task: &str, d: &CursorDiscontinuity) -> Value {
    let (head, earliest, lost) = match *d {
        CursorDiscontinuity::DataLost { from, to, head, .. } => (head, to, Some((from, to))),
        CursorDiscontinuity::Truncated { head, floor, .. } => (head, floor - 1, None),
        ref other => {
            return json!({"code": jsonrpc::INTERNAL_ERROR, "message": other.to_string(),
                "data": {"reason": "log-gap", "taskId": task}})
        }
    };
    let mut data = json!({"reason": "events_gone", "taskId": task,
        "earliestSeq": earliest, "latestSeq": head.checked_sub(1),
        "resumeAfter": earliest.checked_sub(1)});
    let message = match lost {
        Some((from, to)) => {
            data["lostFrom"] = json!(from - 1);
            data["lostTo"] = json!(to - 1);
            format!(
                "Task events {} to {} were lost by damaged storage; resume after {}",
                from - 1,
                to - 1,
                to - 1
            )
        }
        None => {
            format!("Task events before {earliest} are no longer available (retention took them)")
        }
    };
    json!({"code": EVENTS_GONE, "message": message, "data": data})
}

/// Writes the stream of `o` into `tx` as SSE until its terminal event and
/// result, the client goes, or `shutdown`; a keepalive comment every
/// `keepalive` of silence, which also keeps the task from idling out.
pub(crate) async fn pump(
    store: TaskStore,
    o: Opened,
    tx: crate::chunks::Sender,
    mut shutdown: watch::Receiver<bool>,
    keepalive: Duration,
) {
    let mut r = Reader {
        store,
        tx,
        last: o.cursor,
        task: o.task,
        record: o.record,
        rpc_id: o.rpc_id,
    };
    if o.done {
        r.finish(Ok(json!({"resultType": "complete"}))).await;
        return;
    }
    let mut sub = o.sub;
    let mut head = o.head;
    let mut check = tokio::time::interval(CHECK_EVERY);
    let mut quiet = tokio::time::Instant::now();
    loop {
        // Replay what is committed up to `head`, then follow.
        match r.replay(head).await {
            Step::More => {}
            Step::Stop => return,
        }
        loop {
            let next = tokio::select! {
                ev = sub.next() => ev,
                _ = check.tick() => {
                    if !r.check().await { return; }
                    if quiet.elapsed() >= keepalive {
                        quiet = tokio::time::Instant::now();
                        let _ = r.store.log().touch(&r.task).await;
                        if r.tx.send(Bytes::from_static(KEEPALIVE)).await.is_err() { return; }
                    }
                    continue;
                }
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        let why = "the server is stopping; resume with after";
                        r.finish(Err(r.broken("server-stopping", why))).await;
                        return;
                    }
                    continue;
                }
            };
            quiet = tokio::time::Instant::now();
            match next {
                Ok(event) => match r.deliver(std::slice::from_ref(&event)).await {
                    Step::More => {}
                    Step::Stop => return,
                },
                Err(LogError::NoSession(_) | LogError::SessionEnded) => {
                    let e = jsonrpc::error_with_data(
                        &r.rpc_id,
                        jsonrpc::INVALID_PARAMS,
                        "the task expired",
                        json!({"reason": "task-expired"}),
                    )["error"]
                        .clone();
                    r.finish(Err(e)).await;
                    return;
                }
                Err(e) => {
                    // A lag or a lost connection to the log: follow again
                    // from where this reader is, replaying what it missed.
                    tracing::debug!(task = %r.task, error = %e, "following a task's events again");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    match r.store.log().subscribe(&r.task, EVENTS).await {
                        Ok((b, again)) => {
                            sub = again;
                            head = b.head;
                            break;
                        }
                        Err(e) => {
                            let why = format!("the log is unavailable ({e}); resume with after");
                            r.finish(Err(r.broken("log-unavailable", &why))).await;
                            return;
                        }
                    }
                }
            }
        }
    }
}

enum Step {
    More,
    Stop,
}

/// One reader's position and where it writes.
struct Reader {
    store: TaskStore,
    tx: crate::chunks::Sender,
    /// The last log seq sent.
    last: Seq,
    task: String,
    record: TaskRecord,
    rpc_id: Value,
}

impl Reader {
    /// Sends `last+1 ..= head` from the log.
    async fn replay(&mut self, head: Seq) -> Step {
        while self.last < head {
            let events = match self
                .store
                .log()
                .read(&self.task, EVENTS, self.last, CHUNK)
                .await
            {
                Ok(events) if !events.is_empty() => events,
                Ok(_) => {
                    let why = format!(
                        "the log returned nothing after {} below its head",
                        self.last
                    );
                    self.finish(Err(self.broken("log-gap", &why))).await;
                    return Step::Stop;
                }
                // What retention took or damaged storage lost while this
                // reader replayed: events_gone, naming where to resume.
                Err(e) => {
                    let error = match e.discontinuity() {
                        Some(d) if !matches!(d, CursorDiscontinuity::Ahead { .. }) => {
                            events_gone(&self.task, &d)
                        }
                        _ => self.broken("log-unavailable", &format!("{e}; resume with after")),
                    };
                    self.finish(Err(error)).await;
                    return Step::Stop;
                }
            };
            let upto: Vec<Event> = events.into_iter().take_while(|e| e.seq <= head).collect();
            if let Step::Stop = self.deliver(&upto).await {
                return Step::Stop;
            }
        }
        Step::More
    }

    /// Sends `events`, each exactly the next; ends after a terminal one.
    async fn deliver(&mut self, events: &[Event]) -> Step {
        let mut out = Vec::new();
        for e in events {
            if e.seq <= self.last {
                continue; // seen before a resubscription
            }
            if e.seq != self.last + 1 {
                let why = format!(
                    "the log returned {} after {}",
                    e.seq - 1,
                    self.last as i64 - 1
                );
                let _ = self.tx.send(out.into()).await;
                self.finish(Err(self.broken("log-gap", &why))).await;
                return Step::Stop;
            }
            self.last = e.seq;
            let Some((n, terminal)) = events::notification(&self.task, e.seq, &e.message) else {
                continue;
            };
            let data = serde_json::to_vec(&n).unwrap_or_default();
            encode(
                &mut out,
                Some(&(e.seq - 1).to_string()),
                Some("message"),
                &data,
            );
            if terminal {
                if self.tx.send(out.into()).await.is_err() {
                    return Step::Stop;
                }
                self.finish(Ok(json!({"resultType": "complete"}))).await;
                return Step::Stop;
            }
        }
        if !out.is_empty() && self.tx.send(out.into()).await.is_err() {
            return Step::Stop;
        }
        Step::More
    }

    /// Looks at the task: fails it if its owner died, and adds its terminal
    /// event if it ended without one; false when the client is gone.
    async fn check(&mut self) -> bool {
        let log = self.store.log();
        let state = match state(&self.store, &self.task, &self.record).await {
            Ok(s) => s,
            Err(_) => return !self.tx.is_closed(), // the subscription tells
        };
        if state.terminal() {
            let head = log.bounds(&self.task, EVENTS).await.map(|b| b.head);
            if let Ok(head) = head {
                if let Ok(None) = events::terminal_at(&**log, &self.task, head).await {
                    if let Err(e) = events::status(&**log, &self.task, &self.record, &state).await {
                        tracing::debug!(task = %self.task, error = %e, "could not add a task's terminal event yet");
                    }
                }
            }
        }
        !self.tx.is_closed()
    }

    /// The error that ends a stream the reader cannot go on with: where to
    /// resume (`after`, the last seq sent, or none before the first).
    fn broken(&self, reason: &str, why: &str) -> Value {
        json!({"code": jsonrpc::INTERNAL_ERROR, "message": why,
               "data": {"reason": reason, "taskId": self.task, "after": self.last.checked_sub(1)}})
    }

    /// Sends the request's response: its result or error.
    async fn finish(&self, outcome: Result<Value, Value>) {
        let reply = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": self.rpc_id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": self.rpc_id, "error": error}),
        };
        let mut out = Vec::new();
        encode(
            &mut out,
            None,
            Some("message"),
            &serde_json::to_vec(&reply).unwrap_or_default(),
        );
        let _ = self.tx.send(out.into()).await;
    }
}
