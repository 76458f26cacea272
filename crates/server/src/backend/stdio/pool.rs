//! MCP's stateless era (2026-07-28 on) in front of stdio children that
//! speak only the session era (`gateway -- CMD`): the gateway keeps a small
//! pool of children, each initialized as a 2025-11-25 session with the
//! capabilities and client info a stateless request declares in its
//! `_meta`, and answers each stateless request through one of them
//! (docs/protocol.md 3.6).
//!
//! Requests of one principal that declare the same capabilities share a
//! child (their JSON-RPC ids are renumbered, so many run at once); a child
//! is what the server makes of those capabilities (server-everything
//! registers its sampling tool only for a client that can sample), so
//! different ones get different children, and with credentials configured
//! two principals never share one (its per-process state, `tasks/*`
//! included, is one principal's). Without credentials every request is
//! anyone's: those that declare the same capabilities share a child and its
//! state, as the stateless era has no session to keep it apart.
//!
//! Every bound is explicit ([`PoolLimits`], `limits.rs`; each refusal a
//! 429 with `Retry-After`): at most `children` in the pool (and
//! `--max-children` in all), the least recently used idle one stopped for a
//! new one; at most `per_principal` held by one principal, whose own least
//! recently used idle child gives way first (a client that varies its
//! capabilities churns its own children, never others' warm ones);
//! children started at most `starts_per_sec` (a fork and an `initialize`
//! each), the fork outside the pool's lock; and per child a cap on calls in
//! flight and on messages waiting for its stdin.
//!
//! `server/discover` is answered from the child's `initialize` result
//! (offering no resumable listen: `subscriptions/listen` is refused, -32601,
//! since a session-era child has nothing to listen with). A
//! call is answered as JSON, or, when the client accepts SSE, as a stream
//! of its progress notifications ending with its response. What the stateless
//! era has no place for is refused loudly: a child's request to the client
//! (sampling, elicitation, roots) gets -32601 from the gateway, so the tool
//! fails instead of waiting; a client that goes away cancels its call
//! (`notifications/cancelled`). A child that exits fails its calls in
//! flight with -32603 (`data.reason` `child-exited`). Children idle for
//! [`IDLE_STOP`] are stopped.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use bytes::Bytes;
use futures_util::StreamExt;
use mcp_resume_proto::{meta, STATELESS_PROTOCOL_VERSIONS, SUPPORTED_PROTOCOL_VERSIONS};
use serde_json::{json, Value};

mod child;

mod limits;

use child::{Call, Handed, Key, Pooled};
pub use limits::PoolLimits;
use limits::{Refused, Starts};

use super::{Launch, Slot};
use crate::backend::{StatelessFuture, StatelessHttp};
use crate::tasks::Caller;

/// How long a pooled child may serve nothing before it is stopped.
pub(super) const IDLE_STOP: Duration = Duration::from_secs(300);
/// How often children are checked for having been idle that long.
const REAP_EVERY: Duration = Duration::from_secs(30);

/// The pool of children that answer stateless requests.
pub(super) struct Pool {
    launch: Arc<Launch>,
    /// Running children of the gateway, sessions' and the pool's.
    slots: Arc<AtomicUsize>,
    max_children: usize,
    /// How long a child may take to answer `initialize`.
    init_wait: Duration,
    limits: PoolLimits,
    /// How fast children start.
    starts: Starts,
    children: Mutex<Vec<Arc<Pooled>>>,
}

/// Why a request gets no child.
enum NoChild {
    /// At a limit: 429.
    Refused(Refused),
    /// The child could not start or be initialized: 502.
    Failed(String),
}

impl From<Refused> for NoChild {
    fn from(r: Refused) -> Self {
        NoChild::Refused(r)
    }
}

impl StatelessHttp for Arc<Pool> {
    fn serve(&self, request: Request<Body>, message: Value) -> StatelessFuture {
        let pool = self.clone();
        Box::pin(async move { pool.answer(request, message).await })
    }

    /// A session-era child has no `subscriptions/listen`.
    fn listens(&self) -> bool {
        false
    }
}

