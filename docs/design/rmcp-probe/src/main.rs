//! Probe: an rmcp 3.11.0 ServerHandler on a custom Transport that "commits"
//! every outgoing message (a shared committer task with a configurable delay,
//! standing in for the log's group commit) before the send future resolves.
//! Evidence for docs/design/rmcp-backend.md; not part of the workspace.
//!
//!   cargo run --release                # A-F: commit point, order, server requests, cancel, restore, throughput
//!   PROBE_G=bare cargo run --release   # G: RSS per idle session (also PROBE_G=new, PROBE_G=clone)
#![allow(deprecated)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolResult, ClientJsonRpcMessage, ContentBlock, CreateMessageRequestParams, GetExtensions,
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ServerJsonRpcMessage,
};
use rmcp::handler::server::{tool::ToolRouter, wrapper::Parameters};
use rmcp::service::{OriginatingRequestId, RequestContext};
use rmcp::transport::Transport;
use rmcp::{Peer, RoleServer, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

// ------------------------------------------------------------- committer ---

/// One committed message: which session, its JSON, and the originating
/// request id the transport saw (for server requests).
#[derive(Clone, Debug)]
struct Committed {
    session: u64,
    json: Value,
    originating: Option<String>,
}

struct Pending {
    msg: Committed,
    ack: oneshot::Sender<()>,
}

/// Shared by all sessions, like DiskLog's committer: drains everything queued,
/// "fsyncs" once (sleeps `delay`), then acks the batch in order.
#[derive(Clone)]
struct Committer {
    tx: mpsc::UnboundedSender<Pending>,
    log: Arc<Mutex<Vec<Committed>>>,
}

impl Committer {
    fn start(delay: Duration, keep: bool) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l2 = log.clone();
        tokio::spawn(async move {
            let mut batch = Vec::new();
            while rx.recv_many(&mut batch, 8192).await > 0 {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                {
                    let mut g = l2.lock().unwrap();
                    for p in &batch {
                        if keep {
                            g.push(p.msg.clone());
                        }
                    }
                }
                for p in batch.drain(..) {
                    let _ = p.ack.send(());
                }
            }
        });
        Self { tx, log }
    }
}

// ------------------------------------------------------------- transport ---

#[derive(Debug)]
struct Closed;
impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("committer closed")
    }
}
impl std::error::Error for Closed {}

/// The per-session transport: `receive` pops what the HTTP layer pushed;
/// `send` enqueues in call order (synchronously) and its future resolves
/// once the committer acked.
struct LogTransport {
    session: u64,
    inbox: mpsc::UnboundedReceiver<Value>,
    committer: Committer,
    sends: Arc<AtomicU64>,
}

impl Transport<RoleServer> for LogTransport {
    type Error = Closed;
    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.sends.fetch_add(1, Ordering::Relaxed);
        let originating = match &item {
            ServerJsonRpcMessage::Request(r) => r
                .request
                .extensions()
                .get::<OriginatingRequestId>()
                .map(|o| o.0.to_string()),
            _ => None,
        };
        let json = serde_json::to_value(&item).expect("serialize");
        let (ack, done) = oneshot::channel();
        // Ordering is fixed here, at call time, not when the future is polled.
        let queued = self.committer.tx.send(Pending {
            msg: Committed { session: self.session, json, originating },
            ack,
        });
        async move {
            queued.map_err(|_| Closed)?;
            done.await.map_err(|_| Closed)
        }
    }
    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        // The inbox holds raw JSON (32 bytes a slot); parsed here, one at a time.
        self.inbox.recv().await.map(|v| serde_json::from_value(v).expect("client message"))
    }
    async fn close(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

// ---------------------------------------------------------------- server ---

#[derive(Clone)]
#[allow(dead_code)] // the tool_handler macro reads tool_router
struct Probe {
    tool_router: ToolRouter<Self>,
    notify_elapsed: Arc<Mutex<Vec<Duration>>>,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Steps {
    steps: u32,
}

#[derive(Deserialize, schemars::JsonSchema)]
struct Text {
    text: String,
}

#[tool_router]
impl Probe {
    #[tool(description = "echo")]
    async fn echo(&self, Parameters(Text { text }): Parameters<Text>) -> String {
        text
    }

    #[tool(description = "one log notification, timed, then a result")]
    async fn log_once(&self, peer: Peer<RoleServer>) -> String {
        let t = Instant::now();
        let p: LoggingMessageNotificationParam =
            serde_json::from_value(json!({"level": "info", "data": "hello"})).unwrap();
        let _ = LoggingLevel::Info;
        peer.notify_logging_message(p).await.expect("notify");
        self.notify_elapsed.lock().unwrap().push(t.elapsed());
        "logged".into()
    }

    #[tool(description = "progress steps")]
    async fn progress(
        &self,
        Parameters(Steps { steps }): Parameters<Steps>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        let token = ctx.meta.get_progress_token().expect("progressToken");
        for k in 0..steps {
            let p: ProgressNotificationParam = serde_json::from_value(
                json!({"progressToken": token, "progress": k, "total": steps}),
            )
            .unwrap();
            ctx.peer.notify_progress(p).await.expect("progress");
        }
        format!("{steps} steps")
    }

    #[tool(description = "asks the client to sample")]
    async fn sample(&self, peer: Peer<RoleServer>) -> Result<CallToolResult, rmcp::ErrorData> {
        let params: CreateMessageRequestParams = serde_json::from_value(json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 10
        }))
        .unwrap();
        let r = peer
            .create_message(params)
            .await
            .map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "sampled: {}",
            serde_json::to_string(&r).unwrap()
        ))]))
    }

    #[tool(description = "sleeps until cancelled or 2 s")]
    async fn slow(&self, ctx: RequestContext<RoleServer>) -> String {
        tokio::select! {
            _ = ctx.ct.cancelled() => "cancelled".into(),
            _ = tokio::time::sleep(Duration::from_secs(2)) => "slept".into(),
        }
    }
}

