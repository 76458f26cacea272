//! The official TypeScript and Python SDK clients, unchanged, through
//! HAProxy (deploy/haproxy.cfg) in front of three `serve` instances on one
//! Redis, while every instance is restarted gracefully, one after the other:
//! each client's calls are answered, and the notifications an `emit` it
//! called promised reach it exactly once and in order, however many times
//! its stream moved between instances.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{root, RedisServer, Serve};
use mcp_resume_testkit::SdkClient;

/// deploy/haproxy.cfg with its bind and server lines on these ports.
fn haproxy_conf(listen: u16, servers: &[u16]) -> String {
    let lines: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("    server mcp{} 127.0.0.1:{p}", i + 1))
        .collect();
    common::shipped_config(
        "haproxy.cfg",
        "bind ",
        &format!("    bind 127.0.0.1:{listen}"),
        "server ",
        &lines,
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// HAProxy on `listen` in front of `servers`, killed on drop.
struct Haproxy {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    fn start(listen: u16, servers: &[u16]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, haproxy_conf(listen, servers)).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy (Debian package haproxy; scripts/test installs it)");
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        // Two health checks (300 ms apart) before a server takes traffic.
        std::thread::sleep(Duration::from_millis(900));
        Self { child, _dir: dir }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Three instances on fixed ports, one Redis, the balancer in front.
fn fleet() -> (RedisServer, tempfile::TempDir, Vec<Serve>, Haproxy, String) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut instances = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        instances.push(Serve::spawn(
            dir.path(),
            &format!("127.0.0.1:{port}"),
            &["--store", &redis.url, "--drain-accept-secs", "1"],
        ));
    }
    let ports: Vec<u16> = instances
        .iter()
        .map(|s| s.addr.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    let listen = free_port();
    let lb = Haproxy::start(listen, &ports);
    let url = format!("http://127.0.0.1:{listen}/mcp");
    (redis, dir, instances, lb, url)
}

/// One SDK client's tour through the balancer during a rolling restart
/// (`extra`: arguments after the URL).
fn tour(program: &str, script: &str) {
    tour_with(program, script, &[]);
}

fn tour_with(program: &str, script: &str, extra: &[&str]) {
    let (_redis, _dir, mut instances, _lb, url) = fleet();
    let mut args = vec![script.to_owned(), url];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut client = SdkClient::spawn(program, &args);
    client.wait_for("SESSION", |l| l.starts_with("SESSION "));
    assert_eq!(
        client.wait_for("ECHO", |l| l.starts_with("ECHO ")),
        "ECHO hello"
    );
    // 80 notifications, 50 ms apart (4 s, longer than the three restarts
    // take unless one waits for it), promised by the answer...
    client.send("emit 80 50");
    client.wait_for("EMITTED", |l| l == "EMITTED");
    // ...while every instance is stopped gracefully and started again.
    for s in &mut instances {
        assert!(s.term().success(), "a graceful stop exits 0");
        s.restart();
        std::thread::sleep(Duration::from_millis(900));
    }
    client.send("emit 5 0");
    client.wait_for("EMITTED after the restarts", |l| l == "EMITTED");
    for last in ["EVENT 80 80", "EVENT 5 5"] {
        if !client.seen.iter().any(|l| l == last) {
            client.wait_for(last, |l| l == last);
        }
    }
    client.drain_for(Duration::from_millis(300));
    assert_eq!(
        client.events(80),
        (1..=80).collect::<Vec<_>>(),
        "every promised notification once, in order"
    );
    assert_eq!(client.events(5), (1..=5).collect::<Vec<_>>());
    assert!(
        !client.seen.iter().any(|l| l.starts_with("ERROR")),
        "{:?}",
        client.seen
    );
    client.send("quit");
}

#[test]
fn the_typescript_sdk_client_through_haproxy_across_a_rolling_restart() {
    tour(
        "node",
        root().join("interop/node/client.mjs").to_str().unwrap(),
    );
}

#[test]
fn the_python_sdk_client_through_haproxy_across_a_rolling_restart() {
    let python = root().join("interop/python/.venv/bin/python");
    tour(
        python.to_str().unwrap(),
        root().join("interop/python/client.py").to_str().unwrap(),
    );
}

/// mcp-resume-client (clients/typescript, built by scripts/test) under the
/// TypeScript SDK 1.x, over the cursor-safe WebSocket upgrade and over SSE,
/// through the balancer across a rolling restart.
#[test]
fn mcp_resume_client_through_haproxy_across_a_rolling_restart() {
    let script = root().join("interop/node/resumable.mjs");
    assert!(
        root().join("clients/typescript/dist/index.js").exists(),
        "clients/typescript is not built: scripts/test builds it (npm ci && npm run build)"
    );
    for mode in ["ws", "sse"] {
        tour_with("node", script.to_str().unwrap(), &[mode]);
    }
}

/// The Rust client (`mcp-resume tail`, over the cursor-safe WebSocket and
/// over SSE) through the balancer while every instance restarts: every
/// event of an `emit` once, in order.
#[test]
fn the_rust_client_through_haproxy_across_a_rolling_restart() {
    let (_redis, _dir, mut instances, _lb, url) = fleet();
    let bin = env!("CARGO_BIN_EXE_mcp-resume");
    let sid = common::rt().block_on(common::initialize(&url));
    let tail = |ws: bool| {
        let mut c = Command::new(bin);
        c.args([
            "tail",
            &url,
            "--session",
            &sid,
            "--from",
            "0",
            "--max-events",
            "80",
        ]);
        if ws {
            c.arg("--ws");
        }
        c.stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (over_ws, over_sse) = (tail(true), tail(false));
    let emit = Command::new(bin)
        .args([
            "call",
            &url,
            "emit",
            r#"{"count":80,"interval_ms":50}"#,
            "--session",
            &sid,
        ])
        .output()
        .unwrap();
    assert!(
        emit.status.success(),
        "{}",
        String::from_utf8_lossy(&emit.stderr)
    );
    for s in &mut instances {
        assert!(s.term().success());
        s.restart();
        std::thread::sleep(Duration::from_millis(900));
    }
    for (name, mut child) in [("ws", over_ws), ("sse", over_sse)] {
        // Bounded: a tail that never gets its 80 events fails, not hangs.
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > until {
                let _ = child.kill();
                panic!("tail over {name} did not get its 80 events in 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "tail over {name} failed");
        let seqs = common::tail_seqs(&out.stdout);
        assert_eq!(seqs, (1..=80).collect::<Vec<u64>>(), "tail over {name}");
    }
}
