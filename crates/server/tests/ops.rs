//! The operational edges a user meets first: a method the endpoint does not
//! serve, the metrics a Prometheus user scrapes from start-up, and the
//! readiness probe (docs/protocol.md 10).

mod common;

use std::time::Duration;

use common::{read_sse, TestServer};
use mcp_resume_server::ServerConfig;
use serde_json::{json, Value};

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

/// What a Prometheus user scrapes after a session's events, a reader of
/// each transport and a refusal, and the liveness and readiness probes.
#[tokio::test]
async fn metrics_healthz_and_readyz() {
    let s = TestServer::start(ServerConfig::default()).await;
    let base = format!("http://{}", s.addr);
    let sid = s.init().await;
    s.emit_and_wait(&sid, 5).await;
    let reader = s.session_stream(&sid, None).send().await.unwrap();
    let _ = read_sse(reader, 5, 1000).await;
    let (_ws, _) = common::ws_upgrade(&s.ws_url(&sid), Some(5)).await;
    let _ = s
        .post(
            Some(&"0".repeat(64)),
            json!({"jsonrpc":"2.0","id":1,"method":"ping"}),
        )
        .await;
    // The socket's task starts just after the 101.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for want in [
        "mcp_resume_sessions_live 1",
        "mcp_resume_events_committed_total 5",
        "mcp_resume_commit_duration_seconds_bucket",
        "mcp_resume_upgrades_total{outcome=\"upgraded\"} 1",
        "mcp_resume_refusals_total{status=\"404\"} 1",
        "mcp_resume_readers{transport=\"websocket\"} 1",
    ] {
        assert!(text.contains(want), "{want} missing from:\n{text}");
    }
    for probe in ["healthz", "readyz"] {
        let status = reqwest::get(format!("{base}/{probe}"))
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{probe}");
    }
}
