//! Damaged storage is loud, as a new user would meet it (docs/protocol.md
//! 6.1): `serve` on the disk log, four sessions of 300 events all read,
//! `kill -9`, the journal cut at 80 % of what was written, restart. Nothing
//! is renumbered: every event served is the one read before, the lost ones
//! are refused with 409 `data-lost`, the next event continues after the old
//! head, the metric and `log check` name the damage, and `--repair` leaves a
//! directory that serves.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{post, rt, Serve};
use serde_json::{json, Value};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn log_check(dir: &Path, repair: bool) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcp-resume"));
    cmd.args(["log", "check"]).arg(dir);
    if repair {
        cmd.arg("--repair");
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "log check{}:\n{text}",
        if repair { " --repair" } else { "" }
    );
    (out.status.code().unwrap_or(-1), text)
}

async fn get(url: &str, sid: &str, cursor: u64) -> reqwest::Response {
    reqwest::Client::new()
        .get(url)
        .header("mcp-session-id", sid)
        .header("accept", "text/event-stream")
        .header("last-event-id", cursor.to_string())
        .send()
        .await
        .unwrap()
}

/// The `(seq, data)` of the events of a stream read from `cursor` until it
/// is quiet or ends.
async fn events(url: &str, sid: &str, cursor: u64) -> Vec<(u64, String)> {
    use futures_util::StreamExt;
    let r = get(url, sid, cursor).await;
    assert_eq!(r.status(), 200, "a resume from {cursor}");
    let mut parser = mcp_resume_client::sse::SseParser::new();
    let mut body = r.bytes_stream();
    let mut out = Vec::new();
    // Until a second of silence (a live stream stays open) or its end.
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(1), body.next()).await
    {
        for e in parser.feed(&chunk) {
            if !e.data.is_empty() {
                out.push((e.id.unwrap().parse().unwrap(), e.data));
            }
        }
    }
    out
}

#[test]
fn a_cut_journal_is_served_loudly_never_renumbered() {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let url = serve.url.clone();
    let rt = rt();
    let mut sessions: Vec<(String, Vec<(u64, String)>)> = Vec::new();
    rt.block_on(async {
        for _ in 0..4 {
            let r = post(&url, None, json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).await;
            sessions.push((r.headers()["mcp-session-id"].to_str().unwrap().to_owned(), Vec::new()));
        }
        for (sid, seen) in &mut sessions {
            let r = post(&url, Some(sid), json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"emit","arguments":{"count":300}}})).await;
            assert!(r.status().is_success());
            let _ = r.text().await;
            for _ in 0..50 {
                *seen = events(&url, sid, 0).await;
                if seen.len() == 300 {
                    break;
                }
            }
            assert_eq!(seen.len(), 300, "all 300 events read");
        }
    });
    serve.kill9();
    let log_dir = dir.path().join("log");
    let journal = files(&log_dir)
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "jnl"))
        .expect("a journal");
    let bytes = std::fs::read(&journal).unwrap();
    let used = bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(used as u64 * 8 / 10)
        .unwrap();

    let (code, text) = log_check(&log_dir, false);
    assert_eq!(code, 1, "a cut journal is damage");
    assert!(text.contains("damaged: session"), "{text}");

    serve.restart();
    rt.block_on(async {
        let metrics = reqwest::get(url.replace("/mcp", "/metrics")).await.unwrap().text().await.unwrap();
        let damaged: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("mcp_resume_log_damaged_streams "))
            .expect("the metric is exported")
            .trim()
            .parse()
            .unwrap();
        assert!(damaged >= 1, "{metrics}");
        let mut refused = 0;
        for (sid, seen) in &sessions {
            // Every event still served is the one read before the damage
            // (none when the first one is lost: the resume from 0 is refused).
            let first = get(&url, sid, 0).await.status();
            let now = if first == 409 { Vec::new() } else { events(&url, sid, 0).await };
            assert!(now.len() <= 300);
            for (k, e) in now.iter().enumerate() {
                assert_eq!(e, &seen[k], "served identical, in order, from 1");
            }
            let mut resume_from = 300;
            if now.len() < 300 {
                // The next one is lost: refused loudly with the range, never skipped.
                let r = get(&url, sid, now.len() as u64).await;
                assert_eq!(r.status(), 409);
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["reason"], "data-lost", "{body}");
                assert_eq!(body["lost-from"], now.len() as u64 + 1, "{body}");
                assert_eq!(body["lost-to"], 300, "{body}");
                assert_eq!(body["head"], 300, "the head did not go back: {body}");
                resume_from = body["resume-cursor"].as_u64().unwrap();
                refused += 1;
            }
            // The next event is 301: no seq is handed out twice.
            let r = post(&url, Some(sid), json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"emit","arguments":{"count":1}}})).await;
            assert!(r.status().is_success());
            let _ = r.text().await;
            let mut after = Vec::new();
            for _ in 0..50 {
                after = events(&url, sid, resume_from).await;
                if !after.is_empty() {
                    break;
                }
            }
            assert_eq!(after.iter().map(|e| e.0).collect::<Vec<_>>(), [301]);
        }
        assert!(refused >= 1, "the cut lost no event?");
    });
    assert!(serve.term().success());

    let (code, text) = log_check(&log_dir, true);
    assert_eq!(code, 0, "repaired: servable");
    assert!(text.contains("servable"), "{text}");
    serve.restart();
}
