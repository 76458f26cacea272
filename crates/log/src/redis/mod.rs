//! The Redis backend: many server instances serve one session.
//!
//! Seq assignment, append, retention and head update are one Lua script, so
//! they are atomic in Redis. Events live in a Redis stream per log stream,
//! with entry id `SEQ-0` or, in the seq-id layout, `0-SEQ` ([`layout`]), so
//! a replay is `XRANGE` and the tail after the head a read from the entry
//! after it, which cannot miss an entry appended between the two: the
//! stream itself is the cursor's ground truth. An instance reads
//! the tails of all its readers' streams over a few shared connections
//! ([`tail`]), not one per reader. "Committed" is acknowledged by Redis, plus
//! `WAIT` for the configured number of replicas.
//!
//! Keys carry the session id in a hash tag (`mcpr:{id}:...`); their layout
//! is one table in `README.md` beside this file, and the scripts that write
//! them are `lua/*.lua` ([`scripts`]). [`adopt`] lists the tombstones older
//! versions left unlisted; [`live`] splits the indexes into 64 buckets on a
//! cluster; [`instance`] keeps the heartbeat; [`buckets`] divides
//! maintenance among the instances.
//!
//! On a Redis Cluster (`redis-cluster://`) every key of a session shares the
//! slot of its hash tag, so each script still runs atomically on that slot's
//! master; `WAIT` goes to that master ([`conn`]); what spans slots is named
//! in [`live`] and [`tail`], with its cost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redis::Value;

use conn::Conn;

use crate::types::now_ms;
mod adopt;
mod append;
mod buckets;
mod conn;
mod durability;
mod heal;
mod hooks;
mod instance;
mod layout;
mod leases;
mod live;
mod lookups;
mod maintain;
mod open;
mod records;
mod reply;
mod scripts;
mod tail;
mod touched;

use layout::Layout;
use scripts::Scripts;

use crate::{
    Bounds, Event, EventLog, Leases, LogError, Maintenance, Pass, PinId, Retention, Seq, StreamKey,
    Subscription,
};

/// How long a connection attempt to Redis may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long any one command may take, `WAIT` (1 s) and `XREAD BLOCK` (0.5 s) included.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

fn prefix(id: &str) -> String {
    format!("mcpr:{{{id}}}")
}

fn unavailable(e: redis::RedisError) -> LogError {
    LogError::Unavailable(e.to_string())
}

/// The log on a Redis server shared by every instance.
pub struct RedisLog {
    conn: Conn,
    retention: Retention,
    replicas: usize,
    closed: Arc<AtomicBool>,
    scripts: Arc<Scripts>,
    tails: tail::Tails,
    /// Sessions this handle touched within the coalescing time ([`touched`]).
    touched: Arc<touched::Touched>,
    /// The live sessions as last counted ([`live::LiveCount`]).
    live_count: live::LiveCount,
    faults: crate::retention::ReadFaults,
    /// For tests: ms a new reader waits between its bounds and joining its
    /// shard ([`RedisLog::hold_joins`]).
    join_hold_ms: std::sync::atomic::AtomicU64,
    heartbeat: instance::Heartbeat,
    /// Where maintenance's sweep for tombstones without an end time goes on.
    sweep: adopt::Sweep,
    /// The maintenance buckets this handle held at its last pass.
    held: buckets::Held,
    /// When each session this handle maintains may next hold an event past
    /// the age limit ([`maintain`]).
    due: maintain::Due,
    /// When this handle last walked its sessions' state ([`maintain`]).
    walks: maintain::Walks,
    /// The operator allows new sessions in the seq-id layout
    /// ([`RedisLog::set_seq_ids`]).
    seq_ids: AtomicBool,
}

