//! Look-ups off the hot path: request-stream records (for a sweep after a
//! crash). What backs "committed" is in `durability`.

use bytes::Bytes;
use redis::Value;

use super::{prefix, unavailable, RedisLog};
use crate::LogError;

impl RedisLog {
    /// The request streams of live session `id` that hold something, from
    /// its index (`PREFIX:rs`); a session of an older release, which has
    /// none, lists every number it handed out.
    pub(super) async fn indexed_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        let p = prefix(id);
        let mut conn = self.conn.clone();
        let (e, r, x): (Option<String>, Option<u64>, Option<String>) = redis::cmd("HMGET")
            .arg(format!("{p}:s"))
            .arg("e")
            .arg("r")
            .arg("x")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let (Some("0"), Some(r)) = (e.as_deref(), r) else {
            return Err(LogError::NoSession(id.to_owned()));
        };
        if x.as_deref() != Some("1") {
            return Ok((1..r).collect());
        }
        let mut live: Vec<u64> = redis::cmd("SMEMBERS")
            .arg(format!("{p}:rs"))
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        live.sort_unstable();
        Ok(live)
    }

    /// [`crate::EventLog::request_meta`] on Redis: the record is field `m` of the
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
            .key(format!("{p}:ev:{r}"))
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
            [Value::Int(-6)] => Err(super::layout::older_release_stream(id, r)),
            [Value::Int(-3), Value::Int(c), Value::Int(f)] => Err(LogError::Truncated {
                cursor: 0,
                head: *c as u64,
                floor: *f as u64,
            }),
            other => Err(LogError::Corrupt(format!("unexpected reply {other:?}"))),
        }
    }
}
