//! The session log: every server-to-client message of a session gets a
//! contiguous seq here, durably, before any reader can see it.
//!
//! Readers never receive pushes from the transport; they read this log from a
//! cursor. [`EventLog::subscribe`] is the commit point of docs/protocol.md 5.2
//! step 4: it returns the committed head `C` together with a tail that yields
//! every event after `C`, so a reader that replays up to `C` and then follows
//! the tail cannot miss or repeat anything.
//!
//! The contract every backend keeps (one suite, `tests/contract/`, runs on
//! each):
//!
//! - a stream's seqs are contiguous from 1, never reused, never reordered;
//!   `append` returns once its events are committed (docs/protocol.md 6), and
//!   only committed events are read or named;
//! - retention trims by count and age but never at or past a pin; a read below
//!   the floor is `Truncated`, above the head `Ahead`, in a range damaged
//!   storage lost `DataLost`: an error, never a shorter answer;
//! - what a subscriber is handed is bounded (a buffer per subscription): one
//!   that falls behind is ended as lagged at its cursor, never skipped;
//! - an ended session's id is never re-created until maintenance forgets it
//!   (`tombstone_ttl`).
//!
//! The log knows no principals: which principal a session belongs to is the
//! server's record in the session's metadata, and every session's streams live
//! side by side in one log.
//!
//! Backends: [`MemoryLog`] (nothing survives a restart) and [`DiskLog`] (cargo
//! feature `disk`, the default: fjall, fsync'd group commit) share the
//! in-process `hub` that fans committed events out to subscribers;
//! [`RedisLog`] (feature `redis`: one Redis or a Redis Cluster) is shared by
//! any number of instances, each following its readers' streams over a few
//! shared connections.
#![deny(missing_docs)]

#[cfg(feature = "disk")]
mod disk;
mod error;
mod hub;
mod memory;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "disk", feature = "redis"))]
mod retention;
mod subscription;
mod types;

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

#[cfg(feature = "disk")]
pub use disk::{Damage, DamageKind, DiskLog};
pub use error::LogError;
pub use memory::MemoryLog;
#[cfg(feature = "redis")]
pub use redis::RedisLog;
pub use subscription::Subscription;
pub use types::{Bounds, Event, Pass, PinId, Retention, Seq, SessionInfo, StreamKey, BUCKETS};

/// A per-session, ordered log of server-to-client messages.
///
/// Every method that names a session answers [`LogError::NoSession`] for one
/// that never existed or has ended. Appends return only once the events are
/// committed in the backend's sense (docs/protocol.md 6), and only committed events
/// are ever readable.
///
/// It is four traits by role ([`EventLog`], [`SessionRecords`], [`Leases`],
/// [`Maintenance`]), each implemented on its own; `Log` is their sum, with a
/// blanket implementation, and what the server holds (`Arc<dyn Log>`).
pub trait Log: EventLog + SessionRecords + Leases + Maintenance {}

impl<T: EventLog + SessionRecords + Leases + Maintenance + ?Sized> Log for T {}

