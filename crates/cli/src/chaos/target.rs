//! The servers under test: someone else's URL, our own spawned `serve`
//! instances (one on a temporary disk log, or several on one Redis), or a
//! spawned `rmcp_durable` (mcp-resume-rmcp's example) on a temporary disk log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Per instance, how many times a kill began or ended: odd while an instance
/// is being killed and restarted. An iteration compares snapshots to know,
/// without asking any server, whether an `emit` of its own may have been cut
/// short by a kill (its own or another iteration's).
#[derive(Debug)]
pub struct Kills(Vec<AtomicU64>);

impl Kills {
    fn new(instances: usize) -> Self {
        Self((0..instances.max(1)).map(|_| AtomicU64::new(0)).collect())
    }

    /// The generation of every instance, now.
    pub fn snapshot(&self) -> Vec<u64> {
        self.0.iter().map(|g| g.load(Ordering::SeqCst)).collect()
    }

    /// The generation of instance `i` (0 for an instance we do not know).
    pub fn of(&self, i: usize) -> u64 {
        self.0.get(i).map(|g| g.load(Ordering::SeqCst)).unwrap_or(0)
    }

    fn bump(&self, i: usize) {
        if let Some(g) = self.0.get(i) {
            g.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Whether no kill began or ended between two snapshots, and none was under way.
pub fn undisturbed(before: u64, after: u64) -> bool {
    before == after && before.is_multiple_of(2)
}

/// How to start our own servers.
pub struct SpawnOptions {
    /// `--unsafe-legacy-upgrade`.
    pub legacy: bool,
    /// `--store` passed through; `None` is the disk log in a temporary directory.
    pub store: Option<String>,
    /// `--redis-replicas` passed through (with a Redis store): with a replica
    /// per master, a master killed mid-run loses nothing committed.
    pub redis_replicas: usize,
    /// How many instances share the store.
    pub instances: usize,
}

/// Which server the spawned processes run.
enum Server {
    /// `mcp-resume serve`, `--unsafe-legacy-upgrade` or not, on `store`
    /// (`None`: the disk log in the data directory).
    Serve {
        legacy: bool,
        store: Option<String>,
        /// `--redis-replicas` (with a Redis store).
        redis_replicas: usize,
    },
    /// `rmcp_durable --store disk:DIR/rmcp-log`.
    Rmcp,
    /// `rmcp_durable --transport mcp-resume --store STORE`: rmcp handlers
    /// hosted on mcp-resume's transport.
    Hosted {
        /// The shared store (`None`: a disk log in the data directory).
        store: Option<String>,
    },
    /// `mcp-resume gateway --store STORE -- CMD`.
    Gateway {
        /// The shared store (`None`: the disk log in the data directory).
        store: Option<String>,
        /// The MCP server behind it, CMD [ARGS...].
        command: Vec<String>,
    },
}

/// Where iterations run, and whether they may kill it.
pub struct Target {
    /// Every instance's MCP endpoint; iterations spread their requests over them.
    pub urls: Vec<String>,
    spawned: Vec<Spawned>,
    kills: Arc<Kills>,
    server: Server,
    dir: Option<tempfile::TempDir>,
    exe: PathBuf,
}

struct Spawned {
    child: Child,
    addr: String,
}

/// A private copy of this executable in `dir`, for the spawned servers: a
/// restart must run the binary under test even when the file it was started
/// from has since been rebuilt or deleted (a shared target directory). On
/// Linux `/proc/self/exe` still reads the running binary in that case.
fn private_exe(dir: &Path) -> Result<PathBuf, String> {
    let proc_exe = Path::new("/proc/self/exe");
    let from = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().map_err(|e| format!("locating the executable: {e}"))?
    };
    let to = dir.join("mcp-resume-under-test");
    std::fs::copy(&from, &to).map_err(|e| format!("copying the executable: {e}"))?;
    Ok(to)
}

/// A private copy of the `rmcp_durable` at `bin` in `dir`, for the same reason.
fn private_rmcp(bin: &Path, dir: &Path) -> Result<PathBuf, String> {
    let to = dir.join("rmcp_durable-under-test");
    std::fs::copy(bin, &to).map_err(|e| format!("copying {}: {e}", bin.display()))?;
    Ok(to)
}

fn start(exe: &Path, addr: &str, dir: &Path, server: &Server) -> Result<(Child, String), String> {
    let mut cmd = Command::new(exe);
    match server {
        Server::Serve {
            legacy,
            store,
            redis_replicas,
        } => {
            cmd.args(["serve", "--listen", addr, "--data-dir"]).arg(dir);
            if let Some(s) = store {
                cmd.args(["--store", s]);
                if *redis_replicas > 0 {
                    cmd.args(["--redis-replicas", &redis_replicas.to_string()]);
                }
            }
            if *legacy {
                cmd.arg("--unsafe-legacy-upgrade");
            }
        }
        Server::Rmcp => {
            let store = format!("disk:{}", dir.join("rmcp-log").display());
            cmd.args(["--listen", addr, "--store", &store]);
        }
        Server::Hosted { store } => {
            let disk = format!("disk:{}", dir.join("hosted-log").display());
            let store = store.as_deref().unwrap_or(&disk);
            cmd.args([
                "--listen",
                addr,
                "--store",
                store,
                "--transport",
                "mcp-resume",
            ]);
        }
        Server::Gateway { store, command } => {
            cmd.args(["gateway", "--listen", addr, "--data-dir"])
                .arg(dir);
            if let Some(s) = store {
                cmd.args(["--store", s]);
            }
            cmd.arg("--").args(command);
        }
    }
    let name = match server {
        Server::Serve { .. } => "serve",
        Server::Rmcp | Server::Hosted { .. } => "rmcp_durable",
        Server::Gateway { .. } => "gateway",
    };
    let mut child = cmd
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning {name}: {e}"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    match line.trim().strip_prefix("listening on ") {
        Some(url) => Ok((child, url.to_owned())),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("{name} did not start on {addr}"))
        }
    }
}

