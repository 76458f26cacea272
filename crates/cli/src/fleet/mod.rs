//! `mcp-resume fleet`: the topology of a deployment on one machine. HAProxy
//! (configured from `deploy/haproxy.cfg`) round-robins, with no stickiness,
//! over instances that share one Redis (its own, with an append-only file,
//! unless `--store` names one): what `chaos --fleet` stresses, and what a
//! person can try before deploying.
//!
//! An instance sits in a slot: a fixed loopback port the balancer names. A
//! slot may be empty (the balancer's health check marks it down), so the
//! fleet scales out and in without touching the balancer, and a restarted
//! instance takes its slot again.

pub(crate) mod balancer;
pub(crate) mod instances;
pub(crate) mod redis;

use std::path::PathBuf;
use std::process::{Child, ExitCode};
use std::time::Duration;

use clap::Args;

pub(crate) use instances::{Kind, Launch};

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
mcp-resume fleet                                   # HAProxy on 127.0.0.1:8080 + 3 serve + Redis\n  \
mcp-resume fleet --instances 5 --listen 127.0.0.1:0\n  \
mcp-resume fleet --store redis://127.0.0.1:6379/0 # instances on a Redis you run\n  \
mcp-resume fleet -- interop/python/.venv/bin/python interop/python/stdio_server.py   # gateways\n\n\
It prints `listening on http://ADDR/mcp` (the balancer), then one line per instance.\n\
Ctrl-C or SIGTERM stops the instances gracefully (each drains), then the balancer and Redis.\n\
Needs `haproxy` and `redis-server` on PATH (Debian packages of those names).")]
pub struct FleetArgs {
    /// Where the balancer listens: the fleet's one address. Port 0 picks a free one.
    #[arg(
        long,
        default_value = "127.0.0.1:8080",
        env = "MCP_RESUME_FLEET_LISTEN"
    )]
    listen: String,

    /// How many instances run behind it.
    #[arg(long, default_value_t = 3, env = "MCP_RESUME_FLEET_INSTANCES")]
    instances: usize,

    /// The Redis the instances share (`redis://HOST:PORT/DB`). Default: a
    /// `redis-server` of the fleet's own, append-only file synced on every
    /// write, in a temporary directory.
    #[arg(long, env = "MCP_RESUME_FLEET_STORE")]
    store: Option<String>,

    /// Seconds each instance's graceful stop may take (its --shutdown-grace-secs).
    #[arg(long, default_value_t = 10)]
    shutdown_grace_secs: u64,

    /// Host this rmcp server binary on the transport instead (it must take
    /// `--listen`, `--store` and `--transport mcp-resume`, as
    /// mcp-resume-rmcp's `rmcp_durable` example does).
    #[arg(long, value_name = "BIN", conflicts_with = "command")]
    hosted: Option<PathBuf>,

    /// Run `gateway -- CMD` instances in front of this stdio MCP server instead of `serve`.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

/// One slot of the fleet: its port, and the instance in it, if any.
pub(crate) struct Slot {
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
}

/// A balancer, instances and their Redis, stopped on drop.
pub(crate) struct Fleet {
    /// The balancer's MCP endpoint.
    pub(crate) url: String,
    pub(crate) slots: Vec<Slot>,
    pub(crate) redis: Option<redis::OwnRedis>,
    launch: Launch,
    // Dropped after the instances (fields drop in order): the balancer
    // first would refuse the clients of instances still draining.
    _balancer: balancer::Balancer,
    dir: tempfile::TempDir,
}

/// How to build a fleet.
pub(crate) struct Plan {
    pub(crate) listen: String,
    /// Instances started now.
    pub(crate) instances: usize,
    /// Slots in the balancer (at least `instances`): room to scale out.
    pub(crate) slots: usize,
    /// `None`: a Redis of the fleet's own.
    pub(crate) store: Option<String>,
    pub(crate) kind: Kind,
    pub(crate) exe: PathBuf,
    pub(crate) grace_secs: u64,
}

/// How long after an instance answers `/readyz` the balancer sends it work:
/// two checks 300 ms apart (`rise 2`), and a margin.
const RISE: Duration = Duration::from_millis(900);

