//! A cluster connection that replaces itself when it stops answering.
//!
//! The cluster client routes every command through one background task per
//! connection. Under a master killed and brought back (and, on this loaded
//! machine, a second failover when a starved node missed its timeout), that
//! task was seen stuck: every command of the instance timed out for minutes
//! while the cluster was healthy, so the instance never recovered by itself.
//! This wrapper opens a fresh connection (which reads the slot map anew)
//! when a command times out, or when commands have failed without a
//! success for [`FAILING_FOR`]; at most once per [`HEAL_EVERY`]. Commands
//! in flight on the old connection end with their own errors (a 503).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult};

/// Failing without a success this long (not timing out: refused, dropped,
/// cluster down) replaces the connection.
const FAILING_FOR: Duration = Duration::from_secs(3);
/// The least time between two replacements.
const HEAL_EVERY: Duration = Duration::from_secs(5);
/// How long opening a replacement may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

struct State {
    current: ClusterConnection,
    /// When the current run of failures began.
    failing_since: Option<Instant>,
    /// When the connection was last replaced (or opened).
    healed_at: Instant,
}

/// A shared, self-replacing cluster connection; cheap to clone.
#[derive(Clone)]
pub(super) struct Healing {
    inner: Arc<Inner>,
}

struct Inner {
    client: ClusterClient,
    state: Mutex<State>,
    replacing: AtomicBool,
}

impl Healing {
    /// Opens the first connection.
    pub async fn open(client: ClusterClient) -> RedisResult<Self> {
        let current = client.get_async_connection().await?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                state: Mutex::new(State {
                    current,
                    failing_since: None,
                    healed_at: Instant::now(),
                }),
                replacing: AtomicBool::new(false),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection to send on now.
    pub fn current(&self) -> ClusterConnection {
        self.lock().current.clone()
    }

    /// Notes how a command went; starts a replacement when the connection
    /// looks stuck.
    pub fn observe<T>(&self, r: &RedisResult<T>) {
        let e = match r {
            Ok(_) => {
                self.lock().failing_since = None;
                return;
            }
            Err(e) => e,
        };
        if !connection_trouble(e) {
            return; // the server answered (a script error, a refusal): not the connection
        }
        let heal = {
            let mut st = self.lock();
            let since = *st.failing_since.get_or_insert_with(Instant::now);
            (e.is_timeout() || since.elapsed() >= FAILING_FOR)
                && st.healed_at.elapsed() >= HEAL_EVERY
        };
        if heal && !self.inner.replacing.swap(true, Ordering::AcqRel) {
            let this = self.clone();
            tokio::spawn(async move { this.replace().await });
        }
    }

    async fn replace(self) {
        tracing::warn!("Redis Cluster connection not answering; opening a new one");
        let fresh =
            tokio::time::timeout(OPEN_TIMEOUT, self.inner.client.get_async_connection()).await;
        {
            let mut st = self.lock();
            st.healed_at = Instant::now();
            if let Ok(Ok(c)) = fresh {
                st.current = c;
                st.failing_since = None;
            }
        }
        self.inner.replacing.store(false, Ordering::Release);
    }
}

/// Whether `e` says the connection (not the command) is in trouble.
fn connection_trouble(e: &RedisError) -> bool {
    e.is_timeout()
        || e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            redis::ErrorKind::ClusterConnectionNotFound
                | redis::ErrorKind::ClusterDown
                | redis::ErrorKind::MasterDown
        )
}
