//! The maintenance loop of one server: a pass of the log's housekeeping at
//! start-up and every [`crate::ServerConfig::maintenance_interval`], the
//! routes of the sessions it ended closed, and the orphan sweep of the
//! sessions the pass handed over ([`mcp_resume_log::Pass::sweep`]: every
//! session at start-up on a log of one process; on Redis those of the
//! buckets this instance maintains, when it takes them or when another
//! instance went away). On a shared log it also looks every
//! [`WATCH_EVERY`] for a change of hands between passes, and a pass that
//! failed is tried again at the next look, not an interval later.

use std::time::Instant;

use mcp_resume_log::{LogError, Pass};

use crate::route::{self, state::AppState};

/// Routes parked or closed after which their memory is handed back to the
/// OS ([`give_back_freed_memory`]): a few sessions' worth is kept for reuse.
const GIVE_BACK_AFTER: usize = 64;

/// How often a server on a log shared by instances looks for a change of
/// hands between passes ([`mcp_resume_log::Maintenance::watch`]): an
/// instance that died has its calls and background work ended within its
/// heartbeat's lifetime and this, and a bucket moves to a new instance
/// within this of its start.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs until the server stops.
pub(crate) async fn run(state: AppState) {
    let mut shutdown = state.shutdown.clone();
    // The first pass waits out an unavailable log: calls whose handler died
    // with an earlier process must not wait for a client to resume them.
    let mut outcome = Some(route::reply::retrying(&state, None, || pass(&state)).await);
    let mut next_pass = tokio::time::Instant::now() + interval(&state);
    // Routes parked or closed since memory was last given back, and whether
    // to give it back again on the next pass: their handlers' memory is freed
    // as their tasks end, after the pass that released them.
    let mut released = 0;
    let mut again = false;
    loop {
        if let Some(outcome) = outcome.take() {
            released += match outcome {
                Ok(pass) => after(&state, pass).await,
                Err(e) => {
                    tracing::warn!(error = %e, "maintenance failed; trying again at the next look");
                    // Not a whole interval later: at the next tick.
                    next_pass = tokio::time::Instant::now();
                    0
                }
            };
            let due = released >= GIVE_BACK_AFTER;
            if due || again {
                // It walks the whole heap: not on a worker thread.
                tokio::task::spawn_blocking(give_back_freed_memory);
            }
            again = due;
            if due {
                released = 0;
            }
        }
        let tick = if state.log.shared() {
            WATCH_EVERY.min(interval(&state))
        } else {
            interval(&state)
        };
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = crate::route::state::stopped(&mut shutdown) => return,
        }
        if tokio::time::Instant::now() >= next_pass {
            next_pass = tokio::time::Instant::now() + interval(&state);
            outcome = Some(pass(&state).await);
        } else {
            watch(&state).await;
        }
    }
}

/// Between passes on a shared log: the sessions a change of hands (a
/// bucket taken over, an instance gone) handed this instance, swept for
/// orphaned calls and lost work.
async fn watch(state: &AppState) {
    let sessions = match state.log.watch().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "could not look for instances gone; trying again at the next look");
            return;
        }
    };
    sweep_orphans(state, &sessions).await;
}

/// The orphan sweep of `sessions` (a pass's or a look's), logged.
async fn sweep_orphans(state: &AppState, sessions: &[String]) {
    if sessions.is_empty() {
        return;
    }
    match route::orphans::sweep(state, sessions).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(count = n, "ended calls whose handler died with its process"),
        Err(e) => tracing::warn!(error = %e, "could not sweep for orphaned calls"),
    }
}

/// One pass of the log's housekeeping, timed.
async fn pass(state: &AppState) -> Result<Pass, LogError> {
    let started = Instant::now();
    state.routes.keep_busy_alive(state).await;
    let pass = state
        .log
        .maintain(state.config.session_ttl, state.config.tombstone_ttl)
        .await?;
    state
        .metrics
        .maintained(pass.buckets, pass.ended.len(), started.elapsed());
    tracing::debug!(
        buckets = pass.buckets,
        ended = pass.ended.len(),
        sweep = pass.sweep.len(),
        took = ?started.elapsed(),
        "maintenance pass"
    );
    Ok(pass)
}

/// The time between passes: the configured interval, or less, so that an
/// idle handler parks within about half its park time past it (at most one
/// pass a second for that).
fn interval(state: &AppState) -> std::time::Duration {
    let every = state.config.maintenance_interval;
    match state.park_after() {
        Some(park) => every.min((park / 2).max(std::time::Duration::from_secs(1))),
        None => every,
    }
}

/// What the server does with a pass: closes the routes of ended sessions
/// and ends the orphaned calls of the sessions handed over. How many routes
/// it parked or closed.
async fn after(state: &AppState, pass: Pass) -> usize {
    if !pass.ended.is_empty() {
        tracing::info!(count = pass.ended.len(), "idle sessions ended");
    }
    for id in &pass.ended {
        state.heads.forget(id);
    }
    let released = state.routes.sweep(state, &pass.ended).await;
    sweep_orphans(state, &pass.sweep).await;
    released
}

/// Hands what parked and ended sessions freed back to the OS. glibc's malloc
/// keeps freed memory resident for this process to reuse, so a server whose
/// thousands of idle handlers were parked (or whose sessions ended) would
/// keep their peak resident for as long as it runs; `malloc_trim` releases
/// the free pages of every arena. Only once [`GIVE_BACK_AFTER`] routes were
/// released (and on the pass after), at most once a maintenance pass: it
/// walks the whole heap.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the OS; it touches no
    // memory in use and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
