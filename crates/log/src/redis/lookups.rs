//! Look-ups off the hot path: what backs "committed" on this Redis (for the
//! operator, at start-up) and request-stream records (for a sweep after a
//! crash).

use bytes::Bytes;
use redis::Value;

use super::{prefix, unavailable, RedisLog};
use crate::LogError;

impl RedisLog {
    /// What backs "committed" on this Redis, in words, and a warning when it
    /// is weaker than docs/protocol.md 6 asks (an acknowledged event survives a
    /// crash: `appendfsync always`, or replicas that `WAIT` counts) or cannot
    /// work (fewer replicas than `WAIT` asks for). `CONFIG` may be disabled on
    /// managed Redis; then the words say "unknown".
    pub async fn durability(&self) -> (String, Option<String>) {
        let mut conn = self.conn.clone();
        let config = |name: &'static str| {
            let mut conn = conn.clone();
            async move {
                let v: Result<Vec<String>, _> = redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async(&mut conn)
                    .await;
                v.ok().and_then(|v| v.get(1).cloned())
            }
        };
        let aof = config("appendonly").await;
        let fsync = config("appendfsync").await;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .unwrap_or_default();
        let replicas: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        let synced = aof.as_deref() == Some("yes") && fsync.as_deref() == Some("always");
        let words = format!(
            "appendonly {}, appendfsync {}, {replicas} replicas connected, WAIT for {}",
            aof.as_deref().unwrap_or("unknown"),
            fsync.as_deref().unwrap_or("unknown"),
            self.replicas
        );
        let warning = if replicas < self.replicas {
            Some(format!(
                "{words}: every append fails with 503 until {} replicas are connected",
                self.replicas
            ))
        } else if !synced && self.replicas == 0 {
            Some(format!(
                "{words}: a Redis crash can take back events clients have seen; run Redis \
                 with appendonly yes and appendfsync always, or with replicas and \
                 --redis-replicas N"
            ))
        } else {
            None
        };
        (words, warning)
    }

    /// [`crate::Log::request_meta`] on Redis: the record is field `m` of the
    /// stream's state hash, gone once retention took the last event.
    pub(super) async fn request_record(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        let p = prefix(id);
        let no_stream = || LogError::NoStream {
            session: id.to_owned(),
            stream: r,
        };
        if r == 0 {
            return Err(no_stream());
        }
        let v: Value = self
            .scripts
            .request_meta
            .key(format!("{p}:s"))
            .key(format!("{p}:st:{r}"))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        let Value::Array(v) = v else {
            return Err(LogError::Corrupt(format!("unexpected reply {v:?}")));
        };
        match v.as_slice() {
            [Value::Int(0), Value::BulkString(m)] => Ok(Bytes::copy_from_slice(m)),
            [Value::Int(-1)] => Err(LogError::NoSession(id.to_owned())),
            [Value::Int(-2)] => Err(no_stream()),
            [Value::Int(-3), Value::Int(c), Value::Int(f)] => Err(LogError::Truncated {
                cursor: 0,
                head: *c as u64,
                floor: *f as u64,
            }),
            other => Err(LogError::Corrupt(format!("unexpected reply {other:?}"))),
        }
    }
}
