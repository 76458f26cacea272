//! The tail on one Redis server: one blocking `XREAD` per shard over every
//! stream it follows and its wake stream (a new stream interrupts it), from
//! each stream's own last seq, delivered up to the committed head.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::reply;
use super::{xread_blocking, Shard, BLOCK_MS, END_BACKSTOP};
use crate::subscription::EndReason;

impl Shard {
    /// Follows this shard's streams until none is left or the log closes
    /// (on a cluster: [`super::poll`]).
    pub(super) async fn run(self: Arc<Self>) {
        let Some(client) = self.client.clone() else {
            return self.poll().await;
        };
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(super::super::CONNECT_TIMEOUT)
            .set_response_timeout(super::super::RESPONSE_TIMEOUT);
        let mut blocking = match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "Redis tail could not connect");
                return self.end_everything(EndReason::Unavailable);
            }
        };
        let mut wake_last = "0-0".to_owned();
        let mut checked = Instant::now();
        let mut held_for = Duration::from_millis(1);
        loop {
            let Some(keys) = self.followed() else { return };
            let mut cmd = xread_blocking(BLOCK_MS);
            cmd.arg(&self.wake);
            for (k, _) in &keys {
                cmd.arg(k);
            }
            cmd.arg(&wake_last);
            for (_, last) in &keys {
                cmd.arg(format!("{last}-0"));
            }
            let reply: redis::Value = match cmd.query_async(&mut blocking).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "Redis tail lost; ending its readers");
                    return self.end_everything(EndReason::Unavailable);
                }
            };
            let mut batches = Vec::new();
            for (key, entries) in reply::by_key(&reply) {
                if key == self.wake.as_bytes() {
                    if let Some(id) = reply::last_id(entries) {
                        wake_last = id;
                    }
                    continue;
                }
                match reply::entries(entries) {
                    Ok(events) => batches.push((String::from_utf8_lossy(key).into_owned(), events)),
                    Err(e) => {
                        tracing::error!(error = %e, "unreadable Redis stream entry");
                        return self.end_everything(EndReason::Unavailable);
                    }
                }
            }
            // Appended but not yet acknowledged by the replicas: looked at
            // again shortly, backing off while it lasts (replicas away, an
            // append's WAIT failed).
            if self
                .hand_on_backing_off(batches, &mut held_for)
                .await
                .is_none()
            {
                return;
            }
            if checked.elapsed() >= END_BACKSTOP {
                checked = Instant::now();
                self.end_ended_sessions().await;
            }
        }
    }
}
