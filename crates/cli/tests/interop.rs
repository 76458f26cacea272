//! The official TypeScript and Python MCP SDK clients against `mcp-resume serve`
//! on the disk log: initialise, list tools, call `echo`, receive `emit`'s
//! notifications on the GET stream, and after `kill -9` and a restart on the
//! same data directory, resume with `Last-Event-ID` and receive every
//! remaining event, none twice.
//!
//! The SDKs are installed by `scripts/test` (pinned in `interop/`).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{root, Serve};

struct SdkClient {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl SdkClient {
    fn spawn(program: &str, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {program}: {e}; run scripts/test to install the SDK clients")
            });
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line satisfying `pred`; returns it.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "the SDK client exited waiting for {what}; saw {:?}",
                    self.seen
                ),
            }
        }
        panic!("timed out waiting for {what}; saw {:?}", self.seen);
    }

    fn send(&mut self, cmd: &str) {
        writeln!(self.child.stdin.as_mut().unwrap(), "{cmd}").unwrap();
    }

    /// `i` of every `EVENT count i` seen so far for this `count`.
    fn events(&self, count: u64) -> Vec<u64> {
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix("EVENT "))
            .filter_map(|rest| rest.split_once(' '))
            .filter(|(c, _)| c.parse::<u64>().ok() == Some(count))
            .map(|(_, i)| i.parse().unwrap())
            .collect()
    }
}

impl Drop for SdkClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many of `emit count`'s events the session stream holds, read back over SSE.
fn committed(url: &str, session: &str, count: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let resp = reqwest::Client::new()
            .get(url)
            .header("mcp-session-id", session)
            .header("accept", "text/event-stream")
            .header("last-event-id", "0")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut resp = resp;
        let mut text = String::new();
        while let Ok(Ok(Some(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), resp.chunk()).await
        {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
            .filter(|v| v["params"]["data"]["count"].as_u64() == Some(count))
            .count() as u64
    })
}

fn scenario(program: &str, script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::spawn(dir.path(), "127.0.0.1:0", &[]);
    let mut client = SdkClient::spawn(program, &[script.to_owned(), serve.url.clone()]);
    let session = client
        .wait_for("SESSION", |l| l.starts_with("SESSION "))
        .trim_start_matches("SESSION ")
        .to_owned();
    let tools = client.wait_for("TOOLS", |l| l.starts_with("TOOLS "));
    for t in [
        "echo",
        "emit",
        "register_tool",
        "unregister_tool",
        "progress",
    ] {
        assert!(tools.contains(t), "{tools}");
    }
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO ")),
        "ECHO hello"
    );
    // Notifications on the GET stream, then a kill -9 in the middle of them.
    client.send("emit 60 20");
    client.wait_for("EMITTED", |l| l == "EMITTED");
    client.wait_for("some events", |l| l == "EVENT 60 10");
    std::thread::sleep(Duration::from_millis(30));
    serve.kill9();
    serve.restart();
    // After the restart the client resumes on its own; new events reach it too.
    client.send("emit 5 0");
    client.wait_for("EMITTED after restart", |l| l == "EMITTED");
    client.wait_for("the post-restart events", |l| l == "EVENT 5 5");
    let m = committed(&serve.url, &session, 60);
    assert!(m >= 10, "at least what the client saw was committed");
    // Wait for the resumed replay to deliver all of the first emit.
    let last = format!("EVENT 60 {m}");
    if !client.seen.contains(&last) {
        client.wait_for("the rest of the first emit", |l| l == last);
    }
    std::thread::sleep(Duration::from_millis(300));
    while let Ok(l) = client.lines.try_recv() {
        client.seen.push(l);
    }
    assert_eq!(
        client.events(60),
        (1..=m).collect::<Vec<_>>(),
        "every committed event once, in order"
    );
    assert_eq!(client.events(5), (1..=5).collect::<Vec<_>>());
    client.send("quit");
    let status = serve.term();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
}

#[test]
fn typescript_sdk_client() {
    let root = root();
    scenario(
        "node",
        root.join("interop/node/client.mjs").to_str().unwrap(),
    );
}

#[test]
fn python_sdk_client() {
    let root = root();
    let python = root.join("interop/python/.venv/bin/python");
    scenario(
        python.to_str().unwrap(),
        root.join("interop/python/client.py").to_str().unwrap(),
    );
}
