//! Two instances on one Redis serving an exclusive backend (as a gateway's
//! child is): what happens when the owner's lease lapses, moves or cannot
//! be claimed again, with the fault injected where it hurts:
//! - a re-claim that fails (Redis unavailable) is tried again, and what
//!   was forwarded to the owner meanwhile is answered, not left waiting;
//! - a backend that cannot start at the re-claim (busy) gives the lease up,
//!   and the calls forwarded to it end loudly;
//! - an owner whose lease moved under a fresh heartbeat never hands a client
//!   its stale backend's answer (two backends never serve one session);
//! - an instance that learned it lost the lease commits nothing more: the
//!   holder ends its calls, on the session stream too.
//!
//! The backend here is a small one over the public seam: `whoami` answers
//! which instance's backend, and which start of it, runs the call; `slow`
//! answers after `ms`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::leased::LeasedLog;
use common::{send_text, ws_upgrade, Frame, TestServer};
use mcp_resume_log::{Log, RedisLog, Retention};
use mcp_resume_server::backend::{
    Backend, BackendError, BackendSession, DeliverError, Outbound, Outbox,
};
use mcp_resume_server::{McpServer, ServerConfig};
use mcp_resume_testkit::RedisServer;
use serde_json::{json, Value};

/// One instance's backend: exclusive, numbered starts, refusing to start
/// while `busy`.
struct Child {
    name: &'static str,
    starts: AtomicUsize,
    busy: Arc<AtomicBool>,
}