#[tool_handler]
impl ServerHandler for Probe {}

#[derive(Clone)]
struct Bare;
impl ServerHandler for Bare {}

async fn open_any<S: ServerHandler>(id: u64, committer: &Committer, server: S, sends: &Arc<AtomicU64>) -> (mpsc::UnboundedSender<Value>, rmcp::service::RunningService<RoleServer, S>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let t = LogTransport { session: id, inbox: rx, committer: committer.clone(), sends: sends.clone() };
    tx.send(msg(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"sampling":{}},
        "clientInfo":{"name":"probe","version":"1"}}}))).unwrap();
    tx.send(msg(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))).unwrap();
    (tx, server.serve(t).await.expect("serve"))
}

fn probe() -> Probe {
    Probe { tool_router: Probe::tool_router(), notify_elapsed: Default::default() }
}

// ---------------------------------------------------------------- client ---

fn msg(v: Value) -> Value {
    v
}

struct Session {
    inbox: mpsc::UnboundedSender<Value>,
    _running: Option<rmcp::service::RunningService<RoleServer, Probe>>,
}

/// Starts a session: serve_server on a LogTransport, then initialize and
/// initialized through the inbox (the handshake rmcp insists on).
async fn open(id: u64, committer: &Committer, server: Probe, sends: &Arc<AtomicU64>) -> Session {
    let (tx, rx) = mpsc::unbounded_channel();
    let t = LogTransport { session: id, inbox: rx, committer: committer.clone(), sends: sends.clone() };
    tx.send(msg(json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{"sampling":{}},
        "clientInfo":{"name":"probe","version":"1"}}})))
        .unwrap();
    tx.send(msg(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))).unwrap();
    let running = server.serve(t).await.expect("serve");
    Session { inbox: tx, _running: Some(running) }
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn wait_for(log: &Arc<Mutex<Vec<Committed>>>, pred: impl Fn(&[Committed]) -> bool) {
    let start = Instant::now();
    loop {
        if pred(&log.lock().unwrap()) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "timed out");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn responses_to(log: &[Committed], session: u64, id: i64) -> Vec<Value> {
    log.iter()
        .filter(|c| c.session == session && c.json.get("id") == Some(&json!(id)) && c.json.get("method").is_none())
        .map(|c| c.json.clone())
        .collect()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sends = Arc::new(AtomicU64::new(0));
    let only_g = std::env::var("PROBE_G").ok();
    if only_g.as_deref() == Some("sizes") {
        println!("size_of ClientJsonRpcMessage {} ServerJsonRpcMessage {} ServerNotification {} ServerRequest {} Value {}",
            std::mem::size_of::<ClientJsonRpcMessage>(), std::mem::size_of::<ServerJsonRpcMessage>(),
            std::mem::size_of::<rmcp::model::ServerNotification>(), std::mem::size_of::<rmcp::model::ServerRequest>(), std::mem::size_of::<Value>());
        return;
    }
    if only_g.is_none() {

    // A. commit point: notify returns only after the (20 ms) commit.
    {
        let c = Committer::start(Duration::from_millis(20), true);
        let server = probe();
        let s = open(1, &c, server.clone(), &sends).await;
        s.inbox.send(msg(json!({"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"log_once","arguments":{}}}))).unwrap();
        wait_for(&c.log, |l| !responses_to(l, 1, 10).is_empty()).await;
        let e = server.notify_elapsed.lock().unwrap().clone();
        println!("A commit point: notify_logging_message returned after {:?} with a 20 ms commit (>= 20 ms means it awaited the transport's send future)", e[0]);
        let l = c.log.lock().unwrap();
        let order: Vec<String> = l.iter().filter(|m| m.session == 1).map(|m| m.json.get("method").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| format!("response id {}", m.json["id"]))).collect();
        println!("A order committed: {order:?}");
    }

    // B. ordering: 16 concurrent calls x 50 progress on one session.
    {
        let c = Committer::start(Duration::from_millis(1), true);
        let s = open(2, &c, probe(), &sends).await;
        for i in 0..16 {
            s.inbox.send(msg(json!({"jsonrpc":"2.0","id":100+i,"method":"tools/call","params":{"name":"progress","arguments":{"steps":50},"_meta":{"progressToken":format!("t{i}")}}}))).unwrap();
        }
        wait_for(&c.log, |l| (0..16).all(|i| !responses_to(l, 2, 100 + i).is_empty())).await;
        let l = c.log.lock().unwrap();
        let mut bad = 0;
        for i in 0..16 {
            let tok = format!("t{i}");
            let mut last = -1i64;
            let mut seen_resp = false;
            for m in l.iter().filter(|m| m.session == 2) {
                if m.json["params"]["progressToken"] == json!(tok) {
                    let p = m.json["params"]["progress"].as_f64().unwrap() as i64;
                    if p != last + 1 || seen_resp { bad += 1; }
                    last = p;
                }
                if m.json.get("id") == Some(&json!(100 + i)) && m.json.get("method").is_none() { seen_resp = true; }
            }
            if last != 49 || !seen_resp { bad += 1; }
        }
        println!("B ordering: 16 concurrent calls x 50 progress on one session: {} out-of-order/missing (every call's progress 0..49 in order, then its response)", bad);
    }

    // C. server-to-client request inside a tool call: OriginatingRequestId and the id rmcp picks.
    {
        let c = Committer::start(Duration::from_millis(0), true);
        let s = open(3, &c, probe(), &sends).await;
        s.inbox.send(msg(json!({"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{"name":"sample","arguments":{}}}))).unwrap();
        wait_for(&c.log, |l| l.iter().any(|m| m.session == 3 && m.json.get("method") == Some(&json!("sampling/createMessage")))).await;
        let req = c.log.lock().unwrap().iter().find(|m| m.session == 3 && m.json.get("method") == Some(&json!("sampling/createMessage"))).cloned().unwrap();
        println!("C server request on the wire: id {} originating {:?} params._meta {}", req.json["id"], req.originating, req.json["params"].get("_meta").cloned().unwrap_or(Value::Null));
        s.inbox.send(msg(json!({"jsonrpc":"2.0","id":req.json["id"].clone(),"result":{"role":"assistant","content":{"type":"text","text":"ok"},"model":"m","stopReason":"endTurn"}}))).unwrap();
        wait_for(&c.log, |l| l.iter().any(|m| m.session == 3 && m.json.get("id") == Some(&json!("call-7")))).await;
        let r = c.log.lock().unwrap().iter().find(|m| m.session == 3 && m.json.get("id") == Some(&json!("call-7"))).cloned().unwrap();
        println!("C tool result after the client's response: {}", r.json["result"]["content"][0]["text"]);
        // a second session's first server request gets the same id: ids are per Peer, from 0
        let s2 = open(33, &c, probe(), &sends).await;
        s2.inbox.send(msg(json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sample","arguments":{}}}))).unwrap();
        wait_for(&c.log, |l| l.iter().any(|m| m.session == 33 && m.json.get("method") == Some(&json!("sampling/createMessage")))).await;
        let req2 = c.log.lock().unwrap().iter().find(|m| m.session == 33 && m.json.get("method") == Some(&json!("sampling/createMessage"))).cloned().unwrap();
        println!("C a fresh session's (or a restarted one's) first server request id: {}", req2.json["id"]);
    }

    // D. cancellation: the cancelled call's response is dropped by rmcp.
    {
        let c = Committer::start(Duration::from_millis(0), true);
        let s = open(4, &c, probe(), &sends).await;
        s.inbox.send(msg(json!({"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"slow","arguments":{}}}))).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.inbox.send(msg(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":40,"reason":"test"}}))).unwrap();
        s.inbox.send(msg(json!({"jsonrpc":"2.0","id":41,"method":"ping"}))).unwrap();
        wait_for(&c.log, |l| !responses_to(l, 4, 41).is_empty()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        println!("D cancellation: messages committed for the cancelled call id 40: {}", responses_to(&c.log.lock().unwrap(), 4, 40).len());
    }

    // E. restore without the handshake: serve_directly with stored InitializeRequestParams.
    {
        let c = Committer::start(Duration::from_millis(0), true);
        let (tx, rx) = mpsc::unbounded_channel();
        let t = LogTransport { session: 5, inbox: rx, committer: c.clone(), sends: sends.clone() };
        let params: rmcp::model::InitializeRequestParams = serde_json::from_value(json!({
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}})).unwrap();
        let _running = rmcp::service::serve_directly(probe(), t, Some(params));
        tx.send(msg(json!({"jsonrpc":"2.0","id":50,"method":"tools/list"}))).unwrap();
        wait_for(&c.log, |l| !responses_to(l, 5, 50).is_empty()).await;
        let n = responses_to(&c.log.lock().unwrap(), 5, 50)[0]["result"]["tools"].as_array().map(|a| a.len()).unwrap_or(0);
        println!("E serve_directly (no initialize replayed): tools/list answered with {n} tools");
    }

    // F. throughput of tools/call through rmcp + this transport, no I/O.
    {
        let c = Committer::start(Duration::ZERO, false);
        let done = Arc::new(AtomicU64::new(0));
        // count responses by wrapping: poll the sends counter instead
        let s = open(6, &c, probe(), &sends).await;
        let n = 20_000u64;
        let before = sends.load(Ordering::Relaxed);
        let t = Instant::now();
        for i in 0..n {
            s.inbox.send(msg(json!({"jsonrpc":"2.0","id":1000+i,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}))).unwrap();
        }
        while sends.load(Ordering::Relaxed) - before < n { tokio::time::sleep(Duration::from_micros(200)).await; }
        let dt = t.elapsed();
        println!("F throughput: {n} pipelined tools/call echo on one session in {:?}: {:.0}/s", dt, n as f64 / dt.as_secs_f64());
        let _ = done;
    }

    // F2. 64 sessions at once.
    {
        let c = Committer::start(Duration::ZERO, false);
        let mut ss = Vec::new();
        for k in 0..64u64 { ss.push(open_any(700 + k, &c, probe(), &sends).await); }
        let per = 1_000u64;
        let n = per * 64;
        let before = sends.load(Ordering::Relaxed);
        let t = Instant::now();
        for i in 0..per {
            for (tx, _) in &ss {
                tx.send(json!({"jsonrpc":"2.0","id":1000+i,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}})).unwrap();
            }
        }
        while sends.load(Ordering::Relaxed) - before < n { tokio::time::sleep(Duration::from_micros(200)).await; }
        let dt = t.elapsed();
        println!("F2 throughput: {n} tools/call echo over 64 sessions in {:?}: {:.0}/s", dt, n as f64 / dt.as_secs_f64());
    }
    }
    // G. per-session cost: N idle initialized sessions, three handler shapes.
    for variant in ["new Probe per session (own ToolRouter)", "clone of one Probe", "bare ServerHandler (no tools)"] {
        if let Some(g) = &only_g { if !variant.starts_with(g.as_str()) { continue; } } else { continue; }
        let c = Committer::start(Duration::ZERO, false);
        let n = 10_000u64;
        let proto = probe();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = rss_kib();
        let t0 = Instant::now();
        let mut keep_a = Vec::new();
        let mut keep_b = Vec::new();
        for i in 0..n {
            match variant.chars().next().unwrap() {
                'n' => keep_a.push(open_any(10_000 + i, &c, probe(), &sends).await),
                'c' => keep_a.push(open_any(10_000 + i, &c, proto.clone(), &sends).await),
                _ => keep_b.push(open_any(10_000 + i, &c, Bare, &sends).await),
            }
        }
        let dt = t0.elapsed();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let after = rss_kib();
        let m = tokio::runtime::Handle::current().metrics();
        println!("G {variant}: {n} idle sessions in {:?}: RSS +{} KiB, {:.1} KiB per session; tokio alive tasks {}",
            dt, after.saturating_sub(before), after.saturating_sub(before) as f64 / n as f64, m.num_alive_tasks());
        drop(keep_a); drop(keep_b);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
