//! The operational edges a user meets first: a method the endpoint does not
//! serve, the metrics a Prometheus user scrapes from start-up, and the
//! readiness probe (docs/protocol.md 10).

mod common;

use common::TestServer;
use mcp_resume_server::ServerConfig;
use serde_json::Value;

/// A method the endpoint does not serve: 405 with `Allow` and the JSON error
/// body every other refusal has (not axum's empty one).
#[tokio::test]
async fn an_unserved_method_is_405_with_allow_and_a_json_body() {
    let s = TestServer::start(ServerConfig::default()).await;
    let c = reqwest::Client::new();
    for (url, allow) in [
        (s.url.clone(), "GET, POST, DELETE"),
        (s.events_url("x"), "GET"),
    ] {
        let r = c.put(&url).body("{}").send().await.unwrap();
        assert_eq!(r.status(), 405, "{url}");
        assert_eq!(r.headers()["allow"], allow, "{url}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "method-not-allowed", "{v}");
    }
}

/// `/metrics` lists every reader and upgrade series at 0 from start-up, so
/// a Prometheus user's queries see them before the first reader.
#[tokio::test]
async fn metric_families_are_present_at_zero_from_start_up() {
    let s = TestServer::start(ServerConfig::default()).await;
    let text = reqwest::get(s.url.replace("/mcp", "/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"mcp_resume_readers{transport="sse"} 0"#,
        r#"mcp_resume_readers{transport="websocket"} 0"#,
        r#"mcp_resume_upgrades_total{outcome="upgraded"} 0"#,
        r#"mcp_resume_upgrades_total{outcome="refused"} 0"#,
        r#"mcp_resume_upgrades_total{outcome="legacy"} 0"#,
        "mcp_resume_log_damaged_streams 0",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
}

/// `/readyz` says the log is unavailable without repeating the log's error
/// text (an address, a credential) to whoever probes.
#[tokio::test]
async fn readyz_names_no_error_text() {
    let faults = std::sync::Arc::new(common::faulty::Faults::default());
    let log = std::sync::Arc::new(common::faulty::FaultyLog {
        inner: std::sync::Arc::new(mcp_resume_log::MemoryLog::default()),
        faults: faults.clone(),
    });
    let s = TestServer::start_with(log, ServerConfig::default()).await;
    let ready = s.url.replace("/mcp", "/readyz");
    assert_eq!(reqwest::get(&ready).await.unwrap().status(), 200);
    faults
        .lookups_unavailable
        .store(true, std::sync::atomic::Ordering::Release);
    let r = reqwest::get(&ready).await.unwrap();
    assert_eq!(r.status(), 503);
    let body = r.text().await.unwrap();
    assert_eq!(body, "log unavailable\n");
}
