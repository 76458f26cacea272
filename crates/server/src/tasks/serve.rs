//! `tasks/get`, `tasks/update` and `tasks/cancel`, answered by the transport
//! from the log on any instance (the tasks extension, SEP-2663), and the
//! rule that makes a task durable: a task whose owner died before it
//! committed an end is failed (`data.reason: "server-restarted"`) by the
//! first instance that looks at it.

use axum::http::{HeaderMap, StatusCode};
use mcp_resume_log::{LogError, StreamKey};
use mcp_resume_proto::headers as h;
use serde_json::{json, Map, Value};

use super::fold::{self, TaskState};
use super::{cell, events};
use super::{now_ms, Caller, TaskRecord, TaskStore, TASKS_EXTENSION};
use crate::jsonrpc;
use crate::session::{valid_session_id, SessionRecord};

/// JSON-RPC: a header disagrees with the body (SEP-2243).
const HEADER_MISMATCH: i64 = -32020;
/// JSON-RPC: the client lacks a capability the request needs.
const MISSING_CAPABILITY: i64 = -32021;
/// Methods of the first tasks draft that the extension removed.
const REMOVED: &[&str] = &["tasks/result", "tasks/list"];

/// Whether the transport answers `method` itself when it has a task store.
pub(crate) fn is_task_method(method: &str) -> bool {
    method.starts_with("tasks/")
}

/// A `tasks/*` request that passed the checks every one of them takes.
pub(crate) struct Checked<'a> {
    /// Its JSON-RPC id.
    pub id: Value,
    /// Its method.
    pub method: &'a str,
    /// Its params.
    pub params: &'a Value,
    /// The task it names.
    pub task_id: &'a str,
}

/// A refusal: the HTTP status and the JSON-RPC error.
pub(crate) type Refused = (StatusCode, Value);

/// The checks of every `tasks/*` request (SEP-2663): the stateless `_meta`,
/// headers that agree with the body (SEP-2243), the client's declared
/// extension (-32021 without it), a `taskId`.
pub(crate) fn check<'a>(headers: &HeaderMap, message: &'a Value) -> Result<Checked<'a>, Refused> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let method = message["method"].as_str().unwrap_or_default();
    let params = message.get("params").unwrap_or(&Value::Null);
    let fail = |status, code, msg: String, data: Option<Value>| {
        let reply = match data {
            Some(d) => jsonrpc::error_with_data(&id, code, msg, d),
            None => jsonrpc::error(&id, code, msg),
        };
        Err((status, reply))
    };
    if REMOVED.contains(&method) {
        return fail(
            StatusCode::NOT_FOUND,
            jsonrpc::METHOD_NOT_FOUND,
            format!("{method} was removed from the tasks extension"),
            None,
        );
    }
    let meta = params.get("_meta");
    let version = meta
        .and_then(|m| m.get(mcp_resume_proto::meta::PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let caps = meta.and_then(|m| m.get(mcp_resume_proto::meta::CLIENT_CAPABILITIES));
    let (Some(version), Some(caps)) = (version, caps.filter(|c| c.is_object())) else {
        return fail(StatusCode::BAD_REQUEST, jsonrpc::INVALID_PARAMS, "the request's _meta needs io.modelcontextprotocol/protocolVersion and clientCapabilities".into(), None);
    };
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if header(h::MCP_PROTOCOL_VERSION).is_some_and(|v| v != version) {
        return fail(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            "MCP-Protocol-Version differs from the request's _meta".into(),
            None,
        );
    }
    if header(h::MCP_METHOD).is_some_and(|v| v != method) {
        return fail(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            format!("Mcp-Method differs from the body's method {method:?}"),
            None,
        );
    }
    if caps
        .get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_none()
    {
        return fail(
            StatusCode::BAD_REQUEST,
            MISSING_CAPABILITY,
            format!("{method} needs the client capability extensions.{TASKS_EXTENSION}"),
            Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})),
        );
    }
    let Some(task_id) = params.get("taskId").and_then(Value::as_str) else {
        return fail(
            StatusCode::OK,
            jsonrpc::INVALID_PARAMS,
            "taskId is required".into(),
            None,
        );
    };
    // SEP-2243: a name may come Base64-wrapped; compared once decoded.
    let named = |v: &str| {
        mcp_resume_proto::meta::decode_header_value(v.trim_matches([' ', '\t'])).as_deref()
            == Some(task_id)
    };
    if header(h::MCP_NAME).is_some_and(|v| !named(v)) {
        return fail(
            StatusCode::BAD_REQUEST,
            HEADER_MISMATCH,
            "Mcp-Name differs from the body's taskId".into(),
            None,
        );
    }
    Ok(Checked {
        id,
        method,
        params,
        task_id,
    })
}

