//! A fleet behind a real load balancer: HAProxy (deploy/haproxy.cfg, no
//! stickiness) in front of instances on one Redis, clients that talk only
//! to the balancer, and a deploy's operations while they run (`chaos
//! --fleet`). And what deploy/ ships, each checked by the tool that reads
//! it: haproxy, nginx (also run in front of real instances), systemd.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{root, rt, RedisServer, Serve};
use serde_json::{json, Value};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcp-resume")
}

/// `chaos --fleet` with `args`; its JSON report.
fn chaos_fleet(args: &[&str], extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("fleet.json");
    let out = Command::new(bin())
        .args(["chaos", "--fleet", "--report"])
        .arg(&report)
        .args(args)
        .args(extra)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chaos --fleet failed:\n{text}");
    serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap()
}

/// What a report of graceful operations alone must say: every call
/// answered, every promised notification delivered, nothing lost.
fn nothing_failed(r: &Value) {
    assert!(r["calls"]["ok"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["calls"]["loud"], json!({}), "{r}");
    assert_eq!(r["calls"]["ambiguous"], json!({}), "{r}");
    assert_eq!(r["calls"]["hung"], 0, "{r}");
    assert_eq!(
        r["notifications"]["promised"], r["notifications"]["delivered"],
        "{r}"
    );
    assert!(r["notifications"]["promised"].as_u64().unwrap() > 0, "{r}");
    for zero in ["gaps", "duplicates", "discontinuities", "sessions_lost"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    // Every stop was graceful: no instance needed a kill.
    for op in r["ops"].as_array().unwrap() {
        if op.get("exited_by_itself").is_some() {
            assert_eq!(op["exited_by_itself"], true, "{op}");
        }
    }
}

#[test]
fn serve_behind_haproxy_survives_two_rolling_restarts_and_scaling_with_nothing_failed() {
    let r = chaos_fleet(
        &["--sessions", "8", "--rolling-restarts", "2", "--scale"],
        &[],
    );
    nothing_failed(&r);
    let ops = r["ops"].as_array().unwrap();
    assert_eq!(
        ops.iter().filter(|o| o["op"] == "rolling-restart").count(),
        6,
        "{r}"
    );
    assert!(ops.iter().any(|o| o["op"] == "scale-in"), "{r}");
    // Readers moved to another instance at each stop.
    assert!(r["reader_outage_ms"]["count"].as_u64().unwrap() > 0, "{r}");
}

#[test]
fn gateways_behind_haproxy_survive_two_rolling_restarts_with_nothing_failed() {
    let python = common::gateway::python_server();
    let r = chaos_fleet(
        &["--sessions", "6", "--rolling-restarts", "2"],
        &["--", &python[0], &python[1]],
    );
    nothing_failed(&r);
}

#[test]
fn hosted_rmcp_behind_haproxy_survives_two_rolling_restarts_with_nothing_failed() {
    let hosted = common::rmcp_durable();
    let r = chaos_fleet(
        &[
            "--sessions",
            "6",
            "--rolling-restarts",
            "2",
            "--hosted",
            hosted.to_str().unwrap(),
        ],
        &[],
    );
    nothing_failed(&r);
}

/// kill -9, a freeze past the lease, a Redis restart and a Redis stall:
/// calls may fail, but loudly; nothing is lost silently, no session is
/// lost and no call hangs (chaos's own verdict, its exit code, says so).
#[test]
fn serve_behind_haproxy_through_kills_freezes_and_redis_faults_loses_nothing_silently() {
    let r = chaos_fleet(
        &[
            "--sessions",
            "6",
            "--rolling-restarts",
            "0",
            "--kills",
            "1",
            "--freezes",
            "1",
            "--freeze-secs",
            "11",
            "--redis-restarts",
            "1",
            "--redis-stalls",
            "1",
        ],
        &[],
    );
    for zero in ["gaps", "duplicates", "sessions_lost"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert_eq!(r["calls"]["hung"], 0, "{r}");
    assert_eq!(r["ops"].as_array().unwrap().len(), 4, "{r}");
    // What the killed instance had promised and took with it was reported:
    // every missing notification is in a session told `work-lost` (the
    // total can miss fewer than were reported, when a call that failed
    // loudly had its notifications delivered in another session).
    let n = &r["notifications"];
    let missing = n["promised"]
        .as_u64()
        .unwrap()
        .saturating_sub(n["delivered"].as_u64().unwrap());
    assert!(n["missing_reported"].as_u64().unwrap() >= missing, "{r}");
}

#[test]
fn the_shipped_haproxy_config_is_valid() {
    let out = Command::new("haproxy")
        .args(["-c", "-f"])
        .arg(root().join("deploy/haproxy.cfg"))
        .output()
        .expect("haproxy (Debian package haproxy; scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_shipped_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(root().join("deploy/mcp-resume.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/mcp-resume serve"));
    // Verified with the binary this test was built with in its place.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp-resume.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/mcp-resume", bin())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian package systemd)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// deploy/nginx.conf with its listen and server lines on these ports.
fn nginx_conf(listen: u16, servers: &[u16]) -> String {
    let lines: Vec<String> = servers
        .iter()
        .map(|p| format!("        server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;"))
        .collect();
    common::shipped_config(
        "nginx.conf",
        "listen ",
        &format!("        listen 127.0.0.1:{listen};"),
        "server 127.0.0.1:",
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

/// nginx as shipped, in front of two instances on one Redis: a session,
/// its SSE stream event by event (no buffering), the cursor-safe upgrade
/// passed through, and a graceful restart of an instance costing no call.
#[test]
fn nginx_as_shipped_streams_unbuffered_passes_the_upgrade_and_survives_a_restart() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = ["--store", redis.url.as_str(), "--drain-accept-secs", "1"];
    let a = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    let mut b = Serve::spawn(dir.path(), "127.0.0.1:0", &store);
    let port = |s: &Serve| s.addr.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let listen = free_port();
    let prefix = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(prefix.path().join("logs")).unwrap();
    let conf = prefix.path().join("nginx.conf");
    std::fs::write(&conf, nginx_conf(listen, &[port(&a), port(&b)])).unwrap();
    let globals = format!(
        "daemon off; pid {}/nginx.pid; error_log {}/error.log;",
        prefix.path().display(),
        prefix.path().display()
    );
    let check = Command::new("nginx")
        .arg("-t")
        .arg("-p")
        .arg(prefix.path())
        .arg("-c")
        .arg(&conf)
        .args(["-g", &globals])
        .output()
        .expect("nginx (Debian package nginx; scripts/test installs it)");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let mut nginx = Command::new("nginx")
        .arg("-p")
        .arg(prefix.path())
        .arg("-c")
        .arg(&conf)
        .args(["-g", &globals])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{listen}/mcp");
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", listen)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rt().block_on(async {
        let sid = common::initialize(&url).await;
        // The stream, opened first, gets each event as it is committed.
        let stream = reqwest::Client::new()
            .get(&url)
            .header("mcp-session-id", &sid)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        let emit = common::post(
            &url,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "emit", "arguments": {"count": 3, "interval_ms": 300}}}),
        )
        .await;
        assert_eq!(emit.status(), 200);
        let started = std::time::Instant::now();
        let first = common::read(stream, Duration::from_secs(5), |e| {
            e.data.contains("notifications/message")
        })
        .await
        .expect("an event through nginx");
        assert!(first.iter().any(|e| e.data.contains("\"i\":1")));
        assert!(
            started.elapsed() < Duration::from_millis(250),
            "the first event waited for the others: nginx buffered the stream ({:?})",
            started.elapsed()
        );
        // The upgrade passes through, with the committed cursor.
        let ws_url = format!("ws://127.0.0.1:{listen}/mcp/session/{sid}/events");
        let mut req =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
                ws_url.as_str(),
            )
            .unwrap();
        req.headers_mut()
            .insert("sec-websocket-protocol", "mcp.resume.v1".parse().unwrap());
        let (_ws, resp) = tokio_tungstenite::connect_async(req)
            .await
            .expect("the upgrade through nginx");
        assert!(resp.headers().contains_key("x-mcp-resume-cursor"));
        // A graceful restart of one instance while calls go on: none fails.
        let calls = {
            let (url, sid) = (url.clone(), sid.clone());
            tokio::spawn(async move {
                let mut failed = Vec::new();
                for id in 10..50 {
                    let r = common::post(
                        &url,
                        Some(&sid),
                        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                            "params": {"name": "echo", "arguments": {"text": "x"}}}),
                    )
                    .await;
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    if status != 200 || !body.contains("\"result\"") {
                        failed.push(format!("{status} {body}"));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                failed
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(tokio::task::spawn_blocking(move || {
            let s = b.term();
            b.restart();
            (s, b)
        })
        .await
        .unwrap()
        .0
        .success());
        let failed = calls.await.unwrap();
        assert!(
            failed.is_empty(),
            "calls failed across the restart: {failed:?}"
        );
    });
    let _ = nginx.kill();
    let _ = nginx.wait();
    drop(a);
}

/// `mcp-resume fleet` starts the topology and prints its one URL; a session
/// works through it; SIGTERM stops it all.
#[test]
fn the_fleet_command_starts_a_balanced_fleet_and_stops_it() {
    let mut fleet = Command::new(bin())
        .args(["fleet", "--listen", "127.0.0.1:0", "--instances", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(fleet.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{first}"))
        .to_owned();
    let instances: Vec<String> = (0..2).map(|_| lines.next().unwrap().unwrap()).collect();
    assert!(instances.iter().all(|l| l.starts_with("instance http://")));
    rt().block_on(async {
        let sid = common::initialize(&url).await;
        // Round robin: calls land on both instances, one session.
        for id in 1..5 {
            let r = common::post(
                &url,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "hi"}}}),
            )
            .await;
            assert!(r.text().await.unwrap().contains("hi"));
        }
    });
    Command::new("kill")
        .arg("-TERM")
        .arg(fleet.id().to_string())
        .status()
        .unwrap();
    for _ in 0..300 {
        if fleet.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = fleet.try_wait().unwrap().expect("the fleet stopped");
    assert!(status.success());
    assert!(
        std::net::TcpStream::connect(url.trim_start_matches("http://").split('/').next().unwrap())
            .is_err(),
        "the balancer still listens"
    );
}

/// Gateways through a kill -9 and a freeze past the lease: a call whose
/// owner died or lost the lease ends loudly (`server-restarted`,
/// `lease-lost`), never hangs; nothing is lost silently.
#[test]
fn gateways_behind_haproxy_through_a_kill_and_a_freeze_lose_nothing_silently() {
    let python = common::gateway::python_server();
    let r = chaos_fleet(
        &[
            "--sessions",
            "6",
            "--rolling-restarts",
            "0",
            "--kills",
            "1",
            "--freezes",
            "1",
            "--freeze-secs",
            "11",
        ],
        &["--", &python[0], &python[1]],
    );
    for zero in ["gaps", "duplicates", "sessions_lost"] {
        assert_eq!(r[zero], 0, "{zero}: {r}");
    }
    assert_eq!(r["calls"]["hung"], 0, "{r}");
    for reason in r["calls"]["loud"].as_object().unwrap().keys() {
        assert!(
            ["lease-lost", "server-restarted", "503"].contains(&reason.as_str()),
            "a failed call without a reason a client can act on: {reason} in {r}"
        );
    }
}
