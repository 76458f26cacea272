//! Trying the log again: one loop for every write that must land (a call's
//! answer, a request stream's opening, a task's events, the orphan sweep),
//! backing off while the log answers `Unavailable` or a storage error.

use std::future::Future;
use std::time::{Duration, Instant};

use mcp_resume_log::LogError;
use tokio::sync::watch;

/// The first pause between attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between attempts under a deadline (five times this without one).
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Whether an operation that failed with `e` may succeed if tried again.
pub(crate) fn retryable(e: &LogError) -> bool {
    matches!(e, LogError::Unavailable(_) | LogError::Storage(_))
}

/// Runs `attempt`, again after a pause while its failure is [`retryable`]:
/// until `deadline` (backing off to 2 s; a deadline already past makes one
/// attempt), or without one until it succeeds (backing off to 10 s); the
/// server stopping (`shutdown` turning true) ends it. The last failure when
/// it gives up. What `attempt` does must be safe to repeat when an
/// attempt's outcome is unknown (an append under one key, a read, a
/// subscription).
pub(crate) async fn retrying<T, F, Fut>(
    shutdown: Option<&watch::Receiver<bool>>,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<T, LogError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LogError>>,
{
    let max = if deadline.is_some() {
        MAX_BACKOFF
    } else {
        5 * MAX_BACKOFF
    };
    let mut backoff = FIRST_BACKOFF;
    loop {
        let e = match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let in_time = deadline.is_none_or(|d| Instant::now() + backoff < d);
        if !retryable(&e) || !in_time {
            return Err(e);
        }
        tracing::debug!(error = %e, "trying the log again after a pause");
        if !pause(shutdown, &mut backoff, max).await {
            return Err(e);
        }
    }
}

/// Sleeps `backoff` (then doubles it, up to `max`); false if the server
/// began stopping meanwhile.
async fn pause(
    shutdown: Option<&watch::Receiver<bool>>,
    backoff: &mut Duration,
    max: Duration,
) -> bool {
    match shutdown {
        Some(s) => {
            let mut s = s.clone();
            if *s.borrow() {
                return false;
            }
            tokio::select! {
                _ = tokio::time::sleep(*backoff) => {}
                _ = s.wait_for(|stop| *stop) => return false,
            }
        }
        None => tokio::time::sleep(*backoff).await,
    }
    *backoff = (*backoff * 2).min(max);
    true
}
