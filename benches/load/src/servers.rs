//! Starting the servers under test, one at a time, and reading their RSS.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server process under test.
pub struct Server {
    pub name: &'static str,
    pub url: String,
    child: Child,
    _dir: Option<tempfile::TempDir>,
}

impl Server {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident set size of the server process, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits for the "listening on URL" line, then for the port to accept.
pub fn started(name: &'static str, mut child: Child, dir: Option<tempfile::TempDir>) -> Server {
    let url =
        mcp_resume_testkit::listening_url(&mut child).unwrap_or_else(|e| panic!("{name}: {e}"));
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    for _ in 0..100 {
        if std::net::TcpStream::connect(&addr).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Server {
        name,
        url,
        child,
        _dir: dir,
    }
}

/// `mcp-resume serve` on the disk log (the default), retaining enough to replay the whole benchmark.
pub fn ours(bin: &Path, extra: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--retention-events",
            "1000000",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(extra)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mcp-resume serve");
    started("mcp-resume", child, Some(dir))
}

/// `mcp-resume gateway` on the disk log in front of the stdio server `command`.
pub fn gateway(bin: &Path, extra: &[&str], command: &[&str]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin)
        .args(["gateway", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(extra)
        .arg("--")
        .args(command)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mcp-resume gateway");
    started("mcp-resume gateway", child, Some(dir))
}

/// `mcp-resume gateway --upstream URL` on the disk log.
pub fn upstream_gateway(bin: &Path, url: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin)
        .args([
            "gateway",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            url,
            "--data-dir",
        ])
        .arg(dir.path())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mcp-resume gateway --upstream");
    started("mcp-resume gateway --upstream", child, Some(dir))
}

/// The `conformance` example (release build, next to this binary under
/// `examples/`) on a disk log of its own.
pub fn conformance_example() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let bin = our_binary().with_file_name("examples").join("conformance");
    let child = Command::new(&bin)
        .args(["--listen", "127.0.0.1:0", "--store"])
        .arg(format!("disk:{}", dir.path().join("log").display()))
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "spawn {} (cargo build --release -p mcp-resume-rmcp --example conformance): {e}",
                bin.display()
            )
        });
    started("conformance example", child, Some(dir))
}

/// mcp-resume-rmcp's `rmcp_durable` example at `bin` with `--transport
/// transport`: on a disk log of its own, but `rmcp-alone` (in memory, its
/// log unused).
pub fn rmcp_durable(name: &'static str, bin: &Path, transport: &str) -> Server {
    let data = tempfile::tempdir().unwrap();
    let store = if transport == "rmcp-alone" {
        "memory".to_owned()
    } else {
        format!("disk:{}", data.path().join("log").display())
    };
    let child = Command::new(bin)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--transport",
            transport,
            // Enough to replay the whole benchmark, as `ours` keeps.
            "--retention-events",
            "1000000",
            "--store",
        ])
        .arg(store)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
    started(name, child, Some(data))
}

/// This tool's own `bare-server`: hyper + serde_json, the ceiling.
pub fn bare() -> Server {
    let child = Command::new(std::env::current_exe().unwrap())
        .arg("bare-server")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn mcp-resume-load bare-server");
    started("bare hyper", child, None)
}

/// The TypeScript SDK server of `benches/peers/node`.
pub fn node(root: &Path) -> Server {
    let child = Command::new("node")
        .arg(root.join("benches/peers/node/server.mjs"))
        .arg(free_port().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn node peer (run scripts/bench-setup)");
    started("ts-sdk", child, None)
}

/// The Python SDK server of `benches/peers/python`.
pub fn python(root: &Path) -> Server {
    let child = Command::new(root.join("benches/peers/python/.venv/bin/python"))
        .arg(root.join("benches/peers/python/server.py"))
        .arg(free_port().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python peer (run scripts/bench-setup)");
    started("py-sdk", child, None)
}

/// The `mcp-resume` binary next to this one (same cargo profile).
pub fn our_binary() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    me.with_file_name("mcp-resume")
}