struct ChildSession {
    outbox: Outbox,
    me: String,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Backend for Child {
    fn open(
        &self,
        _session: &str,
        outbox: Outbox,
        _restore: Option<Value>,
    ) -> Result<Box<dyn BackendSession>, BackendError> {
        if self.busy.load(Ordering::Acquire) {
            return Err(BackendError::Busy("injected: no room for a child".into()));
        }
        let n = self.starts.fetch_add(1, Ordering::AcqRel) + 1;
        Ok(Box::new(ChildSession {
            outbox,
            me: format!("{}:{n}", self.name),
            tasks: Mutex::default(),
        }))
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn park_after(&self) -> Option<Duration> {
        None
    }
}

impl BackendSession for ChildSession {
    fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        let Some(id) = message.get("id").cloned() else {
            return Ok(());
        };
        let outbox = self.outbox.clone();
        let me = self.me.clone();
        let task = tokio::spawn(async move {
            let result = match message["method"].as_str() {
                Some("initialize") => {
                    json!({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                        "serverInfo": {"name": "child", "version": "1"}})
                }
                _ => {
                    let ms = message["params"]["arguments"]["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    json!({"content": [{"type": "text", "text": me}]})
                }
            };
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
            let _ = outbox
                .send(Outbound {
                    message: answer,
                    related: None,
                })
                .await;
        });
        self.tasks.lock().unwrap().push(task);
        Ok(())
    }

    fn close(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// Two instances: A on a [`LeasedLog`] (its faults), B on a plain handle.
struct Pair {
    redis: RedisServer,
    a: TestServer,
    a_log: Arc<LeasedLog>,
    a_busy: Arc<AtomicBool>,
    b: TestServer,
    b_log: Arc<dyn Log>,
}

async fn pair() -> Pair {
    let redis = RedisServer::start();
    let open = || async {
        Arc::new(
            RedisLog::connect(&redis.url, Retention::default(), 0)
                .await
                .unwrap(),
        ) as Arc<dyn Log>
    };
    let a_log = Arc::new(LeasedLog::new(open().await));
    let b_log = open().await;
    let mut config = ServerConfig::default();
    config.keepalive = Duration::from_secs(1);
    let a_busy = Arc::new(AtomicBool::new(false));
    let a_backend = Arc::new(Child {
        name: "A",
        starts: AtomicUsize::new(0),
        busy: a_busy.clone(),
    });
    let b_backend = Arc::new(Child {
        name: "B",
        starts: AtomicUsize::new(0),
        busy: Arc::default(),
    });
    let a = TestServer::start_server(
        McpServer::with_backend(a_log.clone(), a_backend, config.clone()),
        "/mcp",
    )
    .await;
    let b = TestServer::start_server(
        McpServer::with_backend(b_log.clone(), b_backend, config),
        "/mcp",
    )
    .await;
    Pair {
        redis,
        a,
        a_log,
        a_busy,
        b,
        b_log,
    }
}

/// `tools/call` of `name` through `s` as JSON; the whole answer.
async fn call(s: &TestServer, sid: &str, id: u64, name: &str, ms: u64) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": {"ms": ms}}});
    let resp = reqwest::Client::new()
        .post(&s.url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-session-id", sid)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    resp.json().await.unwrap()
}

/// Which backend answered: `A:1`, `B:1`, ...; `None` for an error.
fn who(answer: &Value) -> Option<&str> {
    answer["result"]["content"][0]["text"].as_str()
}

fn reason(answer: &Value) -> Option<&str> {
    answer["error"]["data"]["reason"].as_str()
}

/// A session created through A, whose backend runs there.
async fn owned_by_a(p: &Pair) -> String {
    let sid = p.a.init().await;
    assert_eq!(who(&call(&p.a, &sid, 1, "whoami", 0).await), Some("A:1"));
    assert_eq!(
        who(&call(&p.b, &sid, 2, "whoami", 0).await),
        Some("A:1"),
        "B forwards to the owner"
    );
    sid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_that_fails_is_tried_again_and_what_was_forwarded_is_answered() {
    let p = pair().await;
    let sid = owned_by_a(&p).await;
    // A's heartbeat lapsed (its route may no longer act), and Redis refuses
    // its next three claims.
    p.a_log.refuse_claims.store(3, Ordering::Release);
    p.a_log.lapses.fetch_add(1, Ordering::AcqRel);
    let answer = tokio::time::timeout(Duration::from_secs(20), call(&p.b, &sid, 3, "whoami", 0))
        .await
        .expect("a call forwarded to an owner whose re-claim failed waited forever");
    assert_eq!(
        who(&answer),
        Some("A:2"),
        "A claims again and its new backend answers: {answer}"
    );
    assert_eq!(p.a_log.refuse_claims.load(Ordering::Acquire), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_cannot_start_at_the_reclaim_gives_the_lease_up() {
    let p = pair().await;
    let sid = owned_by_a(&p).await;
    p.a_busy.store(true, Ordering::Release);
    p.a_log.lapses.fetch_add(1, Ordering::AcqRel);
    // Forwarded to A, which can no longer run the session: it ends loudly.
    let answer = tokio::time::timeout(Duration::from_secs(20), call(&p.b, &sid, 3, "whoami", 0))
        .await
        .expect("a call forwarded to an owner that could not start its backend waited forever");
    assert!(
        who(&answer).is_none() && reason(&answer) == Some("lease-lost"),
        "{answer}"
    );
    // The lease is free: the next call starts a backend on B.
    assert_eq!(who(&call(&p.b, &sid, 4, "whoami", 0).await), Some("B:1"));
    assert_eq!(who(&call(&p.a, &sid, 5, "whoami", 0).await), Some("B:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_lease_moved_under_a_fresh_heartbeat_never_answers_from_its_backend() {
    let p = pair().await;
    let sid = owned_by_a(&p).await;
    // A claim lost in a failover, an evicted heartbeat key: the log names B
    // while A's heartbeat stays fresh.
    let b_instance = p.b_log.instance().to_owned();
    p.redis
        .cli(&["HSET", &format!("mcpr:{{{sid}}}:s"), "o", &b_instance]);
    assert_eq!(who(&call(&p.b, &sid, 3, "whoami", 0).await), Some("B:1"));
    let through_a = call(&p.a, &sid, 4, "whoami", 0).await;
    assert_ne!(
        who(&through_a),
        Some("A:1"),
        "two backends served one session: A answered from its own after the lease moved"
    );
    assert_eq!(reason(&through_a), Some("lease-lost"), "{through_a}");
    // And from then on A forwards to B.
    assert_eq!(who(&call(&p.a, &sid, 5, "whoami", 0).await), Some("B:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_learned_it_lost_the_lease_commits_nothing_more() {
    let p = pair().await;
    let sid = owned_by_a(&p).await;
    // Two calls running on A, answered on request streams of their own: one
    // that ends soon, one that is still running when A learns.
    let streamed = |id: u64, ms: u64| {
        let (url, sid) = (p.a.url.clone(), sid.clone());
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": ms}}});
            let resp = reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .header("mcp-session-id", &sid)
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let events = common::read_sse(resp, 1, 20_000).await;
            events
                .iter()
                .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
                .find(|v| v["id"] == id)
        })
    };
    let soon = streamed(10, 800);
    let later = streamed(11, 30_000);
    // And one over B's WebSocket, forwarded to A and answered on the
    // session stream.
    let (mut ws, c) = ws_upgrade(&p.b.ws_url(&sid), None).await;
    send_text(&mut ws, &format!(r#"{{"type":"cursor-ack","cursor":{c}}}"#)).await;
    send_text(&mut ws, r#"{"type":"message","message":{"jsonrpc":"2.0","id":"w1","method":"tools/call","params":{"name":"slow","arguments":{"ms":30000}}}}"#).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The lease moves to B (a failover took A's claim back); B runs the
    // session from its next message.
    let b_instance = p.b_log.instance().to_owned();
    p.redis
        .cli(&["HSET", &format!("mcpr:{{{sid}}}:s"), "o", &b_instance]);
    assert_eq!(who(&call(&p.b, &sid, 3, "whoami", 0).await), Some("B:1"));

    // B, taking the session over, ended A's calls at once (its own, fenced
    // by its lease); A learns when its first call's answer is refused by
    // the fence.
    let first = soon.await.unwrap().expect("the first call ends");
    assert_eq!(reason(&first), Some("lease-lost"), "{first}");
    for _ in 0..100 {
        if p.a_log.learned.load(Ordering::Acquire) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        p.a_log.learned.load(Ordering::Acquire),
        "A's answer after the lease moved was not refused by the fence"
    );
    // The one still running ends loudly too, and so does the socket's.
    let second = tokio::time::timeout(Duration::from_secs(20), later)
        .await
        .expect("the call still running on A ends")
        .unwrap()
        .expect("with an answer");
    assert_eq!(reason(&second), Some("lease-lost"), "{second}");
    let mut socket_answer = None;
    for _ in 0..40 {
        if let Frame::Event(_, m) = common::next_frame(&mut ws, 500).await {
            if m["id"] == "w1" {
                socket_answer = Some(m);
                break;
            }
        }
    }
    let socket_answer = socket_answer.expect("the socket's call is answered");
    assert_eq!(
        reason(&socket_answer),
        Some("lease-lost"),
        "{socket_answer}"
    );
    // Everything after A learned was committed by B, the holder (A still
    // rings other instances' bells, which are log sessions of their own).
    let after: Vec<_> = p
        .a_log
        .after_learning
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, ..)| *id == sid)
        .cloned()
        .collect();
    assert!(
        after.is_empty(),
        "A committed after it learned it lost the lease: {after:?}"
    );
}
