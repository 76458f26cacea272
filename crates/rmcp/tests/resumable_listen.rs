//! The resumable listen stream (MCP 2026-07-28 extension, docs/protocol.md
//! 3.7) on the `conformance` example: `subscriptions/listen` from a client
//! that declares the extension is a log session `L` whose acknowledgement and
//! notifications are committed before anyone sees them; after a disconnect
//! the client reads on from its cursor (SSE or the cursor-safe WebSocket
//! upgrade), a cursor past the head is a loud 409, and a listen stream whose
//! instance died ends with 404 instead of staying silent.

use std::time::Duration;

use mcp_resume_client::{McpClient, ReaderOptions, Transport};
use serde_json::{json, Value};

mod common;
use common::mcp_http::stateless;
use common::proc::Instance;

/// A stateless `tools/call` of one of the fixture's list-change triggers.
async fn trigger(url: &str, tool: &str) {
    let args = json!({"name": tool, "arguments": {}});
    let v = stateless(url, 9, "tools/call", Some(tool), args, json!({})).await;
    assert!(v.get("result").is_some(), "{v}");
}

/// Reads `n` events (seq, message) from a reader.
async fn take(reader: &mut mcp_resume_client::SessionReader, n: usize) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("the listen stream went silent")
            .expect("no error");
        out.push((ev.seq.unwrap(), ev.message));
    }
    out
}

#[test]
fn a_listen_stream_resumes_from_its_cursor_and_upgrades_to_a_websocket() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("disk:{}", dir.path().join("log").display());
    let mut first = Instance::spawn_example("conformance", &store);
    let rt = common::rt();
    let (listen, seen) = rt.block_on(async {
        // discover offers the extension.
        let d = stateless(&first.url, 1, "server/discover", None, json!({}), json!({})).await;
        assert!(
            d["result"]["capabilities"]["extensions"]["dev.mcp-resume/resumable-listen"]
                .is_object(),
            "{d}"
        );
        // Listen, and drop the POST at once.
        let client = McpClient::new(&first.url);
        let listen = client
            .listen(json!({"toolsListChanged": true}))
            .await
            .unwrap();
        let id = listen.session_id().unwrap().to_owned();
        // Changes while nobody reads are committed to L.
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger(&first.url, "test_trigger_tool_change").await;
        trigger(&first.url, "test_trigger_tool_change").await;
        // Read from the start over SSE: the acknowledgement, then both changes.
        let mut opts = ReaderOptions::default();
        opts.from = Some(0);
        let mut sse = listen.reader(opts).unwrap();
        let got = take(&mut sse, 3).await;
        assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(
            got[0].1["method"], "notifications/subscriptions/acknowledged",
            "{:?}",
            got[0]
        );
        let sub = got[0].1["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
        for (_, m) in &got[1..] {
            assert_eq!(m["method"], "notifications/tools/list_changed", "{m}");
            assert_eq!(
                m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
                sub
            );
        }
        drop(sse);
        // Upgraded to a WebSocket from cursor 2: 3, then what comes live.
        let mut opts = ReaderOptions::default();
        opts.transport = Transport::WebSocket;
        opts.from = Some(2);
        let mut ws = listen.reader(opts).unwrap();
        let pending = tokio::spawn({
            let url = first.url.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                trigger(&url, "test_trigger_tool_change").await;
            }
        });
        let live = take(&mut ws, 2).await;
        pending.await.unwrap();
        assert_eq!(live.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(ws.fallbacks(), 0, "the upgrade echoed the cursor");
        // A cursor past the head is refused loudly.
        let r = reqwest::Client::new()
            .get(&first.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &id)
            .header("last-event-id", "99")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409);
        (id, 4)
    });
    // The instance that fed it dies: the stream ends loudly, never silently.
    first.kill9();
    let second = Instance::spawn_example("conformance", &store);
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(&second.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &listen)
            .header("last-event-id", seen.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            404,
            "a listen stream nothing feeds any more ends"
        );
    });
}
