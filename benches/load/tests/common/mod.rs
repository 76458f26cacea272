//! What the load tool's tests share: running one of its subcommands to the
//! end, or killing it (and every server it started) at a deadline.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

/// Runs `mcp-resume-load ARGS --out OUT` and returns how it exited; panics
/// if it runs past `limit` (after killing its process group).
pub fn run_load(args: &[&str], out: &Path, limit: Duration) -> ExitStatus {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcp-resume-load"))
        .args(args)
        .arg("--out")
        .arg(out)
        .env("RUST_BACKTRACE", "0")
        // A group of its own: on the deadline the servers it started go too.
        .process_group(0)
        .spawn()
        .expect("spawn mcp-resume-load");
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!("mcp-resume-load {} did not finish in {limit:?}", args[0]);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
