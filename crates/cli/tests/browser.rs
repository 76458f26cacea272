//! A real headless browser (Chromium) as the user: a page of another origin
//! initializes a session, reads the session stream over SSE, upgrades it to a
//! WebSocket (cursor frame, replay, ack, live), and resumes over SSE. This is
//! what `--allow-origin` and CORS are for; the test reads the page's report.
//! The page speaks through the TypeScript package `mcp-resume-client`
//! (clients/typescript, its browser bundle), so this is also that package's
//! test in a browser: the cursor frame, `LocalStorageCursorStore`, CORS.
//!
//! Needs `chromium` (Debian's package; `scripts/test` installs it) and the
//! package's bundle (`npm ci` in clients/typescript builds it; `scripts/test`
//! does). Without either the test fails and says so: it never skips.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use axum::routing::{get, post};
use common::{rt, Serve};
use serde_json::Value;

fn chromium() -> String {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            return name.to_owned();
        }
    }
    panic!("no Chromium on PATH: install Debian's `chromium` (./scripts/test does)");
}

/// The browser bundle of clients/typescript (`npm run build` writes it).
fn client_bundle() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../clients/typescript/dist/browser/mcp-resume-client.js"
    );
    std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!("{path}: {e}: build it with `npm ci` in clients/typescript (./scripts/test does)")
    })
}

#[test]
fn a_page_of_another_origin_initializes_reads_upgrades_and_resumes() {
    let browser = chromium();
    let bundle = client_bundle();
    rt().block_on(async {
        // The page's own server, on another port (so another origin), named app.test.
        let page_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let page_port = page_listener.local_addr().unwrap().port();
        let origin = format!("http://app.test:{page_port}");
        let dir = tempfile::tempdir().unwrap();
        let serve = Serve::spawn(
            dir.path(),
            "127.0.0.1:0",
            &["--store", "memory", "--allow-origin", &origin],
        );
        let server_origin = serve.url.trim_end_matches("/mcp").to_owned();
        let page = include_str!("browser_page.html").replace("__SERVER__", &server_origin);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(1);
        let app = axum::Router::new()
            .route("/", get(move || async move { axum::response::Html(page) }))
            .route(
                "/mcp-resume-client.js",
                get(move || async move {
                    ([("content-type", "text/javascript; charset=utf-8")], bundle)
                }),
            )
            .route(
                "/result",
                post(move |body: String| async move {
                    let _ = tx.send(body).await;
                }),
            );
        tokio::spawn(async move { axum::serve(page_listener, app).await });

        let profile = tempfile::tempdir().unwrap();
        let mut chrome = Command::new(&browser)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--host-resolver-rules=MAP app.test 127.0.0.1",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("{origin}/"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let report = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
        let _ = chrome.kill();
        let _ = chrome.wait();
        let report = report.expect("the page reported within 60 s").unwrap();
        let v: Value = serde_json::from_str(&report).unwrap();
        assert!(v.get("error").is_none(), "the page failed: {v}");
        let seqs = |v: &Value| -> Vec<u64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        };
        assert_eq!(seqs(&v["first"]), vec![1, 2, 3, 4, 5], "{v}");
        // The package upgrades only to `mcp.resume.v1` with a cursor frame, else it falls back.
        assert_eq!(v["ws"]["transport"], "websocket", "{v}");
        assert_eq!(v["ws"]["upgrades"], 1, "{v}");
        assert_eq!(v["ws"]["fallbacks"], 0, "{v}");
        let cursor = v["ws"]["cursor"].as_u64().unwrap();
        let ws = seqs(&v["ws"]["events"]);
        let want: Vec<u64> = (6..6 + ws.len() as u64).collect();
        assert_eq!(
            ws, want,
            "the upgrade replays 6..=C then goes live, contiguous: {v}"
        );
        assert!(cursor >= 5 && *ws.last().unwrap() >= cursor + 2, "{v}");
        assert_eq!(v["stored"], 10, "localStorage holds the cursor: {v}");
        assert_eq!(seqs(&v["resumed"]), vec![9, 10], "{v}");
    });
}