impl RedisLog {
    async fn bounds_of(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError> {
        Ok(self.bounds_registering(id, stream, None).await?.0)
    }

    /// [`Self::bounds_of`] and the layout of the session's streams
    /// ([`layout`]), registering `follow` (a follower set and this
    /// instance's member: a new reader's, `tail::Tails::prepare`) in the
    /// same step when the session is live and the stream exists.
    async fn bounds_registering(
        &self,
        id: &str,
        stream: StreamKey,
        follow: Option<(&str, &str)>,
    ) -> Result<(Bounds, Layout), LogError> {
        let p = prefix(id);
        let n = stream.number();
        let mut inv = self.scripts.bounds.key(format!("{p}:s"));
        inv.key(format!("{p}:st:{n}"))
            .key(format!("{p}:ev:{n}"))
            .arg(n);
        if let Some((followers, member)) = follow {
            inv.key(followers).arg(member);
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
            [-6] => Err(layout::older_release_stream(id, n)),
            [h, f, l] => Ok((Bounds::new(*h as u64, *f as u64), Layout::from_reply(*l)?)),
            _ => Err(LogError::Corrupt(format!("unexpected bounds reply {r:?}"))),
        }
    }

    /// Opens a request stream of `id` with record `meta`; with `owner`,
    /// only while that instance holds the session's lease (`None` when it
    /// does not, [`Leases::open_carrier`]).
    async fn open_request(
        &self,
        id: &str,
        meta: Bytes,
        owner: Option<&str>,
        max: u64,
    ) -> Result<Option<u64>, LogError> {
        let p = prefix(id);
        let r: i64 = self
            .scripts
            .open_request
            .key(format!("{p}:s"))
            .arg(&p)
            .arg(meta.as_ref())
            .arg(owner.unwrap_or_default())
            .arg(max)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match r {
            -1 => Err(LogError::NoSession(id.to_owned())),
            -2 => Ok(None),
            -3 => Err(LogError::TooManyStreams {
                session: id.to_owned(),
                max,
            }),
            r if r < 0 => Err(LogError::Corrupt(format!("unexpected open reply {r}"))),
            r => {
                self.wait_replicas(id).await?;
                Ok(Some(r as u64))
            }
        }
    }

    /// Ends session `id`, unless `used_after` (Unix ms) is given and the
    /// session was used after it: checked in the same step as the end, so
    /// a client that comes back while idle expiry decides never loses its
    /// session. Whether it ended it (`false`: used since).
    async fn end_unless_used_since(
        &self,
        id: &str,
        used_after: Option<u64>,
    ) -> Result<bool, LogError> {
        let p = prefix(id);
        let at = now_ms();
        let mut inv = self.scripts.end.key(format!("{p}:s"));
        if !self.cluster() {
            inv.key(live::LIVE).key(live::ENDED).key(tail::ENDINGS);
        }
        let r: i64 = inv
            .arg(&p)
            .arg(id)
            .arg(at)
            .arg(used_after.map(|t| t.to_string()).unwrap_or_default())
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match r {
            -2 => return Ok(false),
            r if r < 0 => return Err(LogError::NoSession(id.to_owned())),
            _ => {}
        }
        self.touched.forget(id);
        self.live_count.adjust(-1);
        self.list_ended(id, at).await?;
        if self.cluster() {
            // Lost with a crash right here: readers elsewhere then end at
            // their tail's backstop check instead of at once.
            let _: Result<String, _> = tail::end_notice(id)
                .query_async(&mut self.conn.clone())
                .await;
        }
        self.wait_replicas(id).await?;
        Ok(true)
    }

    /// Sets one field of a live session's hash; `NoSession` otherwise.
    async fn hset_if_live(
        &self,
        id: &str,
        field: &str,
        value: impl redis::ToRedisArgs,
    ) -> Result<(), LogError> {
        let r: i64 = self
            .scripts
            .if_live_hset
            .key(format!("{}:s", prefix(id)))
            .arg(field)
            .arg(value)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if r < 0 {
            return Err(LogError::NoSession(id.to_owned()));
        }
        Ok(())
    }
}

#[async_trait]
impl EventLog for RedisLog {
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError> {
        let r = self.open_request(id, meta, None, max).await?;
        Ok(r.expect("an open with no owner to check is never refused for one"))
    }

    async fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError> {
        self.request_record(id, r).await
    }

    async fn request_streams(&self, id: &str) -> Result<u64, LogError> {
        let (e, r): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(format!("{}:s", prefix(id)))
            .arg("e")
            .arg("r")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match (e.as_deref(), r) {
            (Some("0"), Some(r)) => Ok(r.saturating_sub(1)),
            _ => Err(LogError::NoSession(id.to_owned())),
        }
    }

    async fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError> {
        self.indexed_request_streams(id).await
    }

    async fn retire_request_stream(&self, id: &str, r: u64) -> Result<(), LogError> {
        if r == 0 {
            return Ok(());
        }
        let p = prefix(id);
        let done: i64 = self
            .scripts
            .retire
            .key(format!("{p}:s"))
            .key(format!("{p}:st:{r}"))
            .key(format!("{p}:ev:{r}"))
            .key(format!("{p}:rs"))
            .key(tail::followers_key(&p))
            .arg(r)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        if done < 0 {
            return Err(LogError::NoSession(id.to_owned()));
        }
        Ok(())
    }

    async fn append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError> {
        self.append_keyed(id, stream, messages, None, None).await
    }

    async fn append_once(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        self.append_keyed(id, stream, messages, Some(key), None)
            .await
    }

    async fn append_fenced(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        let me = self.instance().to_owned();
        self.append_keyed(id, stream, messages, Some(key), Some(&me))
            .await
    }

