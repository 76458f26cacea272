//! The append step of the Redis backend, the commit point: one script that
//! assigns seqs, appends, trims and moves the heads (`scripts::APPEND`),
//! then `WAIT` for the replicas and the move of the committed head `c`
//! that readers see, then the wake-up of followers (inside the script on
//! one server without replicas), of every follower but this instance, whose
//! own readers get the commit from the script's reply (`tail/local.rs`). The age
//! trim of maintenance runs the same script with no events.

use bytes::Bytes;

use super::{now_ms, prefix, tail, unavailable, RedisLog};
use crate::{LogError, Seq, StreamKey};

/// The `owner` of [`RedisLog::append_keyed`] that fences an append on no
/// instance holding the session's lease (`append.lua`).
pub(super) const NOBODY: &str = "-";

impl RedisLog {
    /// Runs the append script on stream `stream` of `id`: appends
    /// `messages` (at most once per `key` when given, [`crate::EventLog::append_once`];
    /// only while `owner` holds the lease when given, [`crate::EventLog::append_fenced`]),
    /// trims by count and to `floor`, at `at_ms`; the reply's head.
    #[allow(clippy::too_many_arguments)]
    async fn run_append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: &[Bytes],
        floor: Seq,
        key: Option<u64>,
        owner: Option<&str>,
        at_ms: u64,
    ) -> Result<(i64, i64), LogError> {
        let p = prefix(id);
        let n = stream.number();
        let mut inv = self.scripts.append.key(format!("{p}:s"));
        inv.key(format!("{p}:st:{n}"))
            .key(format!("{p}:ev:{n}"))
            .key(format!("{p}:pin"))
            .key(format!("{p}:once"))
            .key(format!("{p}:rs"))
            .key(tail::followers_key(&p))
            .arg(n)
            .arg(at_ms)
            // `XADD MAXLEN` takes at most i64::MAX (the seq-id layout's trim).
            .arg(self.retention.max_events.min(i64::MAX as u64))
            .arg(floor)
            .arg(self.commit_at_ack())
            .arg(key.map(|k| k.to_string()).unwrap_or_default())
            .arg(owner.unwrap_or_default())
            .arg(if self.rings_in_script() { "1" } else { "" })
            // Not rung: this instance hands the commit to its own readers
            // from the reply (`tail/local.rs`).
            .arg(self.tails.wake_key());
        for m in messages {
            inv.arg(m.as_ref());
        }
        let r: Vec<i64> = inv
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match r.as_slice() {
            [-1] => Err(LogError::NoSession(id.to_owned())),
            [-2] => Err(LogError::NoStream {
                session: id.to_owned(),
                stream: n,
            }),
            [-4] => Err(LogError::LeaseLost(id.to_owned())),
            [-6] => Err(super::layout::older_release_stream(id, n)),
            [-5] => Err(LogError::Storage(format!(
                "session {id} is stored in the seq-id layout, which only one Redis server without replicas commits; this instance runs on a cluster or with --redis-replicas"
            ))),
            [h, f] => Ok((*h, *f)),
            _ => Err(LogError::Corrupt(format!("unexpected append reply {r:?}"))),
        }
    }

    /// Appends, at most once per `key` and only while `owner` holds the
    /// session's lease, when given; returns once committed.
    pub(super) async fn append_keyed(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: Option<u64>,
        owner: Option<&str>,
    ) -> Result<Seq, LogError> {
        if messages.is_empty() {
            return Ok(self.bounds_of(id, stream).await?.head);
        }
        let p = prefix(id);
        let n = stream.number();
        let at_ms = now_ms();
        let events = format!("{p}:ev:{n}");
        // Made before the script runs: a commit whose outcome this instance
        // never learns still reaches its readers (a read of the stream).
        let local = self.tails.local_commit(id, events.clone());
        let (h, again) = match self
            .run_append(id, stream, &messages, 0, key, owner, at_ms)
            .await
        {
            Ok((h, f)) => (h, f == -3),
            Err(
                e @ (LogError::NoSession(_) | LogError::NoStream { .. } | LogError::LeaseLost(_)),
            ) => {
                local.refused();
                return Err(e);
            }
            // Unknown outcome: `local`'s drop marks the stream for a read.
            Err(e) => return Err(e),
        };
        if self.replicas > 0 {
            // Readers see nothing above `c`, and `c` moves only once the
            // replicas hold the events: nothing sent can be taken back by a
            // failover to a replica.
            self.wait_replicas(id).await?;
            let _: i64 = self
                .scripts
                .commit
                .key(format!("{p}:st:{n}"))
                .arg(h)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(unavailable)?;
        }
        if !self.rings_in_script() {
            // Committed: wake the other instances that follow it (a hint;
            // their safety reads cover a lost one). On one server without
            // replicas the append script did, in the commit's own step.
            tokio::spawn(tail::ring(
                self.conn.clone(),
                p.clone(),
                events,
                self.tails.wake_key().to_owned(),
            ));
        }
        // This instance's own readers, from the reply. A retry of a keyed
        // batch already appended (`again`) leaves `local` to its drop: the
        // stream is read (the first try's commit may have landed after
        // that try stopped waiting).
        if !again {
            let first = (h as u64 + 1).saturating_sub(messages.len() as u64);
            local.committed(first, at_ms, messages);
        }
        Ok(h as u64)
    }

    /// Whether the append script itself wakes a stream's followers: on one
    /// server (a script may not touch a cluster's other slots) whose commit
    /// is the script (no `WAIT` for replicas before the committed head moves).
    pub(super) fn rings_in_script(&self) -> bool {
        !self.cluster() && self.replicas == 0
    }

    /// Trims stream `stream` of `id` to `floor` (age retention), never past
    /// a pin; whether the floor reached `floor` (`false` when a pin held it
    /// back, or the session ended meanwhile).
    pub(super) async fn trim_to(
        &self,
        id: &str,
        stream: StreamKey,
        floor: Seq,
    ) -> Result<bool, LogError> {
        match self
            .run_append(id, stream, &[], floor, None, None, now_ms())
            .await
        {
            Ok((_, reached)) => Ok(reached >= floor as i64),
            // Ended (or never opened) meanwhile: nothing to trim.
            Err(LogError::NoSession(_) | LogError::NoStream { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
