//! The disk log's housekeeping: age retention (never past a stream it
//! cannot read), idle expiry, forgetting old tombstones.

use std::time::Duration;

use async_trait::async_trait;

use super::commit::Op;
use super::DiskLog;
use crate::hub::lock;
use crate::types::now_ms;
use crate::{LogError, Maintenance, Pass, SessionRecords, StreamKey, BUCKETS};

#[async_trait]
impl Maintenance for DiskLog {
    async fn maintain(&self, idle: Duration, tombstone_ttl: Duration) -> Result<Pass, LogError> {
        let cutoff = now_ms().saturating_sub(self.hub.retention.max_age.as_millis() as u64);
        for (id, cell) in self.hub.live_cells() {
            let keys: Vec<StreamKey> = lock(&cell)
                .streams
                .keys()
                .map(|n| StreamKey::from_number(*n))
                .collect();
            for key in keys {
                let Ok(b) = self.hub.bounds(&id, key) else {
                    continue;
                };
                let floor = match crate::retention::first_young(self, &id, key, b, cutoff).await {
                    Ok(floor) => floor,
                    Err(e) => {
                        tracing::warn!(session = %id, stream = key.number(), error = %e,
                            "age retention skipped a stream it could not read");
                        continue;
                    }
                };
                if floor > b.floor {
                    self.submit(|reply| Op::Trim {
                        id: id.clone(),
                        stream: key,
                        floor,
                        reply,
                    })
                    .await?;
                }
            }
        }
        self.hub.retire_emptied();
        let idle_ids = self.hub.idle_sessions(idle);
        for id in &idle_ids {
            let _ = self.end_session(id).await;
        }
        let expired = self.hub.expired_tombstones(tombstone_ttl);
        for ids in expired.chunks(1024) {
            self.submit(|reply| Op::Forget {
                ids: ids.to_vec(),
                reply,
            })
            .await?;
        }
        Ok(Pass {
            ended: idle_ids,
            sweep: self.hub.first_sweep(),
            buckets: BUCKETS,
        })
    }

    async fn close(&self) -> Result<(), LogError> {
        self.hub.close_all();
        Ok(())
    }
}