    async fn append_if_held_by(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
        holder: Option<&str>,
    ) -> Result<Seq, LogError> {
        let holder = holder.unwrap_or(append::NOBODY);
        self.append_keyed(id, stream, messages, Some(key), Some(holder))
            .await
    }

    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError> {
        self.faults.check()?;
        let (b, layout) = self.bounds_registering(id, stream, None).await?;
        b.admit(after).map_err(LogError::from_discontinuity)?;
        if after == b.head {
            return Ok(Vec::new());
        }
        let upper = b.head.min(after.saturating_add(max as u64));
        let v: Value = redis::cmd("XRANGE")
            .arg(format!("{}:ev:{}", prefix(id), stream.number()))
            .arg(layout.id(after + 1))
            .arg(layout.id(upper))
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        let out = reply::entries(&v)?;
        if out.first().map(|e| e.seq) != Some(after + 1) || out.len() as u64 != upper - after {
            let now = self.bounds_of(id, stream).await?;
            return Err(LogError::Truncated {
                cursor: after,
                head: now.head,
                floor: now.floor,
            });
        }
        Ok(out)
    }

    async fn bounds(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError> {
        self.bounds_of(id, stream).await
    }

    async fn subscribe(
        &self,
        id: &str,
        stream: StreamKey,
    ) -> Result<(Bounds, Subscription), LogError> {
        // The commit point: C is committed in Redis, and the shard reads the
        // stream from at most C, so it sees every entry after it. Its
        // script registers this instance as the stream's follower in the
        // same step: one round trip, and the stream is read on joining only
        // when something may have passed the reader by (`tail/join.rs`).
        let (p, n) = (prefix(id), stream.number());
        let joining = self.tails.prepare(id, format!("{p}:ev:{n}")).await;
        let (b, layout) = self
            .bounds_registering(id, stream, joining.registration())
            .await?;
        let hold = self.join_hold_ms.load(Ordering::Relaxed);
        if hold > 0 {
            tokio::time::sleep(Duration::from_millis(hold)).await;
        }
        let (head, sub) = self
            .tails
            .join(joining, id, format!("{p}:st:{n}"), b.head, layout);
        Ok((Bounds::new(head, b.floor), sub))
    }

    async fn pin(
        &self,
        id: &str,
        stream: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError> {
        // A random id: unique among a session's few pins without a counter
        // (a round trip, and a key outside the session's slot).
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).map_err(|e| LogError::Unavailable(e.to_string()))?;
        let pin = u64::from_le_bytes(b) >> 1;
        let p = prefix(id);
        let until = now_ms() + ttl.as_millis() as u64;
        let r: i64 = self
            .scripts
            .pin
            .key(format!("{p}:s"))
            .key(format!("{p}:st:{}", stream.number()))
            .key(format!("{p}:pin"))
            .arg(pin)
            .arg(format!("{}:{seq}:{until}", stream.number()))
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        match r {
            -1 => return Err(LogError::NoSession(id.to_owned())),
            -2 => {
                return Err(LogError::NoStream {
                    session: id.to_owned(),
                    stream: stream.number(),
                })
            }
            _ => {}
        }
        Ok(PinId(pin))
    }

    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError> {
        let _: () = redis::cmd("HDEL")
            .arg(format!("{}:pin", prefix(id)))
            .arg(pin.0)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

#[async_trait]
impl Maintenance for RedisLog {
    async fn maintain(&self, idle: Duration, tombstone_ttl: Duration) -> Result<Pass, LogError> {
        let share = self.share().await?;
        let ended = self.trim_and_end_idle(&share, idle).await?;
        self.forget_tombstones(&share, tombstone_ttl).await?;
        let sweep = self.live_ids_in(share.sweep).await?;
        self.swept();
        // Ended, reconciled and forgotten sessions: counted afresh.
        self.live_count.forget();
        Ok(Pass {
            ended,
            sweep,
            buckets: share.held.count_ones() as u16,
        })
    }

    async fn watch(&self) -> Result<Vec<String>, LogError> {
        let share = self.share().await?;
        let sweep = self.live_ids_in(share.sweep).await?;
        self.swept();
        Ok(sweep)
    }

    async fn close(&self) -> Result<(), LogError> {
        self.closed.store(true, Ordering::Relaxed);
        self.tails.close();
        // Its wake stream goes now, not at its expiry: until then every
        // commit to a stream it followed would still add to it (best
        // effort; the next commit drops each registration it finds gone).
        let _: Result<i64, _> = redis::cmd("DEL")
            .arg(self.tails.wake_key())
            .query_async(&mut self.conn.clone())
            .await;
        self.heartbeat.stop(&mut self.conn.clone()).await
    }
}
