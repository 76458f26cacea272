//! `McpServer::serve` answers a POST to its endpoint without the router in
//! front of it (`accept::App`); `serve_app` sends every request through the
//! application's router. Both must answer alike, and an application's own
//! layer around the router must see the endpoint's POSTs.

mod common;

use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::Response;
use common::TestServer;
use mcp_resume_log::MemoryLog;
use mcp_resume_server::{demo::demo_tools, McpServer, ServerConfig};
use serde_json::json;

/// Status, headers (but the date, the session id and the application's
/// mark) and body of one POST to `url`.
async fn answer(
    url: &str,
    sid: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String, Option<String>) {
    let mut req = reqwest::Client::new().post(url).body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if let Some(sid) = sid {
        req = req.header("mcp-session-id", sid);
    }
    let resp = req.send().await.expect("the server answers");
    let status = resp.status().as_u16();
    let mark = resp
        .headers()
        .get("x-app-layer")
        .map(|v| v.to_str().unwrap().to_owned());
    let mut kept: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "date" | "mcp-session-id" | "x-app-layer"))
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
        .collect();
    kept.sort();
    (status, kept, resp.text().await.unwrap(), mark)
}

#[tokio::test]
async fn the_endpoints_post_answers_alike_with_or_without_the_router_in_front() {
    let direct = TestServer::start(ServerConfig::default()).await;
    let config = ServerConfig::default();
    let base = config.base_path.clone();
    let server = McpServer::new(Arc::new(MemoryLog::default()), demo_tools(), config);
    let routed = TestServer::start_app(server, &base, |router| {
        router.layer(axum::middleware::map_response(
            |mut r: Response| async move {
                r.headers_mut()
                    .insert("x-app-layer", HeaderValue::from_static("seen"));
                r
            },
        ))
    })
    .await;
    let json = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "héllo \"x\""}}})
    .to_string();
    let mut seen = Vec::new();
    for server in [&direct, &routed] {
        let sid = server.init().await;
        let s = Some(sid.as_str());
        let other = format!("{}/other", server.url);
        let mut answers = vec![
            answer(&server.url, s, &json, &call).await,
            // Refusals: an Origin not allowed, a body that is not JSON, a
            // Content-Type that is not JSON, an unknown session, no session.
            answer(
                &server.url,
                s,
                &[json[0], json[1], ("origin", "http://elsewhere.example")],
                &call,
            )
            .await,
            answer(&server.url, s, &json, "{not json").await,
            answer(
                &server.url,
                s,
                &[("content-type", "text/plain"), json[1]],
                &call,
            )
            .await,
            answer(&server.url, Some("no-such-session"), &json, &call).await,
            answer(&server.url, None, &json, &call).await,
        ];
        // A notification: 202 with no body.
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        answers.push(answer(&server.url, s, &json, &note).await);
        // A path the endpoint is not: the router's (404).
        answers.push(answer(&other, s, &json, &call).await);
        seen.push(answers);
    }
    let (direct_answers, routed_answers) = (&seen[0], &seen[1]);
    assert_eq!(direct_answers[0].0, 200);
    assert!(
        direct_answers[0].2.contains("héllo"),
        "{:?}",
        direct_answers[0]
    );
    assert!(
        direct_answers[0]
            .1
            .iter()
            .any(|(k, v)| k == "content-length" && v == &direct_answers[0].2.len().to_string()),
        "a JSON answer has its length: {:?}",
        direct_answers[0].1
    );
    assert_eq!(direct_answers[direct_answers.len() - 2].0, 202);
    assert_eq!(direct_answers.last().unwrap().0, 404);
    for (i, (d, r)) in direct_answers.iter().zip(routed_answers).enumerate() {
        assert_eq!((d.0, &d.1, &d.2), (r.0, &r.1, &r.2), "request {i}");
        assert_eq!(d.3, None, "request {i}: serve has no application layer");
        assert_eq!(
            r.3.as_deref(),
            Some("seen"),
            "request {i}: serve_app's own layer sees every request"
        );
    }
    direct.shutdown().await;
    routed.shutdown().await;
}