impl Pool {
    /// A pool of children started by `launch`, counted in `slots` with the
    /// sessions' children (at most `max_children` in all), each given
    /// `init_wait` to answer `initialize`, within `limits`. A task stops
    /// children idle for [`IDLE_STOP`] (checked every [`REAP_EVERY`]) until
    /// the pool is dropped.
    pub(super) fn start(
        launch: Arc<Launch>,
        slots: Arc<AtomicUsize>,
        max_children: usize,
        init_wait: Duration,
        limits: PoolLimits,
    ) -> Arc<Self> {
        let pool = Arc::new(Self {
            launch,
            slots,
            max_children,
            init_wait,
            limits,
            starts: Starts::new(limits.starts_per_sec, limits.start_burst),
            children: Mutex::default(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&pool);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(REAP_EVERY).await;
                    let Some(pool) = weak.upgrade() else { return };
                    pool.reap(IDLE_STOP);
                }
            });
        }
        pool
    }

    /// Drops children that are gone, and stops those idle for `after`.
    fn reap(&self, after: Duration) {
        lock(&self.children).retain(|c| {
            let stale = c.idle() && c.idle_for() > after;
            if stale {
                c.stop();
            }
            !(stale || c.gone())
        });
    }

    /// Stops the pool's least recently used idle child and frees its place
    /// among `--max-children` at once (for a session's child that found
    /// them all taken); `false` if every pooled child is busy.
    pub(super) fn evict_idle(&self) -> bool {
        let mut list = lock(&self.children);
        match lru_idle(&list, |_| true) {
            Some(i) => {
                drop(list.remove(i).evict());
                true
            }
            None => false,
        }
    }

    async fn answer(self: Arc<Self>, request: Request<Body>, message: Value) -> Response<Body> {
        let (parts, _) = request.into_parts();
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let m = message
            .pointer("/params/_meta")
            .cloned()
            .unwrap_or_default();
        let in_meta = m.get(meta::PROTOCOL_VERSION).and_then(Value::as_str);
        if in_meta.is_none() && method != "server/discover" {
            // As rmcp's stateless service: the era's requests carry it.
            let why =
                "Invalid params: a stateless request carries its protocol version in params._meta";
            return json_reply(StatusCode::BAD_REQUEST, error(&id, -32602, why, None));
        }
        let version = in_meta.or_else(|| {
            parts
                .headers
                .get(mcp_resume_proto::headers::MCP_PROTOCOL_VERSION)
                .and_then(|v| v.to_str().ok())
        });
        let known = version.is_some_and(|v| STATELESS_PROTOCOL_VERSIONS.contains(&v.trim()));
        let unversioned_discover = version.is_none() && method == "server/discover";
        if !(known || unversioned_discover) {
            let data = json!({"supported": STATELESS_PROTOCOL_VERSIONS, "requested": version});
            return json_reply(
                StatusCode::BAD_REQUEST,
                error(&id, -32022, "unsupported protocol version", Some(data)),
            );
        }
        let header = |n: &str| parts.headers.get(n).and_then(|v| v.to_str().ok());
        if let Err(why) = meta::check_standard_headers(header, &message) {
            return json_reply(StatusCode::BAD_REQUEST, error(&id, -32020, why, None));
        }
        if method == "subscriptions/listen" {
            let why = "subscriptions/listen: the stdio server behind this gateway speaks only the session era; initialize a session to receive its notifications";
            return json_reply(StatusCode::NOT_FOUND, error(&id, -32601, why, None));
        }
        let caps = m
            .get(meta::CLIENT_CAPABILITIES)
            .cloned()
            .unwrap_or_else(|| json!({}));
        let info = m.get(meta::CLIENT_INFO).cloned().unwrap_or_else(
            || json!({"name": "mcp-resume-gateway", "version": env!("CARGO_PKG_VERSION")}),
        );
        let principal = parts.extensions.get::<Caller>().and_then(|c| c.0.clone());
        let child = match self.child(principal, caps, info).await {
            Ok(c) => c,
            Err(NoChild::Refused(r)) => return refused(&id, &r),
            Err(NoChild::Failed(why)) => {
                return json_reply(
                    StatusCode::BAD_GATEWAY,
                    error(&id, -32603, why, Some(json!({"reason": "child-failed"}))),
                )
            }
        };
        if method == "server/discover" {
            let init = child.ready().await.unwrap_or_default();
            return json_reply(
                StatusCode::OK,
                json!({"jsonrpc": "2.0", "id": id, "result": discover(&init)}),
            );
        }
        let sse = parts
            .headers
            .get_all(header::ACCEPT)
            .iter()
            .any(|v| v.as_bytes().windows(17).any(|w| w == b"text/event-stream"));
        let call = match child.start(message) {
            Ok(call) => call,
            Err(r) => return refused(&id, &r),
        };
        drop(child);
        if sse {
            sse_reply(call, id)
        } else {
            json_reply(StatusCode::OK, call.answer(&id).await)
        }
    }

    /// The child of `principal` for `caps`, started (and initialized) if
    /// there is none, within the limits: in a free place, else in the place
    /// of the least recently used idle child (the principal's own once it
    /// holds its share). The fork runs after the pool's lock is released.
    async fn child(
        &self,
        principal: Option<String>,
        caps: Value,
        info: Value,
    ) -> Result<Handed, NoChild> {
        let key = Key {
            principal,
            caps: caps.to_string(),
        };
        let (child, fresh) = {
            let mut list = lock(&self.children);
            list.retain(|c| !c.gone());
            match list.iter().find(|c| c.key == key) {
                Some(c) => (c.hand(), false),
                None => {
                    let slot = self.place(&mut list, &key)?;
                    let c = Pooled::new(key, slot, &self.limits);
                    list.push(c.clone());
                    (c.hand(), true)
                }
            }
        };
        if fresh {
            if let Err(e) = child.launch(&self.launch, caps, info, self.init_wait) {
                return Err(NoChild::Failed(e.to_string()));
            }
        }
        match child.ready().await {
            Ok(_) => Ok(child),
            Err(why) => Err(NoChild::Failed(why)),
        }
    }

    /// A place for a new child of `key`'s principal in `list` (the pool,
    /// locked), or which limit refuses one. Nothing is evicted and no start
    /// counted unless a child will start.
    fn place(&self, list: &mut Vec<Arc<Pooled>>, key: &Key) -> Result<Slot, Refused> {
        let max = self.limits.children.min(self.max_children).max(1);
        // Without credentials every request is one principal's: only the
        // pool's size bounds it.
        let share = match key.principal {
            Some(_) => self.limits.per_principal.clamp(1, max),
            None => max,
        };
        let full = || Refused::Full {
            max: self.max_children,
            pooled: list.len(),
        };
        let mine = |c: &Arc<Pooled>| c.key.principal == key.principal;
        let victim = if list.iter().filter(|c| mine(c)).count() >= share {
            Some(lru_idle(list, mine).ok_or(Refused::Share(share))?)
        } else if list.len() >= max {
            Some(lru_idle(list, |_| true).ok_or_else(full)?)
        } else {
            None
        };
        self.starts.take()?;
        let slot = match victim {
            Some(i) => list
                .remove(i)
                .evict()
                .or_else(|| Slot::take(&self.slots, self.max_children)),
            // A place among --max-children, or an idle child's.
            None => Slot::take(&self.slots, self.max_children)
                .or_else(|| lru_idle(list, |_| true).and_then(|i| list.remove(i).evict())),
        };
        slot.ok_or(Refused::Full {
            max: self.max_children,
            pooled: list.len(),
        })
    }
}

