//! What the tests and benchmarks of every crate share, so there is one way
//! to do it: a `redis-server` of their own on a free loopback port, never
//! one they did not start and check, the runtime they drive it from, and
//! the wait for a spawned server's `listening on URL` line.
#![deny(missing_docs)]

mod cluster;
#[cfg(feature = "jwt")]
mod jwt;
#[cfg(feature = "jwt")]
pub use jwt::TestIssuer;
mod listening;
pub use listening::listening_url;
mod sdk;
pub use sdk::SdkClient;
#[cfg(feature = "tls")]
mod tls;
pub use cluster::{RedisCluster, NODE_TIMEOUT_MS};
#[cfg(feature = "tls")]
pub use tls::TestPki;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` process on 127.0.0.1, killed on drop. It keeps nothing
/// on disk unless the extra arguments say so.
pub struct RedisServer {
    child: Option<Child>,
    /// `redis://127.0.0.1:PORT/0`.
    pub url: String,
    /// Its port.
    pub port: u16,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts one and waits until it answers `PING`.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments (for example `--replicaof HOST PORT`).
    pub fn start_with(extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("a free port")
            .local_addr()
            .expect("its address")
            .port();
        let mut s = Self {
            child: None,
            url: format!("redis://127.0.0.1:{port}/0"),
            port,
            extra: extra.iter().map(|e| e.to_string()).collect(),
        };
        s.launch();
        s
    }

    /// Starts it again after [`RedisServer::stop`], on the same port with
    /// the same arguments.
    pub fn launch(&mut self) {
        let port = self.port.to_string();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test installs it)");
        self.child = Some(child);
        for _ in 0..500 {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.write_all(b"PING\r\n");
                let mut buf = [0u8; 7];
                if s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n" {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server did not start on {}", self.port);
    }

    /// `HOST PORT`, for `--replicaof`.
    pub fn host_port(&self) -> (String, String) {
        ("127.0.0.1".into(), self.port.to_string())
    }

    /// Whether it runs (not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills it (`kill -9`).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills it, losing its data, and starts it again on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Runs `redis-cli ARGS` against it; what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli (it comes with redis-server)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every command it has run so far (`INFO commandstats`, summed).
    pub fn commands_run(&self) -> u64 {
        calls(&self.cli(&["INFO", "commandstats"]))
    }

    /// The calls of each command so far, by name (`INFO commandstats`):
    /// two of these subtracted say where a load's commands went.
    pub fn commands_by_name(&self) -> std::collections::BTreeMap<String, u64> {
        calls_by_name(&self.cli(&["INFO", "commandstats"]))
    }

    /// The commands it ran in each of the next `seconds` seconds, sorted:
    /// the median is a steady cost that a rare burst (a maintenance pass)
    /// does not move.
    pub fn commands_per_second(&self, seconds: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(seconds);
        let mut last = self.commands_run();
        for _ in 0..seconds {
            std::thread::sleep(Duration::from_secs(1));
            let now = self.commands_run();
            out.push(now - last);
            last = now;
        }
        out.sort_unstable();
        out
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The runtime tests and benchmarks run on: multi-threaded, two workers (this
/// machine's cores), so tasks really run side by side.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// The calls an `INFO commandstats` reply counts, summed.
fn calls(commandstats: &str) -> u64 {
    calls_by_name(commandstats).values().sum()
}

/// The calls an `INFO commandstats` reply counts, per command
/// (`cmdstat_evalsha:calls=12,...` -> `evalsha: 12`).
fn calls_by_name(commandstats: &str) -> std::collections::BTreeMap<String, u64> {
    commandstats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}
