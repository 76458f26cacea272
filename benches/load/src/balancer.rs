//! `balancer`: what the balancer of a fleet adds. `mcp-resume fleet`
//! (HAProxy configured from deploy/haproxy.cfg in front of `--instances`
//! `serve` on a Redis of its own) answers `echo` through the balancer and,
//! with the same client and connections split over the instances, directly;
//! rounds alternate the order. The fleet issue's target: through the
//! balancer at least 0.8 of direct.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::workloads::echo;

/// `mcp-resume fleet` running, its balancer's URL and its instances'.
struct Fleet {
    child: std::process::Child,
    url: String,
    instances: Vec<String>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..300 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fleet(instances: usize) -> Fleet {
    let mut child = Command::new(crate::servers::our_binary())
        .args(["fleet", "--listen", "127.0.0.1:0", "--instances"])
        .arg(instances.to_string())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("mcp-resume fleet (built beside this tool; needs haproxy and redis-server)");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let url = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("mcp-resume fleet did not start: {first}"))
        .to_owned();
    let instances = (0..instances)
        .filter_map(|_| lines.next().and_then(Result::ok))
        .filter_map(|l| l.strip_prefix("instance ").map(str::to_owned))
        .collect();
    // The balancer sees each instance ready after two checks.
    std::thread::sleep(Duration::from_secs(1));
    Fleet {
        child,
        url,
        instances,
    }
}

/// Echo calls/s directly, the connections split over the instances.
async fn direct(f: &Fleet, conns: usize, secs: Duration) -> f64 {
    let per = conns.div_ceil(f.instances.len()).max(1);
    let runs = f.instances.iter().map(|u| echo(u, per, secs));
    futures_util::future::join_all(runs)
        .await
        .iter()
        .map(|e| e.rps)
        .sum()
}

/// Runs the comparison and prints (and appends to `out`) its table.
pub async fn run(instances: usize, conns: usize, secs: u64, rounds: usize, out: Option<PathBuf>) {
    let f = fleet(instances.max(1));
    let secs = Duration::from_secs(secs);
    let (mut through, mut straight) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        if round % 2 == 0 {
            straight.push(direct(&f, conns, secs).await);
            through.push(echo(&f.url, conns, secs).await.rps);
        } else {
            through.push(echo(&f.url, conns, secs).await.rps);
            straight.push(direct(&f, conns, secs).await);
        }
    }
    let (t, s) = (crate::pct(&through, 0.5), crate::pct(&straight, 0.5));
    let mut md = String::new();
    crate::emit(
        &mut md,
        format!("### echo through HAProxy against direct, {instances} instances on one Redis"),
    );
    crate::emit(&mut md, String::new());
    crate::emit(
        &mut md,
        format!(
            "`mcp-resume-load balancer --instances {instances} --conns {conns} --secs {} --rounds {rounds}`",
            secs.as_secs()
        ),
    );
    crate::emit(&mut md, String::new());
    crate::emit(&mut md, "| path | echo calls/s (median) | rounds |".into());
    crate::emit(&mut md, "| --- | ---: | --- |".into());
    let all = |v: &[f64]| {
        v.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    crate::emit(
        &mut md,
        format!(
            "| directly to the instances | {s:.0} | {} |",
            all(&straight)
        ),
    );
    crate::emit(
        &mut md,
        format!("| through HAProxy | {t:.0} | {} |", all(&through)),
    );
    crate::emit(&mut md, format!("| through / direct | {:.3} | |", t / s));
    if let Some(path) = out {
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&md);
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
}
