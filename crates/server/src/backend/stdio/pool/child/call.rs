//! One call in flight on a pooled child: its progress and its response,
//! and its cancellation on the child when the client goes away first.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::super::error;
use super::{lock, Pooled, CACHEABLE};

/// One request in flight on a pooled child; dropped before its response
/// (the client went away), it cancels the request on the child.
pub(in crate::backend::stdio::pool) struct Call {
    pub(super) child: Arc<Pooled>,
    /// The request's method.
    pub(super) method: String,
    pub(super) n: u64,
    /// The client's own `progressToken`, put back on the call's progress.
    pub(super) token: Option<Value>,
    /// `None` once drained and closed.
    pub(super) progress: Option<mpsc::Receiver<Value>>,
    pub(super) response: oneshot::Receiver<Value>,
    pub(super) done: bool,
    pub(super) cancel_on_drop: bool,
}

impl Call {
    /// The next message for the call: a progress notification, or its
    /// response with the client's `id` (the last); `None` once done.
    pub(in crate::backend::stdio::pool) async fn next(&mut self, id: &Value) -> Option<Value> {
        if self.done {
            return None;
        }
        // Progress the child sent before its response comes first.
        while let Some(p) = self.progress.as_mut() {
            let got = tokio::select! {
                biased;
                m = p.recv() => Ok(m),
                r = &mut self.response => Err(r.ok()),
            };
            match got {
                Ok(Some(mut m)) => {
                    if let (Some(t), Some(params)) = (&self.token, m.get_mut("params")) {
                        params["progressToken"] = t.clone();
                    }
                    return Some(m);
                }
                Ok(None) => self.progress = None,
                Err(r) => {
                    self.done = true;
                    return Some(self.finish(r, id));
                }
            }
        }
        self.done = true;
        let r = (&mut self.response).await.ok();
        Some(self.finish(r, id))
    }

    /// The response for the client: its id, `resultType`, freshness.
    fn finish(&self, response: Option<Value>, id: &Value) -> Value {
        let Some(mut m) = response else {
            return error(
                id,
                -32603,
                "the server process exited before answering",
                Some(json!({"reason": "child-exited"})),
            );
        };
        *lock(&self.child.last_used) = Instant::now();
        m["id"] = id.clone();
        if let Some(r) = m.get_mut("result").and_then(Value::as_object_mut) {
            r.entry("resultType").or_insert_with(|| json!("complete"));
            if CACHEABLE.contains(&self.method.as_str()) {
                // 2026-07-28 requires the freshness of these; a child's
                // answer may depend on its per-process state: never cached.
                r.entry("ttlMs").or_insert_with(|| json!(0));
                r.entry("cacheScope").or_insert_with(|| json!("private"));
            }
        }
        m
    }

    /// The response, progress skipped.
    pub(in crate::backend::stdio::pool) async fn answer(mut self, id: &Value) -> Value {
        loop {
            match self.next(id).await {
                Some(m) if m.get("method").is_some() => {}
                Some(m) => return m,
                None => return error(id, -32603, "no answer", None),
            }
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let waiting = lock(&self.child.calls)
            .as_mut()
            .and_then(|c| c.remove(&self.n))
            .is_some();
        if waiting && self.cancel_on_drop {
            self.child.send(
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": self.n, "reason": "the stateless client went away"}}),
            );
        }
    }
}
