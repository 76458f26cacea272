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

/// Runs until the server stops.
pub(crate) async fn run(state: AppState) {
    let mut shutdown = state.shutdown.clone();
    // The first pass waits out an unavailable log: calls whose handler died
    // with an earlier process must not wait for a client to resume them.
    let mut outcome = route::reply::retrying(&state, None, || pass(&state)).await;
    // Whether the last pass parked or closed routes: their handlers' memory
    // is freed as their tasks end, after the pass, so it is given back to
    // the OS on this pass and the next.
    let mut released = false;
    loop {
        let now = match outcome {
            Ok(pass) => after(&state, pass).await,
            Err(e) => {
                tracing::warn!(error = %e, "maintenance failed");
                false
            }
        };
        if now || released {
            give_back_freed_memory();
        }
        released = now;
        tokio::select! {
            _ = tokio::time::sleep(state.config.maintenance_interval) => {}
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

/// What the server does with a pass: closes the routes of ended sessions
/// and ends the orphaned calls of the sessions handed over. Whether it
/// parked or closed any route.
async fn after(state: &AppState, pass: Pass) -> bool {
    if !pass.ended.is_empty() {
        tracing::info!(count = pass.ended.len(), "idle sessions ended");
    }
    let released = state.routes.sweep(state, &pass.ended).await > 0;
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
/// the free pages of every arena. At most once a maintenance pass, and only
/// on the two passes after routes were released.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages to the OS; it touches no
    // memory in use and is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}