/// The least recently used idle child of `list` that `of` accepts.
fn lru_idle(list: &[Arc<Pooled>], of: impl Fn(&Arc<Pooled>) -> bool) -> Option<usize> {
    list.iter()
        .enumerate()
        .filter(|(_, c)| of(c) && c.idle())
        .max_by_key(|(_, c)| c.idle_for())
        .map(|(i, _)| i)
}

/// A refusal at a limit: 429 with `Retry-After`, the error naming the
/// limit (`data.reason` `busy`, `data.limit`), counted in
/// `mcp_resume_limit_refusals_total`.
fn refused(id: &Value, r: &Refused) -> Response<Body> {
    crate::metrics::limit_refused(r.limit());
    let data = json!({"reason": "busy", "limit": r.limit(), "retryAfterSecs": r.retry_after()});
    let mut resp = json_reply(
        StatusCode::TOO_MANY_REQUESTS,
        error(id, -32603, r.to_string(), Some(data)),
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after()));
    resp
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The call's progress and response as an SSE body.
fn sse_reply(call: Call, id: Value) -> Response<Body> {
    let events = futures_util::stream::unfold((call, id), |(mut call, id)| async move {
        let m = call.next(&id).await?;
        let event = Bytes::from(format!("event: message\ndata: {m}\n\n"));
        Some((Ok::<_, std::convert::Infallible>(event), (call, id)))
    });
    let mut resp = Response::new(Body::from_stream(events.boxed()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Every revision the gateway speaks at this URL, oldest first: the
/// session era's (a client may initialize a session instead) and the
/// stateless era's.
fn versions() -> Vec<&'static str> {
    let mut v: Vec<_> = SUPPORTED_PROTOCOL_VERSIONS.to_vec();
    v.sort_unstable();
    v.extend_from_slice(STATELESS_PROTOCOL_VERSIONS);
    v
}

/// A `server/discover` result from a child's `initialize` result.
fn discover(init: &Value) -> Value {
    let mut result = json!({
        "resultType": "complete",
        "supportedVersions": versions(),
        "capabilities": init.get("capabilities").cloned().unwrap_or_else(|| json!({})),
        "ttlMs": 0,
        "cacheScope": "private",
    });
    if let Some(i) = init.get("instructions") {
        result["instructions"] = i.clone();
    }
    if let Some(info) = init.get("serverInfo") {
        result["_meta"] = json!({"io.modelcontextprotocol/serverInfo": info});
    }
    result
}

pub(super) fn error(
    id: &Value,
    code: i64,
    message: impl Into<String>,
    data: Option<Value>,
) -> Value {
    match data {
        Some(d) => crate::jsonrpc::error_with_data(id, code, message, d),
        None => crate::jsonrpc::error(id, code, message),
    }
}

fn json_reply(status: StatusCode, body: Value) -> Response<Body> {
    axum::response::IntoResponse::into_response((status, axum::Json(body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discover_carries_the_child_s_capabilities_and_name() {
        let init = json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "everything", "version": "1"}, "instructions": "hi"});
        let d = discover(&init);
        assert_eq!(
            d["supportedVersions"],
            json!(["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"])
        );
        assert_eq!(d["capabilities"], json!({"tools": {}}));
        assert_eq!(
            d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "everything"
        );
        assert_eq!(d["instructions"], "hi");
    }
}
