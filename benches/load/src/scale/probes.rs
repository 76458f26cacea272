//! What a scale run reads off the processes it measures: their CPU time
//! (/proc), an instance's metrics scrape, and Redis's own counters (`INFO
//! commandstats`, `INFO memory`).

use std::collections::BTreeMap;

use crate::servers::Server;

/// CPU seconds (user + system) of a process so far.
pub(crate) fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// CPU seconds of every instance so far.
pub(super) fn servers_cpu(servers: &[Server]) -> f64 {
    servers.iter().map(|s| cpu_secs(s.pid())).sum()
}

/// A sample (sum of a counter or gauge) from an instance's scrape.
pub(super) async fn scrape(url: &str, name: &str) -> f64 {
    let base = url.trim_end_matches("/mcp");
    let Ok(r) = reqwest::get(format!("{base}/metrics")).await else {
        return f64::NAN;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// The growth of each command's figure (calls, or microseconds) between
/// two `INFO commandstats` readings,
/// the most first.
pub(super) fn commands_ran(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> Vec<(u64, String)> {
    let mut ran: Vec<(u64, String)> = after
        .iter()
        .map(|(name, n)| {
            (
                n.saturating_sub(before.get(name).copied().unwrap_or(0)),
                name.clone(),
            )
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    ran.sort_unstable_by(|a, b| b.cmp(a));
    ran
}

/// The eight busiest of `ran` over `secs`, as `evalsha 812/s, xadd 400/s, ...`.
pub(super) fn busiest(ran: &[(u64, String)], secs: f64) -> String {
    ran.iter()
        .take(8)
        .map(|(n, name)| format!("{name} {:.0}/s", *n as f64 / secs))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Redis's `used_memory`, in bytes (0 when it does not say).
pub(super) fn redis_memory(redis: &mcp_resume_testkit::RedisServer) -> u64 {
    redis
        .cli(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
