//! The servers under test: someone else's URL, or our own spawned `serve`
//! instances (one on a temporary disk log, or several on one Redis).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How to start our own servers.
pub struct SpawnOptions {
    /// `--unsafe-legacy-upgrade`.
    pub legacy: bool,
    /// `--store` passed through; `None` is the disk log in a temporary directory.
    pub store: Option<String>,
    /// `--redis-replicas` passed through (with a Redis store).
    pub redis_replicas: usize,
    /// How many instances share the store.
    pub instances: usize,
}

/// Where iterations run, and whether they may kill it.
pub struct Target {
    /// Every instance's MCP endpoint; iterations spread their requests over them.
    pub urls: Vec<String>,
    spawned: Vec<Spawned>,
    /// `--store` and what goes with it, for every start.
    store_args: Vec<String>,
    legacy: bool,
    dir: Option<tempfile::TempDir>,
}

struct Spawned {
    child: Child,
    addr: String,
}

fn start(
    addr: &str,
    dir: &std::path::Path,
    legacy: bool,
    store_args: &[String],
) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--listen", addr, "--data-dir"])
        .arg(dir)
        .env("RUST_LOG", "error");
    cmd.args(store_args);
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
            urls: vec![url.to_owned()],
            spawned: Vec::new(),
            store_args: Vec::new(),
            legacy: false,
            dir: None,
        }
    }

    /// Our own `serve` instances on free ports, sharing one store.
    pub fn spawn(opts: &SpawnOptions) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut t = Self {
            urls: Vec::new(),
            spawned: Vec::new(),
            store_args: match &opts.store {
                Some(s) if opts.redis_replicas > 0 => vec![
                    "--store".into(),
                    s.clone(),
                    "--redis-replicas".into(),
                    opts.redis_replicas.to_string(),
                ],
                Some(s) => vec!["--store".into(), s.clone()],
                None => Vec::new(),
            },
            legacy: opts.legacy,
            dir: None,
        };
        for _ in 0..opts.instances.max(1) {
            let (child, url) = start("127.0.0.1:0", dir.path(), opts.legacy, &t.store_args)?;
            let addr = url
                .trim_start_matches("http://")
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            t.urls.push(url);
            t.spawned.push(Spawned { child, addr });
        }
        t.dir = Some(dir);
        Ok(t)
    }

    /// How many instances can be killed (0 for a remote server).
    pub fn killable(&self) -> usize {
        self.spawned.len()
    }

    /// `kill -9` of instance `i` and a restart on the same address and store.
    pub fn kill_and_restart(&mut self, i: usize) -> Result<(), String> {
        let (Some(s), Some(dir)) = (self.spawned.get_mut(i), self.dir.as_ref()) else {
            return Ok(());
        };
        let _ = s.child.kill();
        let _ = s.child.wait();
        for _ in 0..100 {
            if let Ok((child, _)) = start(&s.addr, dir.path(), self.legacy, &self.store_args) {
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
        for s in &mut self.spawned {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}