/// The event log: streams of a session (its session stream and request
/// streams), each a contiguous run of seqs, appended, read, followed from
/// a commit point ([`EventLog::subscribe`]) and pinned against retention.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Opens a new request stream and returns its number `R` (1, 2, 3 ...).
    ///
    /// `meta` is the owner's opaque record of the call (the server keeps the
    /// JSON-RPC request id and the instance that runs the handler), committed
    /// with the stream as durably as events, so that after a crash another
    /// process can find and end calls whose handler died.
    ///
    /// A session that opened `max` request streams already is refused with
    /// [`LogError::TooManyStreams`], checked in the same step as the open
    /// and writing nothing: a client that keeps calling past its limit
    /// grows neither the log nor the stream numbers.
    async fn open_request_stream(&self, id: &str, meta: Bytes, max: u64) -> Result<u64, LogError>;

    /// The record request stream `r` was opened with. [`LogError::NoStream`]
    /// for an `r` never opened; [`LogError::Truncated`] once retention has
    /// taken every event of the stream: the record goes with them.
    async fn request_meta(&self, id: &str, r: u64) -> Result<Bytes, LogError>;

    /// How many request streams the session has opened: the highest `R`
    /// (numbers are never reused), so a reader of new records goes on from
    /// the last it read.
    async fn request_streams(&self, id: &str) -> Result<u64, LogError>;

    /// The request streams of the session that still hold something: not
    /// emptied by retention, not [retired](EventLog::retire_request_stream);
    /// ascending. What the orphan sweep and maintenance visit, so their cost
    /// follows what is retained, not every stream the session ever opened.
    async fn live_request_streams(&self, id: &str) -> Result<Vec<u64>, LogError>;

    /// Deletes request stream `r` with its record and events, for a stream
    /// nobody will read again: the carrier of a forwarded message, once the
    /// instance it was for has read it. Reads of it then answer
    /// [`LogError::NoStream`]; its number is not handed out again. A log that
    /// serves one process may keep it until the session ends (it says so).
    async fn retire_request_stream(&self, id: &str, r: u64) -> Result<(), LogError>;

    /// Appends a batch of JSON-RPC messages to one stream; returns the seq of
    /// the last one once all are committed. An empty batch returns the head.
    async fn append(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
    ) -> Result<Seq, LogError>;

    /// [`EventLog::append`], at most once per `key` (a random number the caller
    /// keeps for one batch): a retry after an error whose outcome is unknown
    /// (a connection lost mid-call, a replica acknowledgement that timed
    /// out, after which the events may still become visible) returns the
    /// head of the attempt that went through instead of appending the batch
    /// again. Keys are remembered about ten minutes. The default appends: a
    /// log of one process commits nothing when it refuses an append.
    async fn append_once(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        let _ = key;
        self.append(id, stream, messages).await
    }

    /// [`EventLog::append_once`] on behalf of this handle's lease on the session
    /// ([`Leases::claim`]): nothing is appended, [`LogError::LeaseLost`], unless
    /// this handle holds the lease when the append runs, checked atomically
    /// with it. The fence of an owner that stalled while another instance
    /// took its sessions over: two owners never both commit. A log of one
    /// process keeps no leases: [`EventLog::append_once`].
    async fn append_fenced(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
    ) -> Result<Seq, LogError> {
        self.append_once(id, stream, messages, key).await
    }

    /// [`EventLog::append_once`] only while `holder` holds the session's
    /// lease (`None`: while no instance does), checked atomically with it:
    /// [`LogError::LeaseLost`] otherwise. How an instance that is not the
    /// lease holder ends a call of an instance that lost the lease when the
    /// holder cannot (it died, or nobody holds it): the end is committed
    /// only while that is still so, and otherwise the holder, which can, does
    /// it; nothing is ever committed onto a live holder's streams by another
    /// instance. A log of one process keeps no leases: [`EventLog::append_once`].
    async fn append_if_held_by(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        key: u64,
        holder: Option<&str>,
    ) -> Result<Seq, LogError> {
        let _ = holder;
        self.append_once(id, stream, messages, key).await
    }

    /// [`EventLog::append`] to a session that may not exist yet: where the
    /// log can create it and append in one commit (the disk log), a session
    /// that never existed is created first, with `meta` as its record. The default
    /// creates nothing and answers [`LogError::NoSession`] as `append` does;
    /// the caller then creates the session and appends again. Either way a
    /// session that ended is not created again while its tombstone is kept
    /// (as [`SessionRecords::create_session`] refuses it): its append is
    /// `NoSession`. Only the session stream of a new session can be
    /// appended to; for a request stream this is `append`.
    ///
    /// Why: a store whose every stream is a session of its own (rmcp's
    /// request streams, `mcp-resume-rmcp`) otherwise pays a refused append,
    /// a creation and the append, one commit after another, per stream;
    /// and a record known at the first event (the stream's owner) costs no
    /// commit of its own.
    async fn append_or_create(
        &self,
        id: &str,
        stream: StreamKey,
        messages: Vec<Bytes>,
        meta: Bytes,
    ) -> Result<Seq, LogError> {
        let _ = meta;
        self.append(id, stream, messages).await
    }

    /// Up to `max` committed events after `after`, in order.
    ///
    /// `after` above the head is [`LogError::Ahead`]; below `floor - 1` is
    /// [`LogError::Truncated`]: a read never starts later than asked.
    async fn read(
        &self,
        id: &str,
        stream: StreamKey,
        after: Seq,
        max: usize,
    ) -> Result<Vec<Event>, LogError>;

    /// The committed head and the retained floor.
    async fn bounds(&self, id: &str, stream: StreamKey) -> Result<Bounds, LogError>;

    /// The commit point: the head `C` and a tail of every event after `C`.
    async fn subscribe(
        &self,
        id: &str,
        stream: StreamKey,
    ) -> Result<(Bounds, Subscription), LogError>;

    /// Holds retention from trimming `seq` or later until `ttl` passes or [`EventLog::unpin`].
    async fn pin(
        &self,
        id: &str,
        stream: StreamKey,
        seq: Seq,
        ttl: Duration,
    ) -> Result<PinId, LogError>;

    /// Releases a pin; releasing one that is gone is not an error.
    async fn unpin(&self, id: &str, pin: PinId) -> Result<(), LogError>;
}

