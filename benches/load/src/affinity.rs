//! CPU affinity for a measurement: `balancer --instances-cpus 0` runs the
//! instances on CPU 0 and everything else (this tool's client, HAProxy,
//! Redis) on the other CPUs, so that on a small machine the instances are
//! not preempted by the balancer they are measured behind. Set with
//! util-linux's `taskset` (every thread of each process, `-a`).

use std::process::Command;

/// The CPUs a list names (`0`, `0,2`, `1-3`), checked against the CPUs
/// this process may run on (numbered from 0: called before any binding).
pub fn parse(list: &str) -> Result<Vec<usize>, String> {
    let have = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{list:?} is not a CPU list (like 0, 0,2 or 1-3)"))
        };
        let (from, to) = (num(from)?, num(to)?);
        if from > to || to >= have {
            return Err(format!(
                "{list:?}: this machine has CPUs 0 to {} only",
                have - 1
            ));
        }
        cpus.extend(from..=to);
    }
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.len() >= have {
        return Err(format!(
            "{list:?} names every CPU: the client and the balancer need one of their own"
        ));
    }
    Ok(cpus)
}

/// The CPUs this process may run on that are not in `cpus`.
pub fn others(cpus: &[usize]) -> Vec<usize> {
    let have = std::thread::available_parallelism().map_or(1, |n| n.get());
    (0..have).filter(|c| !cpus.contains(c)).collect()
}

/// Binds every thread of `pid` (and what it starts from now on) to `cpus`.
pub fn pin(pid: u32, cpus: &[usize]) -> Result<(), String> {
    let list = cpus
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", &list, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("taskset (util-linux) could not run: {e}"))?;
    if !status.success() {
        return Err(format!(
            "taskset could not bind process {pid} to CPUs {list}: {status}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_ranges() {
        let have = std::thread::available_parallelism().map_or(1, |n| n.get());
        if have >= 2 {
            assert_eq!(parse("0").unwrap(), vec![0]);
            assert_eq!(others(&[0]), (1..have).collect::<Vec<_>>());
            assert!(parse(&format!("0-{}", have - 1)).is_err());
        }
        assert!(parse("x").is_err());
        assert!(parse(&have.to_string()).is_err());
        assert!(parse("1-0").is_err());
    }
}
