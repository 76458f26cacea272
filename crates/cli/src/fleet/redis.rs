//! A `redis-server` a fleet or a chaos run starts itself (`mcp-resume
//! fleet`, `chaos --spawn-redis`, `chaos --fleet`), so that a Redis restart
//! can be one of the faults: `kill -9` and a start on the same port and
//! directory; and a stall (`SIGSTOP`, then `SIGCONT`). It keeps an append-only file synced on every write
//! (`--appendfsync always`), the setting under which a restart loses nothing
//! acknowledged: what the servers under test committed must survive it, and
//! whatever they lose must be loud.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The harness's own Redis.
pub struct OwnRedis {
    child: Option<Child>,
    port: u16,
    /// Its data (the append-only file), for as long as it runs.
    dir: tempfile::TempDir,
    /// `redis://127.0.0.1:PORT/0`, for `--store`.
    pub url: String,
}

impl OwnRedis {
    /// `redis-server` (from `PATH`) on a free loopback port, its data in a
    /// temporary directory of its own. The port can be taken between the
    /// check and redis's bind, so a server that exits at once is tried again
    /// on another port, a few times.
    pub fn start() -> Result<Self, String> {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("finding a free port: {e}"))?
                .port();
            let mut r = Self {
                child: None,
                port,
                dir,
                url: format!("redis://127.0.0.1:{port}/0"),
            };
            match r.launch() {
                Ok(()) => return Ok(r),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn launch(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                // A session stream's first node is allocated at this size:
                // 4096 by default, most of a session's memory
                // (docs/operator.md, Redis).
                "--stream-node-max-bytes",
                "1024",
                // A session's hash holds its record (the client's
                // `initialize` params): up to this long, a compact listpack
                // (312 B a session against 648 B at the default 64).
                "--hash-max-ziplist-value",
                "1024",
            ])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting redis-server (is it installed?): {e}"))?;
        self.child = Some(child);
        for _ in 0..1000 {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "redis-server exited on port {} ({status})",
                    self.port
                ));
            }
            if self.pong() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        Err(format!("redis-server did not answer on port {}", self.port))
    }

    /// Whether it answers `PING`, having loaded its data.
    fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        // Whatever holds the port may not be redis and never answer.
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Freezes (`SIGSTOP`) or thaws (`SIGCONT`) it: a Redis that stalls
    /// keeps its connections but answers nothing.
    pub fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        let Some(c) = &self.child else {
            return Ok(());
        };
        // SAFETY: kill(2) on our own child's pid with a valid signal number
        // reads and writes no memory of ours.
        match unsafe { libc::kill(c.id() as libc::pid_t, signal) } {
            0 => Ok(()),
            _ => Err(format!(
                "signal {signal} to redis-server: {}",
                std::io::Error::last_os_error()
            )),
        }
    }

    /// `kill -9` and a start on the same port and data.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.launch()
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
