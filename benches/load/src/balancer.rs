//! `balancer`: what the balancer of a fleet adds. `mcp-resume fleet`
//! (HAProxy configured from deploy/haproxy.cfg in front of `--instances`
//! `serve` on a Redis of its own) answers `echo` through the balancer and,
//! with the same client and connections split over the instances, directly;
//! rounds alternate the order. The fleet issue's target: through the
//! balancer at least 0.8 of direct. Each row also gives the CPU the fleet's
//! processes spent per 1,000 calls (read from /proc): on a machine whose
//! cores the client and the instances already fill, HAProxy's own CPU is
//! taken from them, so the instances' CPU per call is what tells what the
//! fleet behind a balancer costs apart from the balancer itself.

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

/// `workers`: the instances' runtime threads (`TOKIO_WORKER_THREADS`),
/// for instances moved to CPUs of their own once started.
fn fleet(instances: usize, workers: Option<usize>) -> Fleet {
    let mut fleet = Command::new(crate::servers::our_binary());
    if let Some(n) = workers {
        fleet.env("TOKIO_WORKER_THREADS", n.to_string());
    }
    let mut child = fleet
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

/// The fleet's processes' CPU seconds so far: its instances (with the
/// fleet process itself, which only supervises), HAProxy and Redis.
#[derive(Clone, Copy, Default)]
struct Cpu {
    instances: f64,
    haproxy: f64,
    redis: f64,
}

/// Every process descended from `root` (itself included), with its name,
/// read from /proc.
fn tree(root: u32) -> Vec<(u32, String)> {
    let mut parent = std::collections::HashMap::new();
    let mut name = std::collections::HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let (Some((head, tail)), Some(open)) = (stat.rsplit_once(')'), stat.find('(')) else {
            continue;
        };
        let ppid = tail
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        parent.insert(pid, ppid.unwrap_or(0));
        name.insert(pid, head[open + 1..].to_owned());
    }
    let under = |mut pid: u32| {
        while pid > 1 {
            if pid == root {
                return true;
            }
            pid = parent.get(&pid).copied().unwrap_or(0);
        }
        false
    };
    name.into_iter().filter(|(pid, _)| under(*pid)).collect()
}

/// The fleet's instances (and the fleet process, which only supervises):
/// every process under `root` but HAProxy and Redis.
fn instance_pids(root: u32) -> Vec<u32> {
    tree(root)
        .into_iter()
        .filter(|(_, n)| n != "haproxy" && !n.starts_with("redis"))
        .map(|(pid, _)| pid)
        .collect()
}

impl Cpu {
    /// Read from /proc: every process descended from `root`, by its name.
    fn of(root: u32) -> Self {
        let mut cpu = Cpu::default();
        for (pid, n) in tree(root) {
            let secs = crate::scale::cpu_secs(pid);
            match n.as_str() {
                "haproxy" => cpu.haproxy += secs,
                n if n.starts_with("redis") => cpu.redis += secs,
                _ => cpu.instances += secs,
            }
        }
        cpu
    }

    /// Milliseconds spent since `before` per 1,000 of `calls`.
    fn per_1000_since(self, before: Cpu, calls: f64) -> Cpu {
        let per = |now: f64, then: f64| (now - then) * 1e6 / calls.max(1.0);
        Cpu {
            instances: per(self.instances, before.instances),
            haproxy: per(self.haproxy, before.haproxy),
            redis: per(self.redis, before.redis),
        }
    }
}

/// One measurement: echo calls/s and the fleet's CPU per 1,000 calls.
#[derive(Clone, Copy)]
struct Round {
    rps: f64,
    cpu_ms_per_1000: Cpu,
}

/// Echo calls/s directly, the connections split over the instances.
async fn direct(f: &Fleet, conns: usize, secs: Duration) -> Round {
    let per = conns.div_ceil(f.instances.len()).max(1);
    measured(f, secs, async {
        let runs = f.instances.iter().map(|u| echo(u, per, secs));
        futures_util::future::join_all(runs)
            .await
            .iter()
            .map(|e| e.rps)
            .sum()
    })
    .await
}

/// Echo calls/s through the balancer.
async fn through(f: &Fleet, conns: usize, secs: Duration) -> Round {
    measured(f, secs, async { echo(&f.url, conns, secs).await.rps }).await
}