impl Fleet {
    /// Starts Redis (unless the plan names one), the instances and the balancer.
    pub(crate) fn start(plan: Plan) -> Result<Self, String> {
        // MCPR_FLEET_KEEP keeps it (the instances' and the balancer's logs)
        // for a look after the run (docs/fleet.md).
        let keep = std::env::var_os("MCPR_FLEET_KEEP").is_some();
        let dir = tempfile::Builder::new()
            .prefix("mcp-resume-fleet")
            .disable_cleanup(keep)
            .tempdir()
            .map_err(|e| e.to_string())?;
        if keep {
            eprintln!(
                "mcp-resume: the fleet's logs are kept in {}",
                dir.path().display()
            );
        }
        // A private copy: a restart runs the binary the fleet started with,
        // even when the file has been rebuilt since (a shared target dir).
        let exe = dir.path().join("mcp-resume-fleet");
        std::fs::copy(&plan.exe, &exe)
            .map_err(|e| format!("copying {}: {e}", plan.exe.display()))?;
        let redis = match &plan.store {
            Some(_) => None,
            None => Some(redis::OwnRedis::start()?),
        };
        let store = plan
            .store
            .clone()
            .or_else(|| redis.as_ref().map(|r| r.url.clone()))
            .unwrap_or_default();
        let launch = Launch {
            exe,
            kind: plan.kind.clone(),
            store,
            grace_secs: plan.grace_secs,
            drain_accept_secs: 1,
        };
        let mut slots = Vec::new();
        for _ in 0..plan.slots.max(plan.instances) {
            slots.push(Slot {
                port: instances::free_port()?,
                child: None,
            });
        }
        for slot in slots.iter_mut().take(plan.instances) {
            slot.child = Some(instances::start(&launch, slot.port, dir.path())?);
        }
        let listen = match plan.listen.strip_suffix(":0") {
            Some(host) => format!("{host}:{}", instances::free_port()?),
            None => plan.listen.clone(),
        };
        let ports: Vec<u16> = slots.iter().map(|s| s.port).collect();
        let balancer = balancer::Balancer::start(dir.path(), &listen, &ports)?;
        Ok(Self {
            url: format!("http://{listen}/mcp"),
            slots,
            redis,
            launch,
            _balancer: balancer,
            dir,
        })
    }

    /// The slots with an instance running.
    pub(crate) fn running(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|i| self.slots[*i].child.is_some())
            .collect()
    }

    /// Starts an instance in empty slot `i` and waits until the balancer
    /// can have seen it ready.
    pub(crate) async fn start_slot(&mut self, i: usize) -> Result<(), String> {
        let port = self.slots[i].port;
        let child = instances::start(&self.launch, port, self.dir.path())?;
        self.slots[i].child = Some(child);
        tokio::time::sleep(RISE).await;
        Ok(())
    }

    /// Stops slot `i`'s instance gracefully (SIGTERM); how long it took and
    /// whether it exited within its grace (else it was killed).
    pub(crate) async fn stop_slot(&mut self, i: usize) -> (Duration, bool) {
        let within = Duration::from_secs(self.launch.grace_secs + 10);
        match self.slots[i].child.as_mut() {
            Some(child) => {
                let stopped = instances::stop(child, within).await;
                self.slots[i].child = None;
                stopped
            }
            None => (Duration::ZERO, true),
        }
    }

    /// `kill -9` of slot `i`'s instance.
    pub(crate) fn kill_slot(&mut self, i: usize) {
        if let Some(mut child) = self.slots[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `SIGSTOP` or `SIGCONT` to slot `i`'s instance.
    pub(crate) fn signal_slot(&self, i: usize, signal: libc::c_int) -> Result<(), String> {
        match &self.slots[i].child {
            Some(child) => instances::signal(child, signal),
            None => Ok(()),
        }
    }

    /// Where the fleet keeps its files (the balancer's configuration and
    /// log, each instance's log).
    pub(crate) fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Stops every instance gracefully, all at once.
    pub(crate) async fn stop_all(&mut self) {
        let running = self.running();
        for i in &running {
            if let Some(child) = &self.slots[*i].child {
                let _ = instances::signal(child, libc::SIGTERM);
            }
        }
        for i in running {
            self.stop_slot(i).await;
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// `mcp-resume fleet`.
pub async fn run(args: FleetArgs) -> Result<ExitCode, String> {
    if args.instances == 0 {
        return Err("--instances must be at least 1".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating mcp-resume: {e}"))?;
    let kind = match (&args.hosted, args.command.is_empty()) {
        (Some(bin), _) => Kind::Hosted(bin.clone()),
        (None, false) => Kind::Gateway(args.command.clone()),
        (None, true) => Kind::Serve,
    };
    let mut fleet = Fleet::start(Plan {
        listen: args.listen.clone(),
        instances: args.instances,
        slots: args.instances,
        store: args.store.clone(),
        kind,
        exe,
        grace_secs: args.shutdown_grace_secs,
    })?;
    println!("listening on {}", fleet.url);
    for slot in &fleet.slots {
        println!("instance http://127.0.0.1:{}/mcp", slot.port);
    }
    match &fleet.redis {
        Some(r) => println!("redis {} (the fleet's own)", r.url),
        None => println!("redis {}", args.store.as_deref().unwrap_or_default()),
    }
    println!("files {}", fleet.dir().display());
    stop_signal().await;
    eprintln!("stopping: each instance drains, then the balancer and Redis stop");
    fleet.stop_all().await;
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
