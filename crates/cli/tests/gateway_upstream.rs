//! `mcp-resume gateway --upstream URL`: the official reference server
//! (`server-everything`, npm) over Streamable HTTP behind the gateway, with
//! the official TypeScript SDK client; its own GET stream relayed; and the
//! upstream going away mid-call.

mod common;

use std::time::Duration;

use common::gateway::{call, everything, init_as, sdk_client_uses_everything};
use common::{post, read, rt, Serve};
use serde_json::{json, Value};

/// server-everything in its Streamable HTTP mode on a free port of
/// 127.0.0.1, under `timeout` so that it stops by itself; ended (SIGTERM,
/// which `timeout` passes on) by [`Upstream::stop`] or when dropped.
struct Upstream {
    child: std::process::Child,
    url: String,
}

impl Upstream {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = std::process::Command::new("timeout")
            .arg("600")
            .arg(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn server-everything");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("listening on port") {
                    let _ = tx.send(());
                }
                eprintln!("server-everything: {line}");
            }
        });
        let mut up = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            up.stop();
            panic!("server-everything (streamableHttp) did not start on port {port}");
        }
        up
    }

    /// Ends the upstream server and waits for it (bounded).
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn server_everything_over_streamable_http_behind_gateway_upstream_with_the_typescript_sdk_client() {
    let upstream = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(dir.path(), "127.0.0.1:0", &[], &upstream.url);
    sdk_client_uses_everything("node", "interop/node/gateway.mjs", &gw.url);
}

#[test]
fn gateway_upstream_relays_the_upstreams_own_stream_and_ends_calls_loudly_when_it_goes_away() {
    let mut upstream = Upstream::start();
    let dir = tempfile::tempdir().unwrap();
    let gw = Serve::upstream(dir.path(), "127.0.0.1:0", &[], &upstream.url);
    rt().block_on(async {
        let sid = init_as(&gw.url, "mcp-servers/everything").await;
        // A server-initiated message (a log line, sent on the upstream's GET
        // stream) reaches the session stream.
        let session_stream = reqwest::Client::new()
            .get(&gw.url)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &sid)
            .send()
            .await
            .unwrap();
        assert_eq!(session_stream.status(), 200);
        let got = call(&gw.url, &sid, 1, "toggle-simulated-logging", json!({})).await;
        assert!(got.last().unwrap()["result"].is_object(), "{got:?}");
        // (Bounded as a whole: keepalive comments keep a silent stream busy.)
        let logged = tokio::time::timeout(
            Duration::from_secs(20),
            read(session_stream, Duration::from_secs(15), |e| {
                e.data.contains("notifications/message")
            }),
        )
        .await
        .ok()
        .flatten()
        .expect("the upstream's log message reaches the session stream");
        assert!(logged.last().unwrap().data.contains("notifications/message"));

        // A long call whose progress opened its request stream.
        let slow = post(&gw.url, Some(&sid), json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "trigger-long-running-operation", "arguments": {"duration": 60, "steps": 60},
            "_meta": {"progressToken": "p2"}}}))
        .await;
        assert_eq!(slow.status(), 200);
        assert_eq!(slow.headers()["content-type"], "text/event-stream");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let mut tx = Some(tx);
        let reader = tokio::spawn(read(slow, Duration::from_secs(40), move |e| {
            if e.data.contains("notifications/progress") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
            e.data.contains("\"id\":2")
        }));
        tokio::time::timeout(Duration::from_secs(15), rx)
            .await
            .expect("progress of the long call")
            .unwrap();

        // The upstream goes away mid-call: the call ends with an error.
        let started = std::time::Instant::now();
        upstream.stop();
        let events = tokio::time::timeout(Duration::from_secs(40), reader)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .expect("the in-flight call ends instead of waiting forever");
        let last: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
        assert_eq!(last["id"], 2, "{last}");
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(last["error"]["data"]["reason"], "upstream-lost", "{last}");
        assert!(started.elapsed() < Duration::from_secs(30));

        // A new call gets an error at once.
        let got = tokio::time::timeout(
            Duration::from_secs(20),
            call(&gw.url, &sid, 3, "echo", json!({"message": "anyone?"})),
        )
        .await
        .expect("a call to a gone upstream is answered");
        let last = got.last().unwrap();
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(
            last["error"]["data"]["reason"], "upstream-unreachable",
            "{last}"
        );
        assert!(
            last["error"]["message"].as_str().unwrap().contains("cannot reach"),
            "{last}"
        );
    });
}