/// `load`'s calls/s, with what the fleet's processes spent meanwhile.
async fn measured(
    f: &Fleet,
    secs: Duration,
    load: impl std::future::Future<Output = f64>,
) -> Round {
    let before = Cpu::of(f.child.id());
    let rps = load.await;
    let calls = rps * secs.as_secs_f64();
    Round {
        rps,
        cpu_ms_per_1000: Cpu::of(f.child.id()).per_1000_since(before, calls),
    }
}

/// Where the instances run while measured: a share of the cores, and
/// which CPUs.
pub struct Placement {
    /// The cores the instances share (a cgroup's quota), so that they, not
    /// the balancer or the client, bound the calls.
    pub cores: Option<f64>,
    /// The CPUs the instances run on. This tool (the client) was bound to
    /// the others before its runtime started, and the fleet it starts
    /// (HAProxy, Redis, the supervising `fleet` process) inherits them.
    pub cpus: Option<Vec<usize>>,
}

/// Runs the comparison and prints (and appends to `out`) its table.
pub async fn run(
    instances: usize,
    conns: usize,
    secs: u64,
    rounds: usize,
    place: Placement,
    out: Option<PathBuf>,
) {
    // An instance sized to the CPUs it gets: one worker thread each.
    let f = fleet(instances.max(1), place.cpus.as_ref().map(Vec::len));
    // Dropped before the fleet: its processes move back, then stop.
    let _quota = place.cores.map(|cores| {
        crate::quota::Quota::new(cores, &instance_pids(f.child.id()))
            .unwrap_or_else(|e| panic!("--instances-cpu {cores}: {e}"))
    });
    if let Some(cpus) = &place.cpus {
        // The instances only: what the supervisor starts later stays off
        // their CPUs.
        let supervisor = f.child.id();
        for pid in instance_pids(supervisor)
            .into_iter()
            .filter(|&p| p != supervisor)
        {
            crate::affinity::pin(pid, cpus).unwrap_or_else(|e| panic!("--instances-cpus: {e}"));
        }
    }
    let secs = Duration::from_secs(secs);
    let (mut via, mut straight) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        if round % 2 == 0 {
            straight.push(direct(&f, conns, secs).await);
            via.push(through(&f, conns, secs).await);
        } else {
            via.push(through(&f, conns, secs).await);
            straight.push(direct(&f, conns, secs).await);
        }
    }
    let median =
        |v: &[Round], by: fn(&Round) -> f64| crate::pct(&v.iter().map(by).collect::<Vec<_>>(), 0.5);
    let (t, s) = (median(&via, |r| r.rps), median(&straight, |r| r.rps));
    let mut md = String::new();
    crate::emit(
        &mut md,
        format!("### echo through HAProxy against direct, {instances} instances on one Redis"),
    );
    crate::emit(&mut md, String::new());
    let mut placed = place
        .cores
        .map_or(String::new(), |c| format!(" --instances-cpu {c}"));
    if let Some(cpus) = &place.cpus {
        placed.push_str(&format!(
            " --instances-cpus {}",
            crate::affinity::join(cpus)
        ));
    }
    crate::emit(
        &mut md,
        format!(
            "`mcp-resume-load balancer --instances {instances} --conns {conns} --secs {} --rounds {rounds}{placed}`",
            secs.as_secs()
        ),
    );
    crate::emit(&mut md, String::new());
    crate::emit(
        &mut md,
        "| path | echo calls/s (median) | rounds | CPU per 1,000 calls: instances / HAProxy / Redis (median) |".into(),
    );
    crate::emit(&mut md, "| --- | ---: | --- | ---: |".into());
    let all = |v: &[Round]| {
        v.iter()
            .map(|r| format!("{:.0}", r.rps))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cpu = |v: &[Round]| {
        let ms = |by: fn(&Round) -> f64| median(v, by);
        format!(
            "{:.1} / {:.1} / {:.1} ms",
            ms(|r| r.cpu_ms_per_1000.instances),
            ms(|r| r.cpu_ms_per_1000.haproxy),
            ms(|r| r.cpu_ms_per_1000.redis)
        )
    };
    crate::emit(
        &mut md,
        format!(
            "| directly to the instances | {s:.0} | {} | {} |",
            all(&straight),
            cpu(&straight)
        ),
    );
    crate::emit(
        &mut md,
        format!(
            "| through HAProxy | {t:.0} | {} | {} |",
            all(&via),
            cpu(&via)
        ),
    );
    crate::emit(&mut md, format!("| through / direct | {:.3} | | |", t / s));
    if let Some(path) = out {
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&md);
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
}
