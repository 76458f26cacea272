//! MCP's stateless era (2026-07-28) for an rmcp handler on mcp-resume's
//! transport, over 127.0.0.1: what a handler sends before its answer comes
//! first on the request's SSE answer, a client that goes away cancels its
//! handler (before its answer starts or halfway through it), a handler that
//! panics still answers, and what rmcp's own service must judge (an
//! `Mcp-Param-*` header, a body over its limit, an `Mcp-Name` that is not
//! the body's) is refused as rmcp refuses it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{MemoryLog, Retention};
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig as Info, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// How many `slow` and `halfway` calls saw their cancellation (nextest runs
/// each test in a process of its own; under `cargo test` the two tests
/// that count them would share it, so each waits for its own increase).
static CANCELLED: AtomicUsize = AtomicUsize::new(0);

/// Tools: `notify` notifies twice, then answers; `slow` runs until
/// cancelled; `halfway` notifies once, then runs until cancelled; `panic`
/// panics; `region` takes a `region` argument SEP-2243 puts in an
/// `Mcp-Param-Region` header.
#[derive(Clone)]
struct Tools;

impl ServerHandler for Tools {
    fn get_info(&self) -> Info {
        Info::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    /// What rmcp (and the transport) read a tool's schema with, to check
    /// its `Mcp-Param-*` headers.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        match request.name.as_ref() {
            "notify" => {
                let failed =
                    |e: rmcp::service::ServiceError| ErrorData::internal_error(e.to_string(), None);
                context
                    .peer
                    .notify_tool_list_changed()
                    .await
                    .map_err(failed)?;
                context
                    .peer
                    .notify_prompt_list_changed()
                    .await
                    .map_err(failed)?;
                Ok(CallToolResult::structured(json!({"notified": 2})).into())
            }
            "slow" | "halfway" => {
                if request.name == "halfway" {
                    let _ = context.peer.notify_tool_list_changed().await;
                }
                context.ct.cancelled().await;
                CANCELLED.fetch_add(1, Ordering::SeqCst);
                Ok(CallToolResult::success(vec![ContentBlock::text("cancelled")]).into())
            }
            "region" => Ok(CallToolResult::success(vec![ContentBlock::text("ok")]).into()),
            "panic" => panic!("this handler fails"),
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// The tools of [`Tools`].
fn tools() -> Vec<Tool> {
    let schema = Arc::new(serde_json::Map::new());
    let mut tools: Vec<Tool> = ["notify", "slow", "halfway", "panic"]
        .into_iter()
        .map(|n| Tool::new(n, n, schema.clone()))
        .collect();
    let region = json!({"type": "object", "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"}
    }});
    let region = Arc::new(region.as_object().cloned().unwrap_or_default());
    tools.push(Tool::new("region", "region", region));
    tools
}

/// Serves `Tools` at 127.0.0.1; returns the endpoint URL.
async fn serve() -> String {
    serve_with(ServerConfig::default()).await
}

/// [`serve`] with `config`.
async fn serve_with(config: ServerConfig) -> String {
    let log = Arc::new(MemoryLog::new(Retention::default()));
    let server = McpServer::with_backend(log, Arc::new(RmcpBackend::new(|| Tools)), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(server.serve(listener, std::future::pending()));
    url
}

/// A stateless `tools/call` of `tool`, its headers as the SDK clients send
/// them, with `Mcp-Name` set to `name_header`.
fn call(
    http: &reqwest::Client,
    url: &str,
    tool: &str,
    name_header: &str,
) -> reqwest::RequestBuilder {
    call_with(http, url, tool, name_header, json!({}))
}

/// [`call`] with `arguments`.
fn call_with(
    http: &reqwest::Client,
    url: &str,
    tool: &str,
    name_header: &str,
    arguments: Value,
) -> reqwest::RequestBuilder {
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}
    });
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta}});
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name_header)
        .body(body.to_string())
        .timeout(Duration::from_secs(10))
}

/// The JSON messages of an SSE body, in order.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).expect("an event is JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_handler_sends_before_its_answer_comes_first_on_an_sse_answer() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let r = call(&http, &url, "notify", "notify").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    assert!(r.headers().get("mcp-session-id").is_none(), "no session");
    let got = events(&r.text().await.unwrap());
    let methods: Vec<_> = got.iter().map(|m| m["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            json!("notifications/tools/list_changed"),
            json!("notifications/prompts/list_changed"),
            Value::Null
        ],
        "{got:?}"
    );
    assert_eq!(got[2]["id"], 5);
    assert_eq!(
        got[2]["result"]["structuredContent"]["notified"], 2,
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateless_client_that_goes_away_cancels_its_handler() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let waiting = tokio::time::timeout(
        Duration::from_millis(300),
        call(&http, &url, "slow", "slow").send(),
    )
    .await;
    assert!(waiting.is_err(), "slow answered before it was cancelled");
    // The request's connection is gone with the future that sent it.
    cancelled_since(
        0,
        "the handler of a client that went away was never cancelled",
    )
    .await;
}

/// Waits up to 5 s for [`CANCELLED`] to pass `before`.
async fn cancelled_since(before: usize, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while CANCELLED.load(Ordering::SeqCst) == before {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_halfway_through_an_sse_answer_cancels_its_handler() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let before = CANCELLED.load(Ordering::SeqCst);
    let mut r = call(&http, &url, "halfway", "halfway")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let chunk = r.chunk().await.unwrap().expect("the first event");
    assert!(
        String::from_utf8_lossy(&chunk).contains("notifications/tools/list_changed"),
        "{chunk:?}"
    );
    drop(r);
    cancelled_since(
        before,
        "the handler of an SSE answer dropped halfway was never cancelled",
    )
    .await;
}

/// Also shows the request was served by this transport's own path:
/// rmcp's service runs the handler unguarded and leaves a call whose
/// handler panicked without an answer, so this would time out there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_stateless_handler_still_answers() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let r = call(&http, &url, "panic", "panic").send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], 5);
    assert_eq!(v["error"]["code"], -32603, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_header_that_is_not_the_body_s_is_refused_as_rmcp_refuses_it() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let r = call(&http, &url, "notify", "slow").send().await.unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32020, "{v}");
    assert_eq!(v["id"], 5, "{v}");
}

/// A call whose tool puts an argument in a header goes to rmcp's service,
/// which checks the header against the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_param_header_that_is_not_the_body_s_is_refused_as_rmcp_refuses_it() {
    let url = serve().await;
    let http = reqwest::Client::new();
    let args = json!({"region": "eu"});
    let r = call_with(&http, &url, "region", "region", args.clone())
        .header("mcp-param-region", "us")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32020, "{v}");
    let r = call_with(&http, &url, "region", "region", args)
        .header("mcp-param-region", "eu")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the header matches");
}

/// A body the transport takes (its limit raised) but rmcp's service would
/// not (over its 4 MiB) goes to rmcp, which refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_rmcp_s_limit_is_refused_as_rmcp_refuses_it() {
    let mut config = ServerConfig::default();
    config.max_body_bytes = 16 << 20;
    let url = serve_with(config).await;
    let http = reqwest::Client::new();
    let big = json!({"padding": "x".repeat(5 << 20)});
    let r = call_with(&http, &url, "notify", "notify", big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
}
