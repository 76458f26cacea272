//! The server under test: someone else's URL, or our own spawned `serve`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where iterations run, and whether they may kill it.
pub struct Target {
    pub url: String,
    spawned: Option<Spawned>,
}

struct Spawned {
    child: Child,
    addr: String,
    legacy: bool,
    dir: tempfile::TempDir,
}

fn start(addr: &str, dir: &std::path::Path, legacy: bool) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--listen", addr, "--data-dir"])
        .arg(dir)
        .env("RUST_LOG", "error");
    if legacy {
        cmd.arg("--unsafe-legacy-upgrade");
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning serve: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    match line.trim().strip_prefix("listening on ") {
        Some(url) => Ok((child, url.to_owned())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("serve did not start on {addr}"))
        }
    }
}

impl Target {
    /// A server someone else runs.
    pub fn remote(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            spawned: None,
        }
    }

    /// Our own `serve` on a free port with a temporary disk log.
    pub fn spawn(legacy: bool) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let (child, url) = start("127.0.0.1:0", dir.path(), legacy)?;
        let addr = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        Ok(Self {
            url,
            spawned: Some(Spawned {
                child,
                addr,
                legacy,
                dir,
            }),
        })
    }

    /// Whether the kill fault is available.
    pub fn killable(&self) -> bool {
        self.spawned.is_some()
    }

    /// `kill -9` and restart on the same address and data directory.
    pub fn kill_and_restart(&mut self) -> Result<(), String> {
        let Some(s) = self.spawned.as_mut() else {
            return Ok(());
        };
        let _ = s.child.kill();
        let _ = s.child.wait();
        for _ in 0..100 {
            if let Ok((child, _)) = start(&s.addr, s.dir.path(), s.legacy) {
                s.child = child;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("could not restart serve on {}", s.addr))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(s) = self.spawned.as_mut() {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}
