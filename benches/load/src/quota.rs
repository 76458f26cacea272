//! A CPU quota for a set of processes, in a cgroup of their own, so that a
//! measurement can make them what bounds it: `balancer --instances-cpu`
//! gives the instances a fixed share of a core, as if the balancer and the
//! client had cores of their own (on a machine with two cores, they take
//! theirs from the instances otherwise).

use std::path::{Path, PathBuf};

/// A cgroup with a CPU quota, removed when dropped (its processes moved to
/// the hierarchy's root first).
pub struct Quota {
    dir: PathBuf,
    parent: PathBuf,
}

/// Where a cgroup with a CPU quota can be made: cgroup v1's `cpu`
/// hierarchy, or a v2 hierarchy whose root offers the `cpu` controller.
fn hierarchy() -> Result<(PathBuf, bool), String> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.cfs_quota_us").exists() {
        return Ok((v1.to_owned(), true));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    let controllers = std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "cpu") {
        // A child has `cpu.max` only with the controller enabled below the
        // root (writing it again changes nothing).
        std::fs::write(v2.join("cgroup.subtree_control"), "+cpu")
            .map_err(|e| format!("cannot enable the cpu controller in /sys/fs/cgroup: {e}"))?;
        return Ok((v2.to_owned(), false));
    }
    Err("no cgroup cpu controller found (neither /sys/fs/cgroup/cpu nor a cgroup v2 root offering cpu)".into())
}

impl Quota {
    /// `cores` of CPU time (0.5: half of one core) shared by `pids` and
    /// every thread and process they start from now on. Needs a writable
    /// cgroup (root, or a delegated hierarchy).
    pub fn new(cores: f64, pids: &[u32]) -> Result<Self, String> {
        if cores.is_nan() || cores <= 0.0 {
            return Err(format!(
                "a CPU quota must be more than 0 cores, not {cores}"
            ));
        }
        let (parent, v1) = hierarchy()?;
        let dir = parent.join(format!("mcp-resume-load-{}", std::process::id()));
        let fail = |what: &str, e: std::io::Error| {
            format!(
                "{what} {} (a CPU quota needs a writable cgroup: root): {e}",
                dir.display()
            )
        };
        std::fs::create_dir_all(&dir).map_err(|e| fail("cannot make", e))?;
        let quota = Self {
            dir: dir.clone(),
            parent,
        };
        let period = 100_000u64;
        let us = ((cores * period as f64) as u64).max(1_000);
        if v1 {
            std::fs::write(dir.join("cpu.cfs_period_us"), period.to_string())
                .and_then(|()| std::fs::write(dir.join("cpu.cfs_quota_us"), us.to_string()))
                .map_err(|e| fail("cannot set the quota of", e))?;
        } else {
            std::fs::write(dir.join("cpu.max"), format!("{us} {period}"))
                .map_err(|e| fail("cannot set the quota of", e))?;
        }
        for pid in pids {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .map_err(|e| fail(&format!("cannot move process {pid} into"), e))?;
        }
        Ok(quota)
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(self.parent.join("cgroup.procs"), pid);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