/// Sessions and their records: created, touched, ended, and the opaque
/// record (`meta`) the server keeps for each, replaced whole or by
/// compare-and-set.
#[async_trait]
pub trait SessionRecords: Send + Sync + 'static {
    /// Registers a new session with opaque metadata (the server's own record).
    async fn create_session(&self, id: &str, meta: Bytes) -> Result<(), LogError>;

    /// The session's record; also how a server checks that a session is live.
    async fn session(&self, id: &str) -> Result<SessionInfo, LogError>;

    /// Replaces the session's metadata (for example its tool list).
    async fn set_meta(&self, id: &str, meta: Bytes) -> Result<(), LogError>;

    /// Replaces the session's metadata with `meta` only if it is still
    /// `expect`, atomically; whether it did. The compare-and-set by which
    /// several writers (a durable task's owner, and `tasks/update` or
    /// `tasks/cancel` on any instance) change one record without losing each
    /// other's change: a writer that gets `false` reads the record again.
    async fn swap_meta(&self, id: &str, expect: Bytes, meta: Bytes) -> Result<bool, LogError>;

    /// How many sessions are live now (for caps and metrics).
    async fn live_sessions(&self) -> usize;

    /// Marks the session as used now, postponing idle expiry.
    async fn touch(&self, id: &str) -> Result<(), LogError>;

    /// Ends the session: its streams go, its subscribers end, its id stays dead.
    async fn end_session(&self, id: &str) -> Result<(), LogError>;

    /// The ids of the live sessions, for a sweep at start-up.
    async fn session_ids(&self) -> Result<Vec<String>, LogError>;
}

