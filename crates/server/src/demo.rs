//! The built-in demo tools of docs/protocol.md 8: one user of the tool API like any other.

use std::time::Duration;

use serde_json::{json, Value};

use crate::tools::{text_result, ToolError, ToolRegistry};

/// Largest `count` one `emit` may ask for.
const MAX_EMIT: u64 = 10_000_000;
/// Notifications committed per append when `interval_ms` is 0.
const EMIT_BATCH: u64 = 4096;

fn uint(args: &Value, key: &str, default: Option<u64>) -> Result<u64, ToolError> {
    match args.get(key) {
        Some(v) => v.as_u64().ok_or_else(|| {
            ToolError::InvalidParams(format!("{key:?} must be a non-negative integer"))
        }),
        None => default.ok_or_else(|| ToolError::InvalidParams(format!("{key:?} is required"))),
    }
}

fn string<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidParams(format!("{key:?} must be a string")))
}

/// One `emit` notification, as JSON text (docs/protocol.md 8).
fn emit_message(k: u64, count: u64) -> bytes::Bytes {
    bytes::Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","logger":"emit","data":{{"i":{k},"count":{count}}}}}}}"#
    ))
}

/// How long a background `emit` batch is retried while the log is
/// unavailable (a Redis failover takes a few seconds) before it gives up.
const EMIT_RETRY_FOR: Duration = Duration::from_secs(30);

/// Commits `emit` notifications `k..k+n`, retrying with backoff while the log
/// answers [`LogError::Unavailable`](mcp_resume_log::LogError::Unavailable):
/// the call already answered, so giving up at the first refusal would break
/// its promise silently. Every attempt carries one key, so an attempt whose
/// outcome was unknown (a replica acknowledgement that timed out, whose
/// events may still become visible) is never committed twice.
async fn commit_retrying(
    ctx: &crate::tools::ToolContext,
    k: u64,
    n: u64,
    count: u64,
) -> Result<(), ToolError> {
    let give_up = tokio::time::Instant::now() + EMIT_RETRY_FOR;
    let key = crate::route::state::AppState::once_key();
    let mut pause = Duration::from_millis(50);
    loop {
        let batch = (k..k + n).map(|i| emit_message(i, count)).collect();
        match ctx.notify_session_once(batch, key).await {
            Ok(_) => return Ok(()),
            Err(ToolError::Log(mcp_resume_log::LogError::Unavailable(why)))
                if tokio::time::Instant::now() + pause < give_up =>
            {
                tracing::debug!(session = ctx.session_id(), %why, "emit waits for the log");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// `echo`, `emit`, `register_tool`, `unregister_tool` and `progress`.
pub fn demo_tools() -> ToolRegistry {
    ToolRegistry::new()
        .tool(
            "echo",
            "Returns the text it is given.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            |_ctx, args| async move { Ok(text_result(string(&args, "text")?)) },
        )
        .tool(
            "emit",
            "Appends `count` notifications/message to the session stream, `interval_ms` apart, in the background.",
            json!({"type": "object", "properties": {
                "count": {"type": "integer", "minimum": 0},
                "interval_ms": {"type": "integer", "minimum": 0}
            }, "required": ["count"]}),
            |ctx, args| async move {
                let count = uint(&args, "count", None)?;
                let interval = uint(&args, "interval_ms", Some(0))?;
                if count > MAX_EMIT {
                    return Err(ToolError::InvalidParams(format!("count is limited to {MAX_EMIT}")));
                }
                // The first batch is committed before the call answers, so a
                // log that refuses it fails the call (loudly) instead of
                // breaking a promise already made. The rest runs in the
                // background; its slot and its note in the log are taken
                // first, so a call refused for either has committed nothing,
                // and a promise made ends kept or reported (`work-lost`).
                let first = if interval == 0 { EMIT_BATCH.min(count) } else { count.min(1) };
                let (go, started) = tokio::sync::oneshot::channel::<()>();
                if count > first {
                    let worker = ctx.clone();
                    ctx.spawn(async move {
                        if started.await.is_err() {
                            return Ok(()); // the first batch was refused: nothing promised
                        }
                        let mut k = first + 1;
                        while k <= count {
                            if interval > 0 {
                                tokio::time::sleep(Duration::from_millis(interval)).await;
                            }
                            let n = if interval == 0 { EMIT_BATCH.min(count - k + 1) } else { 1 };
                            if let Err(e) = commit_retrying(&worker, k, n, count).await {
                                tracing::warn!(
                                    session = worker.session_id(),
                                    error = %e,
                                    "emit stopped: notifications {k}..={count} were promised but not committed"
                                );
                                return Err(e);
                            }
                            k += n;
                        }
                        Ok(())
                    })
                    .await?;
                }
                if first > 0 {
                    ctx.notify_session_encoded((1..=first).map(|i| emit_message(i, count)).collect())
                        .await?;
                }
                let _ = go.send(());
                Ok(text_result(format!("emitting {count} notifications")))
            },
        )
        .tool(
            "register_tool",
            "Adds a tool to this session's list and emits notifications/tools/list_changed.",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            |ctx, args| async move {
                let name = string(&args, "name")?;
                let changed = ctx.set_session_tool(name, true).await?;
                Ok(text_result(if changed { format!("registered {name}") } else { format!("{name} was already registered") }))
            },
        )
        .tool(
            "unregister_tool",
            "Removes a tool from this session's list and emits notifications/tools/list_changed.",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            |ctx, args| async move {
                let name = string(&args, "name")?;
                let changed = ctx.set_session_tool(name, false).await?;
                Ok(text_result(if changed { format!("unregistered {name}") } else { format!("{name} was not registered") }))
            },
        )
        .streaming_tool(
            "progress",
            "Answers as a request stream: `steps` notifications/progress `interval_ms` apart, then the result. Resumable with Last-Event-ID: R/n.",
            json!({"type": "object", "properties": {
                "steps": {"type": "integer", "minimum": 0},
                "interval_ms": {"type": "integer", "minimum": 0}
            }, "required": ["steps"]}),
            |ctx, args| async move {
                let steps = uint(&args, "steps", None)?.min(100_000);
                let interval = uint(&args, "interval_ms", Some(0))?;
                for k in 1..=steps {
                    ctx.progress(k, Some(steps)).await?;
                    if interval > 0 {
                        tokio::time::sleep(Duration::from_millis(interval)).await;
                    }
                }
                Ok(text_result(format!("done after {steps} steps")))
            },
        )
}
