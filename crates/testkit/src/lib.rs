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
mod monitor;
pub use monitor::{count_sent, Monitor};
mod sdk;
pub use sdk::SdkClient;
#[cfg(feature = "tls")]
mod tls;
pub use cluster::{RedisCluster, NODE_TIMEOUT_MS};
#[cfg(feature = "tls")]
pub use tls::TestPki;

use std::io::{Read, Write};
use std::process::{Child, Command};
use std::time::Duration;

/// How many times a server is started before a test gives up on it.
const START_ATTEMPTS: usize = 5;
/// How long one start may take to answer `PING` (a loaded 2-core CI
/// machine runs a dozen servers at once).
const START_WAIT: Duration = Duration::from_secs(10);

/// A loopback port nothing listens on now; with `bus`, PORT + 10000 too.
fn free_port(bus: bool) -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = l.local_addr().expect("its address").port();
        if !bus {
            return port;
        }
        if port <= u16::MAX - 10_000
            && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            return port;
        }
    }
}

/// The `process_id` of the redis-server answering on `s` (`INFO server`),
/// once it has loaded its data; `None` while it does not answer.
fn server_pid(s: &mut std::net::TcpStream) -> Option<u32> {
    // PING first: a server still loading its data answers it with an error.
    s.write_all(b"PING\r\n").ok()?;
    let mut pong = [0u8; 7];
    s.read_exact(&mut pong).ok()?;
    if &pong != b"+PONG\r\n" {
        return None;
    }
    s.write_all(b"INFO server\r\n").ok()?;
    let mut reader = std::io::BufReader::new(s);
    let mut header = String::new();
    std::io::BufRead::read_line(&mut reader, &mut header).ok()?;
    let len: usize = header.strip_prefix('$')?.trim().parse().ok()?;
    let mut body = vec![0u8; len + 2];
    reader.read_exact(&mut body).ok()?;
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
}

/// The last lines a server printed, for a failure's message.
fn tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

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
    ///
    /// A free port can be taken by another process between the check and
    /// `redis-server`'s bind (every test of the suite picks ports the same
    /// way, and outgoing connections draw from the same range), so a server
    /// that exits or stays silent is retried on a new port, a few times,
    /// before the test fails with what the last one printed.
    pub fn start_with(extra: &[&str]) -> Self {
        // A cluster node also listens on PORT + 10000 (its cluster bus).
        let bus = extra.contains(&"--cluster-enabled");
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let mut s = Self {
                child: None,
                url: String::new(),
                port: free_port(bus),
                extra: extra.iter().map(|e| e.to_string()).collect(),
            };
            s.url = format!("redis://127.0.0.1:{}/0", s.port);
            match s.try_launch() {
                Ok(()) => return s,
                Err(e) => last = e,
            }
        }
        panic!("redis-server did not start on {START_ATTEMPTS} ports; the last: {last}");
    }

    /// Starts it again after [`RedisServer::stop`], on the same port with
    /// the same arguments (retried: the port may not be free at once).
    pub fn launch(&mut self) {
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match self.try_launch() {
                Ok(()) => return,
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("redis-server did not start again: {last}");
    }

    /// One start: `Ok` once it answers `PING`; the reason otherwise (it
    /// exited, or stayed silent for [`START_WAIT`]), the process killed.
    fn try_launch(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let log = self.log_path();
        let out = std::fs::File::create(&log).expect("a redis-server log file");
        let mut child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(&self.extra)
            .stdout(out)
            .spawn()
            .expect("redis-server (scripts/test installs it)");
        let deadline = std::time::Instant::now() + START_WAIT;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("on {port} it exited ({status}): {}", tail(&log)));
            }
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                // Whatever holds the port may not be redis and never answer,
                // or be another test's redis: the one answering must be ours.
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                match server_pid(&mut s) {
                    Some(pid) if pid == child.id() => {
                        self.child = Some(child);
                        return Ok(());
                    }
                    Some(other) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(format!(
                            "on {port} another redis-server (pid {other}) answers"
                        ));
                    }
                    None => {}
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!(
            "on {port} no PONG in {START_WAIT:?}: {}",
            tail(&log)
        ))
    }

    fn log_path(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "mcpr-redis-{}-{}.log",
            std::process::id(),
            self.port
        ))
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

    /// Watches the commands clients send from now on (`MONITOR`): round
    /// trips, where `INFO commandstats` also counts a script's own commands.
    pub fn monitor(&self) -> Monitor {
        Monitor::start(self.port)
    }

    /// The calls of each command so far, by name (`INFO commandstats`):
    /// two of these subtracted say where a load's commands went.
    pub fn commands_by_name(&self) -> std::collections::BTreeMap<String, u64> {
        calls_by_name(&self.cli(&["INFO", "commandstats"]))
    }

    /// The microseconds Redis spent in each command so far, by name
    /// (`INFO commandstats`' `usec`): where its time goes, not only how
    /// often each command ran.
    pub fn command_usec_by_name(&self) -> std::collections::BTreeMap<String, u64> {
        stat_by_name(&self.cli(&["INFO", "commandstats"]), "usec")
    }

    /// Seconds of CPU the server has used (`INFO cpu`, user + system).
    pub fn cpu_secs(&self) -> f64 {
        self.cli(&["INFO", "cpu"])
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                matches!(k, "used_cpu_user" | "used_cpu_sys")
                    .then(|| v.trim().parse::<f64>().ok())?
            })
            .sum()
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
        let _ = std::fs::remove_file(self.log_path());
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
    stat_by_name(commandstats, "calls")
}

/// One field (`calls`, `usec`) of every `cmdstat_NAME:calls=..,usec=..` line.
fn stat_by_name(commandstats: &str, field: &str) -> std::collections::BTreeMap<String, u64> {
    commandstats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let value = rest
                .trim()
                .split(',')
                .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))?
                .parse()
                .ok()?;
            Some((name.to_string(), value))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls and time per command read from Redis 7's `INFO commandstats`.
    #[test]
    fn commandstats_lines_give_calls_and_usec_by_name() {
        let info = "# Commandstats\r\n\
            cmdstat_xread:calls=12,usec=3400,usec_per_call=283.33,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n";
        let calls = stat_by_name(info, "calls");
        let usec = stat_by_name(info, "usec");
        assert_eq!(calls["xread"], 12);
        assert_eq!(usec["xread"], 3400, "usec, not usec_per_call");
        assert_eq!(usec["evalsha"], 70);
        assert_eq!(calls.len(), 2);
    }

    /// A port taken between the check and the bind is reported with what
    /// redis-server said, not waited on silently, and `start` moves on.
    #[test]
    fn a_taken_port_fails_fast_and_start_moves_on() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let mut s = RedisServer {
            child: None,
            url: String::new(),
            port: held.local_addr().expect("its address").port(),
            extra: Vec::new(),
        };
        let began = std::time::Instant::now();
        let err = s.try_launch().expect_err("the port is taken");
        assert!(err.contains("exited"), "{err}");
        assert!(began.elapsed() < START_WAIT, "{err}");
        let r = RedisServer::start();
        assert!(r.cli(&["PING"]).contains("PONG"));
        // A port another redis-server holds: that one answers, and is
        // told apart from ours by its pid.
        let mut other = RedisServer {
            child: None,
            url: String::new(),
            port: r.port,
            extra: Vec::new(),
        };
        let err = other.try_launch().expect_err("the port is another's");
        assert!(
            err.contains("another redis-server") || err.contains("exited"),
            "{err}"
        );
    }
}