/// This handle among the instances that share the log: its identity,
/// whether another instance is alive, and the owner leases of sessions
/// whose backend must run on one instance at a time. A log of one process
/// keeps the defaults: every session is this instance's.
#[async_trait]
pub trait Leases: Send + Sync + 'static {
    /// This log handle's instance: a random id made when it was opened (a
    /// new one per process start), to store as the owner of calls.
    fn instance(&self) -> &str;

    /// Whether the handle with that instance id may still be running calls.
    /// Memory and disk logs belong to one process: only their own instance is
    /// alive. On Redis every handle keeps a heartbeat key that expires about
    /// 10 s after its process dies or at once on [`Maintenance::close`].
    async fn instance_alive(&self, instance: &str) -> Result<bool, LogError>;

    /// The instance that owns session `id`: the one lease holder that may run
    /// state that cannot be shared (a child process behind a gateway). A
    /// session's owner stays its owner while its handle is alive
    /// ([`Leases::instance_alive`]); once it is not, the next claim takes the
    /// lease for this handle. Two instances claiming at once get the same
    /// answer.
    ///
    /// `None`: this log belongs to one process (memory, disk), so every
    /// session is this instance's and no lease is kept. A log shared by
    /// instances (Redis) must override it.
    async fn claim(&self, id: &str) -> Result<Option<String>, LogError> {
        let _ = id;
        Ok(None)
    }

    /// Whether other processes share this log (Redis): then a session's
    /// messages may reach any instance, and one instance hands another what
    /// it must handle through the log. A log of one process: false.
    fn shared(&self) -> bool {
        false
    }

    /// Whether the leases this handle won ([`Leases::claim`]) are certainly
    /// still its own. On Redis: false once its heartbeat has gone unrefreshed
    /// for 7 s (a process frozen, a network cut), 3 s before the heartbeat
    /// expires and another instance may claim them. A log of one process
    /// holds no leases: always true.
    fn leases_fresh(&self) -> bool {
        true
    }

    /// Grows by one each time this handle's leases may have lapsed (its
    /// heartbeat came back after [`Leases::leases_fresh`] was false, or
    /// came back to find its key gone: evicted, or expired under a stall).
    /// Whatever runs under a lease won in an older epoch must stop: another
    /// instance may run it now. Always 0 for a log of one process.
    fn lease_epoch(&self) -> u64 {
        0
    }

    /// The instance that holds session `id`'s lease in the log now, without
    /// claiming it; `None` when nobody does (never claimed, given up, or the
    /// session ended). A log of one process: this instance.
    async fn lease_holder(&self, id: &str) -> Result<Option<String>, LogError> {
        let _ = id;
        Ok(Some(self.instance().to_owned()))
    }

    /// Whether this handle holds session `id`'s lease in the log now: the
    /// owner the log names, not only this handle's freshness (a claim a
    /// failover took back, or a lease another instance took after this
    /// handle's heartbeat key was evicted, leaves [`Leases::leases_fresh`]
    /// true). What a lease holder checks before it acts on the session
    /// without a fenced commit ([`EventLog::append_fenced`]) vouching for it,
    /// such as handing a client an answer that was not committed. A log of
    /// one process: always true.
    async fn holds(&self, id: &str) -> Result<bool, LogError> {
        Ok(self.lease_holder(id).await?.as_deref() == Some(self.instance()))
    }

    /// Gives up this handle's lease on session `id`, so that the next
    /// claim, by any instance, takes it at once instead of after this
    /// handle's heartbeat expires: the graceful stop of an owner. Only if
    /// nothing was forwarded to it unread: `seen` is how many request
    /// streams the caller has read ([`EventLog::request_streams`] when it
    /// last read them); if the session opened more since, nothing is given
    /// up (`Ok(false)`) and the caller reads them first. `None` gives it up
    /// whatever was opened since (what is forwarded to it after that is the
    /// caller's to end). `Ok(true)` also when this handle does not hold the
    /// lease. A log of one process keeps no leases: `Ok(true)`.
    async fn release(&self, id: &str, seen: Option<u64>) -> Result<bool, LogError> {
        let _ = (id, seen);
        Ok(true)
    }

    /// Opens a request stream carrying a message forwarded to the lease
    /// holder `owner` ([`EventLog::open_request_stream`] with `meta`), only
    /// while `owner` still holds session `id`'s lease, checked atomically
    /// with the open: `Ok(None)` when it does not (it gave the lease up with
    /// [`Leases::release`], or another instance took it), and the forwarder
    /// finds the owner again. So a released lease never leaves a message
    /// forwarded to an instance that will not read it. A log of one process
    /// forwards nothing: it opens the stream. `max` as for
    /// [`EventLog::open_request_stream`].
    async fn open_carrier(
        &self,
        id: &str,
        owner: &str,
        meta: Bytes,
        max: u64,
    ) -> Result<Option<u64>, LogError>;
}

/// Housekeeping and shutdown.
#[async_trait]
pub trait Maintenance: Send + Sync + 'static {
    /// Housekeeping, to run every few seconds: trims by age (a stream it
    /// cannot read is skipped, never trimmed blind), drops the state of
    /// request streams retention emptied (reads of them still answer
    /// `Truncated`), ends sessions idle for longer than `idle`, and forgets
    /// sessions that ended at least `tombstone_ttl` ago, so ended sessions do
    /// not cost memory and storage forever. Until then an ended id is never
    /// re-created; after, it is unknown (`NoSession`, as before). Returns
    /// what it ended and which sessions the server should sweep for
    /// orphaned calls ([`Pass`]). On a log shared by instances each pass
    /// covers only the [`BUCKETS`] this instance holds the lease of.
    async fn maintain(&self, idle: Duration, tombstone_ttl: Duration) -> Result<Pass, LogError>;

    /// The sessions to sweep for orphaned calls since the last look
    /// ([`Pass::sweep`]), without a pass's housekeeping: on a log shared by
    /// instances it takes this instance's share of the [`BUCKETS`] as
    /// [`Maintenance::maintain`] does, and costs nothing per session unless
    /// a bucket changed hands or an instance went away. A server runs it
    /// every couple of seconds, so the calls and work a dead instance left
    /// end within its heartbeat's lifetime and a tick, not a maintenance
    /// interval later. A log of one process has no peers to lose: nothing.
    async fn watch(&self) -> Result<Vec<String>, LogError> {
        Ok(Vec::new())
    }

    /// Ends every subscription and makes committed state durable; for shutdown.
    async fn close(&self) -> Result<(), LogError>;
}
