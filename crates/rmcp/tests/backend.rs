//! An rmcp `ServerHandler` served on mcp-resume's transport
//! (`McpServer::with_backend` + `RmcpBackend`), over 127.0.0.1: server
//! requests ride the call's request stream, the client's answer reaches the
//! waiting handler from any instance, a dropped stream resumes, and nothing
//! leaves a caller waiting (cancel, panic).

// Sampling is what the issue asks for; rmcp 3.11 marks it deprecated (SEP-2577).
#![allow(deprecated)]

use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{Log, MemoryLog, RedisLog, Retention};
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};
use mcp_resume_testkit::RedisServer;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    CreateMessageRequestParams, ListToolsResult, PaginatedRequestParams,
    ResourceUpdatedNotificationParam, Role, SamplingMessage, ServerCapabilities,
    ServerConfig as Info, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

mod common;
use common::mcp_http::{init, post, read_until, resume, rpc};

/// Tools: `ask` samples the client, `slow` runs until cancelled, `panic` panics.
#[derive(Clone)]
struct Host;

impl ServerHandler for Host {
    fn get_info(&self) -> Info {
        Info::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = Arc::new(serde_json::Map::new());
        Ok(ListToolsResult::with_all_items(
            ["ask", "slow", "panic", "notify"]
                .into_iter()
                .map(|n| Tool::new(n, n, schema.clone()))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "ask" => {
                let asked = CreateMessageRequestParams::new(
                    vec![SamplingMessage::new(Role::User, "what is 6 x 7?")],
                    10,
                );
                let got = context
                    .peer
                    .create_message(asked)
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let text = serde_json::to_value(&got.message.content).unwrap_or_default();
                Ok(
                    CallToolResult::success(vec![ContentBlock::text(format!("sampled: {text}"))])
                        .into(),
                )
            }
            "slow" => {
                context.ct.cancelled().await;
                Ok(CallToolResult::success(vec![ContentBlock::text("cancelled")]).into())
            }
            "panic" => panic!("this handler fails"),
            "notify" => {
                // Unrelated to any call: they go to the session stream.
                let peer = &context.peer;
                let failed =
                    |e: rmcp::service::ServiceError| ErrorData::internal_error(e.to_string(), None);
                peer.notify_tool_list_changed().await.map_err(failed)?;
                peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(
                    "test://watched",
                ))
                .await
                .map_err(failed)?;
                Ok(CallToolResult::structured(json!({"notified": 2})).into())
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// Serves `Host` on `log` at 127.0.0.1; returns the endpoint URL.
async fn serve(log: Arc<dyn Log>) -> String {
    let server = McpServer::with_backend(
        log,
        Arc::new(RmcpBackend::new(|| Host)),
        ServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(server.serve(listener, std::future::pending()));
    url
}

/// The elicitation/sampling round trip of the issue: the client drops the
/// request stream while the server's request is pending, POSTs its answer
/// (to `answer_url`), resumes the stream from its cursor (at `resume_url`)
/// and gets the tool's result.
async fn durable_round_trip(call_url: &str, answer_url: &str, resume_url: &str) {
    let http = reqwest::Client::new();
    let sid = init(&http, call_url).await;
    let mut resp = post(&http, call_url, Some(&sid), json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let seen = read_until(&mut resp, |v| v["method"] == "sampling/createMessage").await;
    let (cursor, ask) = seen.last().unwrap().clone();
    assert!(
        cursor.contains('/'),
        "on the call's request stream: {cursor}"
    );
    drop(resp);
    let wire = ask["id"].clone();
    assert!(wire.is_string(), "the transport's own id: {wire}");
    let answer = json!({"jsonrpc": "2.0", "id": wire, "result": {
        "role": "assistant", "content": {"type": "text", "text": "42"},
        "model": "test-model", "stopReason": "endTurn"}});
    let r = post(&http, answer_url, Some(&sid), answer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let mut resumed = resume(&http, resume_url, &sid, &cursor).await;
    let rest = read_until(&mut resumed, |v| v["id"] == 7).await;
    let (_, result) = rest.last().unwrap();
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("42"), "{result}");
    // A second answer to the same request is dropped, loudly in the log only.
    let again = json!({"jsonrpc": "2.0", "id": ask["id"], "result": {}});
    assert_eq!(
        post(&http, answer_url, Some(&sid), again)
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_survives_a_dropped_stream_on_one_instance() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    durable_round_trip(&url, &url, &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_reaches_the_handler_from_another_instance_on_redis() {
    let redis = RedisServer::start();
    let connect = || async {
        let log: Arc<dyn Log> = Arc::new(
            RedisLog::connect(&redis.url, Retention::default(), 0)
                .await
                .unwrap(),
        );
        log
    };
    let a = serve(connect().await).await;
    let b = serve(connect().await).await;
    // Called on A; answered and resumed on B.
    durable_round_trip(&a, &b, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_initialized_on_one_instance_is_served_by_another() {
    let redis = RedisServer::start();
    let a_log: Arc<dyn Log> = Arc::new(
        RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap(),
    );
    let b_log: Arc<dyn Log> = Arc::new(
        RedisLog::connect(&redis.url, Retention::default(), 0)
            .await
            .unwrap(),
    );
    let (a, b) = (serve(a_log).await, serve(b_log).await);
    let http = reqwest::Client::new();
    let sid = init(&http, &a).await;
    let list: Value = post(
        &http,
        &b,
        Some(&sid),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .header("mcp-protocol-version", "2025-11-25")
    .send()
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        list["result"]["tools"].as_array().map(Vec::len),
        Some(4),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_ends_its_stream_with_an_error() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let sid = init(&http, &url).await;
    let cancel = |id: &str| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "changed my mind"}});
    // A client that accepts only SSE gets the call's request stream at once.
    let mut resp = http
        .post(&url)
        .header("accept", "text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .json(&json!({"jsonrpc": "2.0", "id": "s1", "method": "tools/call", "params": {"name": "slow", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let r = post(&http, &url, Some(&sid), cancel("s1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let got = read_until(&mut resp, |v| v["id"] == "s1").await;
    let (_, last) = got.last().unwrap();
    assert_eq!(last["error"]["data"]["reason"], "cancelled", "{last}");
    // One that accepts JSON too waits for one JSON answer: the same error.
    let call = tokio::spawn(
        post(&http, &url, Some(&sid), json!({"jsonrpc": "2.0", "id": "s2", "method": "tools/call", "params": {"name": "slow", "arguments": {}}}))
            .send(),
    );
    // The cancel may overtake the call; it is repeated until the call ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !call.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the cancelled call never ended"
        );
        post(&http, &url, Some(&sid), cancel("s2"))
            .send()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer: Value = call.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(answer["error"]["data"]["reason"], "cancelled", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_answers_with_an_error() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let sid = init(&http, &url).await;
    let resp = post(&http, &url, Some(&sid), json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "panic", "arguments": {}}}))
        .send();
    let mut resp = tokio::time::timeout(Duration::from_secs(10), resp)
        .await
        .unwrap()
        .unwrap();
    let got = read_until(&mut resp, |v| v["id"] == 3).await;
    assert_eq!(got.last().unwrap().1["error"]["code"], -32603);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nobody_awaits_is_accepted_and_dropped() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let sid = init(&http, &url).await;
    for id in [json!(12), json!("mr.000000000000.0"), json!("nope")] {
        let r = post(
            &http,
            &url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(r.status(), 202);
    }
    // The session still works.
    let pong: Value = rpc(
        &http,
        &url,
        &sid,
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    )
    .await;
    assert_eq!(pong["result"], json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_outside_a_call_reach_the_session_stream_committed_first() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let sid = init(&http, &url).await;
    // The handler's sends were awaited, so both are committed before its
    // response exists; none of them rides the call's own stream.
    let mut call = post(&http, &url, Some(&sid), json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "notify", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    let on_call = read_until(&mut call, |v| v["id"] == 9).await;
    assert_eq!(
        on_call.len(),
        1,
        "only the response on the call's stream: {on_call:?}"
    );
    let done = &on_call[0].1;
    assert_eq!(done["result"]["structuredContent"]["notified"], 2, "{done}");
    let mut stream = http
        .get(&url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .send()
        .await
        .unwrap();
    let got = read_until(&mut stream, |v| {
        v["method"] == "notifications/resources/updated"
    })
    .await;
    let methods: Vec<&str> = got
        .iter()
        .filter_map(|(_, v)| v["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        [
            "notifications/tools/list_changed",
            "notifications/resources/updated"
        ]
    );
    assert_eq!(got.last().unwrap().0, "2", "session stream ids");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_03_26_batch_is_answered_by_the_backend_in_one_array() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let resp = post(&http, &url, None, json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "old", "version": "0"}}}))
    .send()
    .await
    .unwrap();
    let sid = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let init: Value = resp.json().await.unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26", "{init}");
    let batch = json!([
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/list"},
    ]);
    let replies: Value = http
        .post(&url)
        .header("accept", "application/json")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .json(&batch)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&Value> = replies
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(ids, [&json!("a"), &json!("b")], "{replies}");
    assert_eq!(
        replies[1]["result"]["tools"].as_array().map(Vec::len),
        Some(4)
    );
}

/// One endpoint, both eras: a 2026-07-28 client (no `initialize`, `_meta` on
/// every request) is served statelessly, a handler per request, while a
/// 2025 client keeps its session on the same URL.
#[tokio::test]
async fn both_protocol_eras_share_one_endpoint() {
    let url = serve(Arc::new(MemoryLog::new(Retention::default()))).await;
    let http = reqwest::Client::new();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let stateless = |id: u64, method: &'static str| {
        http.post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": meta}})
                    .to_string(),
            )
            .send()
    };
    let r = stateless(1, "server/discover").await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("mcp-session-id").is_none(), "no session");
    let v: Value = r.json().await.unwrap();
    let versions = v["result"]["supportedVersions"].to_string();
    assert!(versions.contains("2026-07-28"), "{v}");
    let r = stateless(2, "tools/list").await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["result"]["tools"][0]["name"], "ask", "{v}");
    assert!(v["result"]["ttlMs"].is_u64(), "cache hints: {v}");
    let r = stateless(3, "logging/setLevel").await.unwrap();
    assert_eq!(r.status(), 404, "removed in 2026-07-28");
    // The 2025 handshake on the same URL.
    let sid = init(&http, &url).await;
    let v = rpc(
        &http,
        &url,
        &sid,
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}),
    )
    .await;
    assert_eq!(v["result"]["tools"][0]["name"], "ask", "{v}");
}
