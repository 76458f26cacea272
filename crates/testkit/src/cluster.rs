//! A Redis Cluster of the test's own: `redis-server --cluster-enabled yes`
//! nodes on free loopback ports, joined with `redis-cli --cluster create`,
//! each with its own directory (for its `nodes.conf`), all killed on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// How long a silent master counts as alive before its replica takes over:
/// short, so a test sees a failover in a few seconds.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// A running cluster: `masters` masters with `replicas` replicas each.
pub struct RedisCluster {
    /// Every node, by the order they were started (masters first, as
    /// `redis-cli --cluster create` assigns them).
    pub nodes: Vec<RedisServer>,
    dirs: Vec<PathBuf>,
    /// `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,...` (every node a seed).
    pub url: String,
}

impl RedisCluster {
    /// Starts the nodes, creates the cluster and waits until every slot is
    /// served and every replica is in sync with its master.
    pub fn start(masters: usize, replicas: usize) -> Self {
        let mut nodes = Vec::new();
        let mut dirs = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            let dir = std::env::temp_dir().join(format!(
                "mcpr-cluster-{}-{}",
                std::process::id(),
                unique()
            ));
            std::fs::create_dir_all(&dir).expect("a node directory");
            let timeout = NODE_TIMEOUT_MS.to_string();
            nodes.push(RedisServer::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                &timeout,
                "--dir",
                dir.to_str().expect("a UTF-8 temp dir"),
            ]));
            dirs.push(dir);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli (scripts/test installs it)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Self {
            url: format!("redis-cluster://{}", addrs.join(",")),
            nodes,
            dirs,
        };
        c.wait_healthy(Duration::from_secs(30));
        c
    }

    /// Every command its masters have run so far (`INFO commandstats`, summed).
    pub fn commands_run(&self) -> u64 {
        self.masters()
            .into_iter()
            .map(|p| crate::calls(&self.cli(p, &["INFO", "commandstats"])))
            .sum()
    }

    /// `redis-cli -p PORT ARGS...`, its output.
    pub fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| n.port)
            .collect()
    }

    /// The masters' ports, as the first live node sees them.
    pub fn masters(&self) -> Vec<u16> {
        let Some(&port) = self.live_ports().first() else {
            return Vec::new();
        };
        self.cli(port, &["CLUSTER", "NODES"])
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|l| {
                let addr = l.split_whitespace().nth(1)?;
                addr.split(['@', ':']).nth(1)?.parse().ok()
            })
            .collect()
    }

    /// The port of the master serving `key`'s slot (as a live node sees it).
    pub fn master_of(&self, key: &str) -> u16 {
        self.try_master_of(key)
            .unwrap_or_else(|| panic!("no master serves {key}"))
    }

    /// As [`RedisCluster::master_of`]; `None` while no healthy master serves it.
    pub fn try_master_of(&self, key: &str) -> Option<u16> {
        let port = self.live_ports()[0];
        let slot: u16 = self
            .cli(port, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot");
        for l in self.cli(port, &["CLUSTER", "NODES"]).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| match r.split_once('-') {
                Some((a, b)) => {
                    a.parse::<u16>().is_ok_and(|a| a <= slot)
                        && b.parse::<u16>().is_ok_and(|b| slot <= b)
                }
                None => r.parse::<u16>().ok() == Some(slot),
            });
            if serves {
                return f[1].split(['@', ':']).nth(1)?.parse().ok();
            }
        }
        None
    }

    fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }

    /// `kill -9` of the node on `port`.
    pub fn kill(&mut self, port: u16) {
        self.node(port).stop();
    }

    /// Starts the node on `port` again (empty: it rejoins from its
    /// `nodes.conf` and syncs from whoever is master of its slots now).
    pub fn restart(&mut self, port: u16) {
        self.node(port).launch();
    }

    /// Waits until every live node says `cluster_state:ok`, every master
    /// has as many online replicas as it had at creation (`replicas` of the
    /// live nodes), or panics after `timeout`.
    pub fn wait_healthy(&self, timeout: Duration) {
        let start = Instant::now();
        loop {
            if self.healthy() {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "the cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every live node serves with `cluster_state:ok`, and every live
    /// replica's link to its master is up.
    pub fn healthy(&self) -> bool {
        self.live_ports().iter().all(|&p| {
            let info = self.cli(p, &["CLUSTER", "INFO"]);
            let repl = self.cli(p, &["INFO", "replication"]);
            info.contains("cluster_state:ok")
                && (!repl.contains("role:slave") || repl.contains("master_link_status:up"))
        })
    }

    /// Waits until `port` is no longer a master and `masters` others are
    /// (a replica was promoted in its place), the survivors agreeing that
    /// the cluster is ok.
    pub fn wait_promoted(&self, port: u16, masters: usize, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            let now = self.masters();
            if !now.contains(&port)
                && now.len() == masters
                && self.live_ports().iter().all(|&p| {
                    self.cli(p, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no replica took over from {port}");
    }

    /// Waits until the master of `key`'s slot is no longer `port`
    /// (a replica was promoted) and the survivors agree the cluster is ok.
    pub fn wait_failover(&self, key: &str, port: u16, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            let live = self.live_ports();
            if self.try_master_of(key).is_some_and(|m| m != port)
                && live.iter().all(|&p| {
                    self.cli(p, &["CLUSTER", "INFO"])
                        .contains("cluster_state:ok")
                })
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no replica took over from {port}");
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.stop();
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
