//! Plain data of the log.

use std::time::Duration;

use bytes::Bytes;

pub use mcp_resume_proto::Seq;

/// Which stream of a session: the session stream or request stream `R`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StreamKey {
    /// Messages that belong to no HTTP request.
    Session,
    /// The SSE response to one POSTed request, numbered from 1.
    Request(u64),
}

impl StreamKey {
    /// Storage number: 0 for the session stream, `R` for request streams.
    pub fn number(self) -> u64 {
        match self {
            StreamKey::Session => 0,
            StreamKey::Request(r) => r,
        }
    }

    /// Inverse of [`StreamKey::number`].
    pub fn from_number(n: u64) -> Self {
        if n == 0 {
            StreamKey::Session
        } else {
            StreamKey::Request(n)
        }
    }
}

/// One committed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its position in its stream.
    pub seq: Seq,
    /// Commit time, milliseconds since the Unix epoch; drives age retention.
    pub at_ms: u64,
    /// One JSON-RPC message, as UTF-8 JSON text.
    pub message: Bytes,
}

/// Head and floor of one stream at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Highest committed seq, 0 when nothing was ever appended.
    pub head: Seq,
    /// Lowest retained seq; `head + 1` when nothing is retained.
    pub floor: Seq,
    /// Committed events that damaged storage no longer holds, `from ..= to`
    /// (docs/protocol.md 6.1); `None` on every healthy stream. Within
    /// `floor ..= head`: retention that passes it clears it.
    pub lost: Option<(Seq, Seq)>,
}

impl Bounds {
    /// A stream at `head` retaining `floor ..= head`, nothing lost.
    pub fn new(head: Seq, floor: Seq) -> Self {
        Self {
            head,
            floor,
            lost: None,
        }
    }

    /// These bounds with the floor moved to `floor`: a lost range the floor
    /// has passed is forgotten (nothing a reader can ask for is missing).
    pub(crate) fn with_floor(self, floor: Seq) -> Self {
        Self {
            floor,
            lost: self.lost.filter(|(_, to)| *to >= floor),
            ..self
        }
    }

    /// Checks that a reader at `cursor` can be served every event after it:
    /// within the retained range and not needing a lost event first.
    pub fn admit(&self, cursor: Seq) -> Result<(), mcp_resume_proto::CursorDiscontinuity> {
        mcp_resume_proto::decide_start(cursor, Some(self.head), Some(self.floor))?;
        match self.lost {
            Some((from, to)) if cursor + 1 >= from && cursor < to => {
                Err(mcp_resume_proto::CursorDiscontinuity::DataLost {
                    prior: cursor,
                    from,
                    to,
                    head: self.head,
                    floor: self.floor,
                })
            }
            _ => Ok(()),
        }
    }
}

/// What the log knows of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id.
    pub id: String,
    /// Creation time, ms since the epoch.
    pub created_ms: u64,
    /// The owner's opaque record.
    pub meta: Bytes,
}

/// Retention limits per stream (docs/protocol.md 7).
///
/// Non-exhaustive: start from `Retention::default()` and set fields.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Retention {
    /// Keep at most this many events.
    pub max_events: u64,
    /// Keep events at most this old (applied by `maintain`).
    pub max_age: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            max_events: 10_000,
            max_age: Duration::from_secs(3600),
        }
    }
}

/// Names one pin, for [`crate::EventLog::unpin`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PinId(pub(crate) u64);

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh instance id: 16 random bytes in hex, so two processes (or two
/// handles) never share one.
pub(crate) fn new_instance_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: time and address still tell processes apart.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        b = (t ^ (std::process::id() as u128) << 64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How many buckets the sessions fall into for maintenance: a log shared by
/// instances (Redis) leases each bucket to one live instance, which alone
/// trims, expires and sweeps the sessions in it, so maintenance per instance
/// falls as instances are added. A log of one process maintains all of them.
pub const BUCKETS: u16 = 64;

/// What one maintenance pass ([`crate::Maintenance::maintain`]) did, and what
/// it leaves to the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// The sessions it ended for being idle.
    pub ended: Vec<String>,
    /// Live sessions whose calls may have lost their handler since the last
    /// pass, for the server to end those calls as orphans: on the first pass
    /// every session this instance maintains (a restart); on a shared log
    /// also the sessions of buckets it took over, and those of all its
    /// buckets after another instance went away.
    pub sweep: Vec<String>,
    /// How many of the [`BUCKETS`] this instance maintains now: all of them
    /// on a log of one process, none while its leases are in doubt.
    pub buckets: u16,
}
