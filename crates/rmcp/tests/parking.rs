//! Parking a hosted rmcp handler (`ServerConfig::park_after`) never cuts
//! its background work: a handler that keeps notifying after its call
//! answered is busy, and is parked only once it has gone quiet; the next
//! call makes it again. Over 127.0.0.1, one GET stream read throughout.

use std::sync::Arc;
use std::time::Duration;

use mcp_resume_log::{Log, MemoryLog, Retention};
use mcp_resume_rmcp::RmcpBackend;
use mcp_resume_server::{McpServer, ServerConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ResourceUpdatedNotificationParam, ServerCapabilities,
    ServerConfig as Info, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};

mod common;
use common::mcp_http::{init, listen, read_until, rpc};

/// Notifications `tick` sends after answering, and the time between them:
/// 3 s of background work against a park time of 1 s, about twenty sends
/// between two maintenance passes (a second apart).
const TICKS: usize = 60;
const EVERY: Duration = Duration::from_millis(50);

/// `tick` answers at once and then, in the background, sends `TICKS`
/// `notifications/resources/updated` (`test://tick/N`), `EVERY` apart.
#[derive(Clone)]
struct Ticker;

impl ServerHandler for Ticker {
    fn get_info(&self) -> Info {
        Info::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "tick",
            "notifies in the background",
            Arc::new(serde_json::Map::new()),
        )]))
    }

    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let peer = context.peer.clone();
        tokio::spawn(async move {
            for n in 0..TICKS {
                tokio::time::sleep(EVERY).await;
                let uri = format!("test://tick/{n}");
                if let Err(e) = peer
                    .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                    .await
                {
                    // The stream's reader sees the gap and the test fails.
                    eprintln!("tick {n} not sent: {e}");
                    return;
                }
            }
        });
        Ok(CallToolResult::success(vec![ContentBlock::text("ticking")]).into())
    }
}

/// The text of `/metrics` at `url`'s server.
async fn metrics(http: &reqwest::Client, url: &str) -> String {
    let url = url.replace("/mcp", "/metrics");
    http.get(url).send().await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_notifying_in_the_background_is_parked_only_once_quiet() {
    let mut config = ServerConfig::default();
    config.park_after = Some(Duration::from_secs(1));
    config.maintenance_interval = Duration::from_secs(1);
    let log: Arc<dyn Log> = Arc::new(MemoryLog::new(Retention::default()));
    let server = McpServer::with_backend(log, Arc::new(RmcpBackend::new(|| Ticker)), config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(server.serve(listener, std::future::pending()));

    let http = reqwest::Client::new();
    let sid = init(&http, &url).await;
    let mut stream = listen(&http, &url, &sid).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "tick", "arguments": {}}});
    let answer = rpc(&http, &url, &sid, call.clone()).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "ticking",
        "{answer}"
    );

    // Every tick arrives, in order, though the session had nothing in
    // flight for three park times while they were sent.
    let mut ticks = 0;
    let got = read_until(&mut stream, |v: &Value| {
        if v["method"] == "notifications/resources/updated" {
            ticks += 1;
        }
        ticks == TICKS
    })
    .await;
    let uris: Vec<String> = got
        .iter()
        .filter(|(_, v)| v["method"] == "notifications/resources/updated")
        .map(|(_, v)| v["params"]["uri"].as_str().unwrap_or_default().to_owned())
        .collect();
    let expected: Vec<String> = (0..TICKS).map(|n| format!("test://tick/{n}")).collect();
    assert_eq!(uris, expected);
    assert!(
        metrics(&http, &url)
            .await
            .contains("mcp_resume_handlers_parked_total 0"),
        "parked while its background task was sending"
    );

    // Quiet now: parked within a few passes.
    let parked = async {
        while !metrics(&http, &url)
            .await
            .contains("mcp_resume_handlers_parked_total 1")
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), parked)
        .await
        .expect("the quiet handler was parked");

    // And made again for the next call.
    let mut again = call;
    again["id"] = json!(2);
    let answer = rpc(&http, &url, &sid, again).await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "ticking",
        "{answer}"
    );
}