impl Target {
    /// A server someone else runs.
    pub fn remote(url: &str) -> Self {
        Self {
            urls: vec![url.to_owned()],
            spawned: Vec::new(),
            kills: Arc::new(Kills::new(1)),
            // Never started: nothing is spawned for a remote server.
            server: Server::Serve {
                legacy: false,
                store: None,
                redis_replicas: 0,
            },
            dir: None,
            exe: PathBuf::new(),
        }
    }

    /// One `rmcp_durable` (a private copy of the binary at `bin`) on a disk
    /// log in a temporary directory; killable, and restarted on the same
    /// address and log.
    pub fn spawn_rmcp(bin: &Path) -> Result<Self, String> {
        Self::start_all(Server::Rmcp, 1, |dir| private_rmcp(bin, dir))
    }

    /// Our own `serve` instances on free ports, sharing one store.
    pub fn spawn(opts: &SpawnOptions) -> Result<Self, String> {
        let server = Server::Serve {
            legacy: opts.legacy,
            store: opts.store.clone(),
            redis_replicas: opts.redis_replicas,
        };
        Self::start_all(server, opts.instances, private_exe)
    }

    /// `instances` gateways (`mcp-resume gateway -- CMD`) on one store.
    pub fn spawn_gateway(
        store: Option<&str>,
        instances: usize,
        command: &[String],
    ) -> Result<Self, String> {
        let server = Server::Gateway {
            store: store.map(str::to_owned),
            command: command.to_vec(),
        };
        Self::start_all(server, instances, private_exe)
    }

    /// `instances` of `rmcp_durable` (a private copy of the one at `bin`)
    /// hosting its handler on mcp-resume's transport, on one store.
    pub fn spawn_hosted(bin: &Path, store: Option<&str>, instances: usize) -> Result<Self, String> {
        let server = Server::Hosted {
            store: store.map(str::to_owned),
        };
        Self::start_all(server, instances, |dir| private_rmcp(bin, dir))
    }

    /// `instances` of `server` in a temporary directory, from the private
    /// copy of the executable `copy` makes there.
    fn start_all(
        server: Server,
        instances: usize,
        copy: impl FnOnce(&Path) -> Result<PathBuf, String>,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let exe = copy(dir.path())?;
        let mut t = Self {
            urls: Vec::new(),
            spawned: Vec::new(),
            kills: Arc::new(Kills::new(instances)),
            server,
            dir: None,
            exe,
        };
        for _ in 0..instances.max(1) {
            t.start_instance(dir.path())?;
        }
        t.dir = Some(dir);
        Ok(t)
    }

    /// Sends `signal` to instance `i` (`SIGSTOP` freezes it: its leases
    /// lapse while its sockets stay open; `SIGCONT` thaws it).
    pub fn signal(&self, i: usize, signal: libc::c_int) -> Result<(), String> {
        let Some(s) = self.spawned.get(i) else {
            return Ok(());
        };
        let pid = s.child.id() as libc::pid_t;
        // SAFETY: kill(2) with a pid of our own child and a valid signal
        // number reads and writes no memory of ours.
        match unsafe { libc::kill(pid, signal) } {
            0 => Ok(()),
            _ => Err(format!(
                "signal {signal} to instance {i}: {}",
                std::io::Error::last_os_error()
            )),
        }
    }

    /// Starts one more instance on a free port.
    fn start_instance(&mut self, dir: &Path) -> Result<(), String> {
        let (child, url) = start(&self.exe, "127.0.0.1:0", dir, &self.server)?;
        let addr = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.urls.push(url);
        self.spawned.push(Spawned { child, addr });
        Ok(())
    }

    /// The kill generations of the instances, shared with the iterations.
    pub fn kills(&self) -> Arc<Kills> {
        self.kills.clone()
    }

    /// How many instances can be killed (0 for a remote server).
    pub fn killable(&self) -> usize {
        self.spawned.len()
    }

    /// `kill -9` of instance `i` and a restart on the same address and store.
    /// Its kill generation is odd from just before the kill until the restart
    /// has succeeded or failed.
    pub fn kill_and_restart(&mut self, i: usize) -> Result<(), String> {
        let kills = self.kills.clone();
        kills.bump(i);
        let r = self.kill_and_restart_inner(i);
        kills.bump(i);
        r
    }

    fn kill_and_restart_inner(&mut self, i: usize) -> Result<(), String> {
        let (Some(s), Some(dir)) = (self.spawned.get_mut(i), self.dir.as_ref()) else {
            return Ok(());
        };
        let _ = s.child.kill();
        let _ = s.child.wait();
        for _ in 0..100 {
            if let Ok((child, _)) = start(&self.exe, &s.addr, dir.path(), &self.server) {
                s.child = child;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("could not restart the server on {}", s.addr))
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
