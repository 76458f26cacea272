//! CPU affinity for a measurement: `balancer --instances-cpus 0` runs the
//! instances on CPU 0 and everything else (this tool's client, HAProxy,
//! Redis) on the other CPUs, so that on a small machine the instances are
//! not preempted by the balancer they are measured behind. Set with
//! util-linux's `taskset` (every thread of each process, `-a`).

use std::process::Command;

/// The CPUs this process may run on (`Cpus_allowed_list` of
/// /proc/self/status: a cpuset or an earlier `taskset` may leave it any
/// set, not 0 to n - 1).
pub fn allowed() -> Result<Vec<usize>, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or("no Cpus_allowed_list in /proc/self/status")?;
    cpus(list.trim())
}

/// The CPUs a list names (`0`, `0,2`, `1-3`), in order, each once.
fn cpus(list: &str) -> Result<Vec<usize>, String> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim) {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("{list:?} is not a CPU list (like 0, 0,2 or 1-3)"))
        };
        let (from, to) = (num(from)?, num(to)?);
        if from > to {
            return Err(format!("{list:?}: the range {part} runs backwards"));
        }
        cpus.extend(from..=to);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The CPUs `list` names, each one this process may run on (`allowed`),
/// and the allowed ones it leaves for the client and the balancer (at
/// least one).
pub fn split(list: &str, allowed: &[usize]) -> Result<(Vec<usize>, Vec<usize>), String> {
    let theirs = cpus(list)?;
    if let Some(c) = theirs.iter().find(|c| !allowed.contains(c)) {
        return Err(format!(
            "CPU {c} is not one this process may run on ({})",
            join(allowed)
        ));
    }
    let ours: Vec<usize> = allowed
        .iter()
        .copied()
        .filter(|c| !theirs.contains(c))
        .collect();
    if ours.is_empty() {
        return Err(format!(
            "{list:?} names every CPU this process may run on ({}): the client and the balancer need one of their own",
            join(allowed)
        ));
    }
    Ok((theirs, ours))
}

/// `cpus` as a list `taskset` takes (`0,2,3`).
pub fn join(cpus: &[usize]) -> String {
    cpus.iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Binds every thread of `pid` (and what it starts from now on) to `cpus`.
pub fn pin(pid: u32, cpus: &[usize]) -> Result<(), String> {
    let list = join(cpus);
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
    fn a_list_is_split_from_the_cpus_allowed() {
        assert_eq!(split("0", &[0, 1]).unwrap(), (vec![0], vec![1]));
        assert_eq!(
            split(" 3, 1-2,2", &[1, 2, 3, 4]).unwrap(),
            (vec![1, 2, 3], vec![4])
        );
        // A cpuset of 2 and 3: CPU 0 is not there to take.
        assert!(split("0", &[2, 3])
            .unwrap_err()
            .contains("CPU 0 is not one"));
        assert!(split("2-3", &[2, 3])
            .unwrap_err()
            .contains("names every CPU"));
        assert!(split("1-0", &[0, 1]).unwrap_err().contains("backwards"));
        for bad in ["x", "", "0,", "-1", "1-"] {
            assert!(split(bad, &[0, 1]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_allowed_list_is_read_from_proc() {
        let allowed = allowed().unwrap();
        assert!(!allowed.is_empty());
        assert!(allowed.windows(2).all(|w| w[0] < w[1]), "{allowed:?}");
    }
}
