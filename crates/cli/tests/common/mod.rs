//! Spawning the real `mcp-resume serve` binary, killing it, restarting it.

#![allow(dead_code)]

pub mod gateway;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Serve {
    pub child: Child,
    pub url: String,
    pub addr: String,
    pub data_dir: PathBuf,
    /// `serve` or `gateway`, and what follows the data directory.
    sub: &'static str,
    rest: Vec<String>,
}

impl Serve {
    /// Starts `serve` on `listen` with a disk log in `data_dir`, and waits for its "listening" line.
    pub fn spawn(data_dir: &Path, listen: &str, extra: &[&str]) -> Self {
        Self::spawn_args(
            "serve",
            data_dir,
            listen,
            extra.iter().map(|s| s.to_string()).collect(),
        )
    }

    /// Starts `gateway` (flags `extra`) in front of `command`, as [`Serve::spawn`] does `serve`.
    pub fn gateway(data_dir: &Path, listen: &str, extra: &[&str], command: &[&str]) -> Self {
        let mut rest: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        rest.push("--".into());
        rest.extend(command.iter().map(|s| s.to_string()));
        Self::spawn_args("gateway", data_dir, listen, rest)
    }

    /// Starts `gateway --upstream URL` (flags `extra`), as [`Serve::gateway`]
    /// does with a command.
    pub fn upstream(data_dir: &Path, listen: &str, extra: &[&str], url: &str) -> Self {
        let mut rest: Vec<String> = vec!["--upstream".into(), url.into()];
        rest.extend(extra.iter().map(|s| s.to_string()));
        Self::spawn_args("gateway", data_dir, listen, rest)
    }

    fn spawn_args(sub: &'static str, data_dir: &Path, listen: &str, rest: Vec<String>) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
            .args([sub, "--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(&rest)
            .env(
                "RUST_LOG",
                std::env::var("MCPR_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn mcp-resume {sub}: {e}"));
        let url = mcp_resume_testkit::listening_url(&mut child)
            .unwrap_or_else(|e| panic!("mcp-resume {sub}: {e}"));
        let addr = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        Self {
            child,
            url,
            addr,
            data_dir: data_dir.to_owned(),
            sub,
            rest,
        }
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts again on the same address and data directory (retrying while the port frees).
    pub fn restart(&mut self) {
        for _ in 0..50 {
            let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resume"))
                .args([self.sub, "--listen", &self.addr, "--data-dir"])
                .arg(&self.data_dir)
                .args(&self.rest)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            if mcp_resume_testkit::listening_url(&mut child).is_ok() {
                self.child = child;
                return;
            }
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart {} on {}", self.sub, self.addr);
    }

    /// SIGTERM, and the exit status.
    pub fn term(&mut self) -> std::process::ExitStatus {
        Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rmcp_durable` (mcp-resume-rmcp's example), built beside this binary by
/// `cargo build --workspace --all-targets` (scripts/test); missing, it fails.
pub fn rmcp_durable() -> PathBuf {
    example("rmcp_durable")
}

/// mcp-resume-rmcp's example `name`, built beside this binary (as above).
pub fn example(name: &str) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_mcp-resume"))
        .parent()
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: cargo build -p mcp-resume-rmcp --example {name} (scripts/test builds it)",
        bin.display()
    );
    bin
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

#[allow(unused_imports)]
pub use mcp_resume_testkit::{rt, RedisServer};

/// Reads until the reader's cursor reaches `until`; returns every seq it produced.
pub async fn read_until(reader: &mut mcp_resume_client::SessionReader, until: u64) -> Vec<u64> {
    let mut seqs = Vec::new();
    while reader.cursor().unwrap_or(0) < until {
        let ev = tokio::time::timeout(Duration::from_secs(20), reader.next())
            .await
            .expect("progress")
            .expect("no error");
        seqs.push(ev.seq.unwrap());
    }
    seqs
}

/// The `seq` of every line `mcp-resume tail` printed (one JSON object a line).
pub fn tail_seqs(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

/// A POST of `body` accepting JSON and SSE, with the session id if any.
pub async fn post(url: &str, sid: Option<&str>, body: serde_json::Value) -> reqwest::Response {
    let mut rb = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(s) = sid {
        rb = rb.header("mcp-session-id", s);
    }
    rb.body(body.to_string()).send().await.unwrap()
}

/// Reads SSE until `stop` says so or the stream ends; `None` if it stays silent for `silence`.
pub async fn read(
    resp: reqwest::Response,
    silence: Duration,
    mut stop: impl FnMut(&mcp_resume_client::sse::SseEvent) -> bool,
) -> Option<Vec<mcp_resume_client::sse::SseEvent>> {
    let mut parser = mcp_resume_client::sse::SseParser::new();
    use futures_util::StreamExt;
    let mut body = resp.bytes_stream();
    let mut out = Vec::new();
    loop {
        match tokio::time::timeout(silence, body.next()).await {
            Err(_) => return None,
            Ok(None) | Ok(Some(Err(_))) => return Some(out),
            Ok(Some(Ok(chunk))) => {
                for e in parser.feed(&chunk) {
                    let done = stop(&e);
                    out.push(e);
                    if done {
                        return Some(out);
                    }
                }
            }
        }
    }
}

/// A session initialized at `url` (2025-11-25, no capabilities): its id.
pub async fn initialize(url: &str) -> String {
    let resp = post(
        url,
        None,
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "mcp-resume-tests", "version": "0"}}}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A shipped balancer configuration (deploy/FILE) with the lines that
/// name addresses replaced: each line starting with `listen_prefix` by
/// `listen_line`, and the run of lines starting with `server_prefix` by
/// `server_lines` (one per instance port).
pub fn shipped_config(
    file: &str,
    listen_prefix: &str,
    listen_line: &str,
    server_prefix: &str,
    server_lines: &[String],
) -> String {
    let shipped = std::fs::read_to_string(root().join("deploy").join(file)).unwrap();
    let mut out = String::new();
    let mut written = false;
    for line in shipped.lines() {
        let t = line.trim_start();
        if t.starts_with(listen_prefix) {
            out.push_str(listen_line);
            out.push('\n');
        } else if t.starts_with(server_prefix) {
            if !written {
                for s in server_lines {
                    out.push_str(s);
                    out.push('\n');
                }
                written = true;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}
