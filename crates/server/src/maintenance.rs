//! The maintenance loop of one server: a pass of the log's housekeeping at
//! start-up and every [`crate::ServerConfig::maintenance_interval`], the
//! routes of the sessions it ended closed, and the orphan sweep of the
//! sessions the pass handed over ([`mcp_resume_log::Pass::sweep`]: every
//! session at start-up on a log of one process; on Redis those of the
//! buckets this instance maintains, when it takes them or when another
//! instance went away).

use std::time::Instant;

use mcp_resume_log::{LogError, Pass};

use crate::route::{self, state::AppState};

/// Routes parked or closed after which their memory is handed back to the
/// OS ([`give_back_freed_memory`]): a few sessions' worth is kept for reuse.
const GIVE_BACK_AFTER: usize = 64;

/// Runs until the server stops.
pub(crate) async fn run(state: AppState) {
    let mut shutdown = state.shutdown.clone();
    // The first pass waits out an unavailable log: calls whose handler died
    // with an earlier process must not wait for a client to resume them.
    let mut outcome = route::reply::retrying(&state, None, || pass(&state)).await;
    // Routes parked or closed since memory was last given back, and whether
    // to give it back again on the next pass: their handlers' memory is freed
    // as their tasks end, after the pass that released them.
    let mut released = 0;
    let mut again = false;
    loop {
        released += match outcome {
            Ok(pass) => after(&state, pass).await,
            Err(e) => {
                tracing::warn!(error = %e, "maintenance failed");
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
        tokio::select! {
            _ = tokio::time::sleep(interval(&state)) => {}
            _ = crate::route::state::stopped(&mut shutdown) => return,
        }
        outcome = pass(&state).await;
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
    let released = state.routes.sweep(state, &pass.ended).await;
    match route::orphans::sweep(state, &pass.sweep).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(count = n, "ended calls whose handler died with its process"),
        Err(e) => tracing::warn!(error = %e, "could not sweep for orphaned calls"),
    }
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
