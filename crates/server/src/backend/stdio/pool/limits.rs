//! The bounds of the stateless pool (docs/protocol.md 3.6), each set by a
//! flag of `gateway`, each refusal a 429 with `Retry-After` and a count in
//! `mcp_resume_limit_refusals_total{limit}`: how fast children start, how
//! many one principal holds, how many calls one child runs and how many
//! messages wait for its stdin.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The pool's limits; [`PoolLimits::default`] is what `gateway` starts with.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PoolLimits {
    /// Most children the pool keeps at once (fewer if `--max-children` is
    /// lower): 8.
    pub children: usize,
    /// Most children one principal's requests hold at once, with
    /// credentials configured (without, every request is one principal's
    /// and only `children` bounds them): 2.
    pub per_principal: usize,
    /// Children started per second, on average: 2.
    pub starts_per_sec: f64,
    /// Children started at once before the rate applies: 4.
    pub start_burst: u32,
    /// Calls in flight on one child: 64.
    pub calls_per_child: usize,
    /// Messages waiting for one child's stdin: 256.
    pub stdin_queue: usize,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self {
            children: 8,
            per_principal: 2,
            starts_per_sec: 2.0,
            start_burst: 4,
            calls_per_child: 64,
            stdin_queue: 256,
        }
    }
}

/// Why the pool refused a request, with when to retry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(super) enum Refused {
    /// Children start no faster than `--pool-starts-per-sec`.
    #[error(
        "the gateway starts at most {rate} stateless child processes a second; retry in {retry:?}"
    )]
    Starts {
        /// The configured rate.
        rate: f64,
        /// Until a start is allowed.
        retry: Duration,
    },
    /// The principal holds its share and all of it is busy.
    #[error("your requests hold {0} stateless child processes (the most one principal may), all busy; retry later or declare the capabilities of one of them")]
    Share(usize),
    /// Every place is taken by a busy child.
    #[error("the gateway runs its maximum of {max} child processes and its {pooled} stateless ones are busy; retry later")]
    Full {
        /// `--max-children`.
        max: usize,
        /// Children in the pool now.
        pooled: usize,
    },
    /// The child runs `--pool-calls-per-child` calls already.
    #[error("this stateless child process runs its maximum of {0} calls at once; retry later")]
    Calls(usize),
    /// The child's stdin has `--pool-stdin-queue` messages waiting.
    #[error(
        "this stateless child process is not reading its input ({0} messages wait); retry later"
    )]
    Stdin(usize),
}

impl Refused {
    /// The limit's name in `mcp_resume_limit_refusals_total` and in the
    /// error's `data.limit`.
    pub(super) fn limit(&self) -> &'static str {
        match self {
            Refused::Starts { .. } => "pool-child-starts",
            Refused::Share(_) => "pool-principal-share",
            Refused::Full { .. } => "pool-full",
            Refused::Calls(_) => "pool-child-calls",
            Refused::Stdin(_) => "pool-child-stdin",
        }
    }

    /// The whole seconds a client should wait (`Retry-After`), at least 1.
    pub(super) fn retry_after(&self) -> u64 {
        match self {
            Refused::Starts { retry, .. } => retry.as_secs_f64().ceil().max(1.0) as u64,
            _ => 1,
        }
    }
}

/// A token bucket: `burst` starts at once, refilled at `rate` a second.
#[derive(Debug)]
pub(super) struct Starts {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl Starts {
    pub(super) fn new(rate: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            rate: rate.max(f64::MIN_POSITIVE),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Whether a child may start now (then counted), else how long until
    /// one may.
    pub(super) fn take(&self) -> Result<(), Refused> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, at) = *st;
        let tokens = (tokens + now.duration_since(at).as_secs_f64() * self.rate).min(self.burst);
        if tokens >= 1.0 {
            *st = (tokens - 1.0, now);
            return Ok(());
        }
        *st = (tokens, now);
        let retry = Duration::from_secs_f64((1.0 - tokens) / self.rate);
        Err(Refused::Starts {
            rate: self.rate,
            retry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_come_in_a_burst_then_at_the_rate() {
        let s = Starts::new(10.0, 3);
        for _ in 0..3 {
            s.take().unwrap();
        }
        let Err(r) = s.take() else {
            panic!("a fourth start at once")
        };
        assert_eq!(r.limit(), "pool-child-starts");
        assert_eq!(r.retry_after(), 1);
        std::thread::sleep(Duration::from_millis(120));
        s.take().unwrap();
        assert!(s.take().is_err());
    }
}