/// Answers one `tasks/*` request but `tasks/stream` (`super::stream`): the
/// HTTP status and the JSON-RPC reply.
pub(crate) async fn serve(
    store: &TaskStore,
    caller: &Caller,
    headers: &HeaderMap,
    message: &Value,
) -> (StatusCode, Value) {
    let Checked {
        id,
        method,
        params,
        task_id,
    } = match check(headers, message) {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    let fail = |status, code, msg: String, data: Option<Value>| {
        let reply = match data {
            Some(d) => jsonrpc::error_with_data(&id, code, msg, d),
            None => jsonrpc::error(&id, code, msg),
        };
        (status, reply)
    };
    let outcome = match method {
        "tasks/get" => get(store, caller, task_id).await,
        "tasks/update" => {
            let answers = match params.get("inputResponses") {
                None => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(_) => {
                    return fail(
                        StatusCode::OK,
                        jsonrpc::INVALID_PARAMS,
                        "inputResponses must be an object".into(),
                        None,
                    )
                }
            };
            update(store, caller, task_id, &answers).await
        }
        "tasks/cancel" => cancel(store, caller, task_id).await,
        other => {
            return fail(
                StatusCode::NOT_FOUND,
                jsonrpc::METHOD_NOT_FOUND,
                format!("no method {other}"),
                None,
            )
        }
    };
    match outcome {
        Ok(result) => (
            StatusCode::OK,
            json!({"jsonrpc": "2.0", "id": id, "result": result}),
        ),
        Err(Lookup::Unknown) => fail(
            StatusCode::OK,
            jsonrpc::INVALID_PARAMS,
            format!("no task {task_id:?} (unknown, expired, or not yours)"),
            None,
        ),
        Err(Lookup::Log(e)) => fail(
            StatusCode::SERVICE_UNAVAILABLE,
            jsonrpc::INTERNAL_ERROR,
            e.to_string(),
            None,
        ),
    }
}

/// Why a task could not be answered.
pub(crate) enum Lookup {
    /// No such task for this caller.
    Unknown,
    /// The log failed.
    Log(LogError),
}

impl From<LogError> for Lookup {
    fn from(e: LogError) -> Self {
        match e {
            LogError::NoSession(_) | LogError::SessionEnded => Lookup::Unknown,
            other => Lookup::Log(other),
        }
    }
}

/// The task's record, for `caller`.
pub(crate) async fn record(
    store: &TaskStore,
    caller: &Caller,
    task_id: &str,
) -> Result<TaskRecord, Lookup> {
    if !valid_session_id(task_id) {
        return Err(Lookup::Unknown);
    }
    let log = store.log();
    let rec = SessionRecord::decode(&log.session(task_id).await?.meta);
    match rec.task {
        Some(t) if rec.principal == caller.0 => {
            log.touch(task_id).await?;
            Ok(t)
        }
        _ => Err(Lookup::Unknown),
    }
}

/// The task's state, failing it first (once, whoever asks first) if its
/// owner died before it ended.
pub(crate) async fn state(
    store: &TaskStore,
    task_id: &str,
    rec: &TaskRecord,
) -> Result<TaskState, Lookup> {
    let log = store.log();
    let state = cell::current(&**log, task_id, rec).await?;
    if state.terminal() || rec.owner == log.instance() || log.instance_alive(&rec.owner).await? {
        return Ok(state);
    }
    let error = json!({"code": jsonrpc::INTERNAL_ERROR,
        "message": "the server running this task stopped before it finished; it may be retried",
        "data": {"reason": "server-restarted"}});
    let at = now_ms();
    let (state, failed) = cell::update(&**log, task_id, |s| {
        s.end("failed", Some(("error", error.clone())), at)
            .then_some(())
    })
    .await?;
    if failed.is_some() {
        tracing::info!(
            task = task_id,
            "failed a task whose owner died before it ended"
        );
        let e = fold::event("failed", at, Some(("error", error)));
        if let Err(e) = append(store, task_id, &e).await {
            tracing::warn!(task = task_id, error = %e, "a task's failure is in its record but not in its stream");
        }
        if let Err(e) = events::status(&**log, task_id, rec, &state).await {
            tracing::warn!(task = task_id, error = %e, "a task's failure is in its record but not in its events; a reader adds it");
        }
    }
    Ok(state)
}

async fn append(store: &TaskStore, task_id: &str, event: &Value) -> Result<(), LogError> {
    let bytes = bytes::Bytes::from(serde_json::to_vec(event).unwrap_or_default());
    store
        .log()
        .append(task_id, StreamKey::Session, vec![bytes])
        .await?;
    Ok(())
}

/// `tasks/get`: the task with its status's payload.
async fn get(store: &TaskStore, caller: &Caller, task_id: &str) -> Result<Value, Lookup> {
    let rec = record(store, caller, task_id).await?;
    let state = state(store, task_id, &rec).await?;
    let mut m = rec.wire(task_id, &state);
    m.insert("resultType".into(), json!("complete"));
    if state.status == "input_required" {
        m.insert("inputRequests".into(), Value::Object(state.pending()));
    } else {
        for (k, v) in state.payload {
            if k != "inputRequests" {
                m.insert(k, v);
            }
        }
    }
    Ok(Value::Object(m))
}

/// `tasks/update`: keeps the answers to outstanding input requests for the
/// work (any other key is ignored, as SEP-2663 asks), rings the work's bell,
/// and acknowledges. An answer kept by an earlier try whose bell failed
/// rings again, so a retry after a 503 is never lost.
async fn update(
    store: &TaskStore,
    caller: &Caller,
    task_id: &str,
    answers: &Map<String, Value>,
) -> Result<Value, Lookup> {
    let rec = record(store, caller, task_id).await?;
    if state(store, task_id, &rec).await?.terminal() {
        return Ok(json!({"resultType": "complete"}));
    }
    let at = now_ms();
    let (state, accepted) = cell::update(&**store.log(), task_id, |s| {
        let accepted = s.answer(answers, at);
        (!accepted.is_empty()).then_some(accepted)
    })
    .await?;
    if accepted.is_some() && state.status == "working" {
        // Nothing outstanding any more: working again.
        events::status(&**store.log(), task_id, &rec, &state).await?;
    }
    let ring: Map<String, Value> = answers
        .iter()
        .filter(|(k, _)| state.answers.contains_key(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !ring.is_empty() {
        append(store, task_id, &json!({"in": ring, "at": at})).await?;
    }
    Ok(json!({"resultType": "complete"}))
}

/// `tasks/cancel`: ends the task as `cancelled` unless it has ended, tells
/// its work, and acknowledges.
async fn cancel(store: &TaskStore, caller: &Caller, task_id: &str) -> Result<Value, Lookup> {
    let rec = record(store, caller, task_id).await?;
    if state(store, task_id, &rec).await?.terminal() {
        return Ok(json!({"resultType": "complete"}));
    }
    let at = now_ms();
    let (state, cancelled) = cell::update(&**store.log(), task_id, |s| {
        s.end("cancelled", None, at).then_some(())
    })
    .await?;
    if cancelled.is_some() {
        append(store, task_id, &fold::event("cancelled", at, None)).await?;
        events::status(&**store.log(), task_id, &rec, &state).await?;
    }
    Ok(json!({"resultType": "complete"}))
}
