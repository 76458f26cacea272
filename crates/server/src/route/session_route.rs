//! One session's route: its backend, routing table and commit queue, what
//! requests check of the session's record, and the lease it runs under.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::Value;

use super::lapsed;
use super::table::{self, Dest, Table};
use crate::backend::{BackendSession, DeliverError, Pending};

/// One session's route.
pub(crate) struct SessionRoute {
    pub(super) backend: Box<dyn BackendSession>,
    pub(super) table: Arc<Mutex<Table>>,
    /// Set by each request that takes the route (under the map's lock),
    /// read and cleared by maintenance's looks ([`SessionRoute::unused`]):
    /// once it is set a request only reads it, so the requests of a busy
    /// session, on either worker thread, share its cache line instead of
    /// each writing it (it was a time behind a lock of its own, read from
    /// the clock every request).
    pub(super) used: AtomicBool,
    /// When the sweep last found the route used (or when it opened).
    pub(super) quiet_since: Mutex<Instant>,
    /// The lease epoch it was opened under, for an exclusive backend on a
    /// shared log ([`lease`]).
    pub(super) epoch: Option<u64>,
    /// How far its inbox read forwarded messages (request streams), so a
    /// route that replaces it under a new lease epoch goes on from there.
    pub(crate) inbox_seen: std::sync::atomic::AtomicU64,
    /// Held while its inbox hands forwarded messages over, and while a
    /// graceful stop gives its lease up: no forwarded call is taken in
    /// between the check that the route has settled and the release.
    pub(crate) inbox: tokio::sync::Mutex<()>,
    /// What its backend sent and the commit loop has not handled yet.
    pub(super) pending: Arc<Pending>,
    /// What every request checks of the session's record (who created it,
    /// its revision), kept after the first check: neither changes once
    /// `initialize` has answered (its answer is what gives the client the
    /// session id; the revision the backend chose is written before it),
    /// and decoding the record was 4 % of a `tools/call`'s instructions.
    pub(super) head: std::sync::OnceLock<KnownHead>,
}

/// [`SessionRoute::head`]: the creator, and the revision as one of the
/// revisions this server speaks (no copy of it per session).
pub(crate) struct KnownHead {
    /// The principal that created the session.
    pub(crate) principal: Option<Box<str>>,
    /// The negotiated revision.
    pub(crate) version: &'static str,
}

impl SessionRoute {
    /// Whether the route runs under the session's owner lease: everything it
    /// commits, its transport's own answers too, is fenced by the lease.
    pub(crate) fn fenced(&self) -> bool {
        self.epoch.is_some()
    }

    /// Whether the lease this route runs under may have lapsed: it must not
    /// be used, and what its backend sends is no longer committed.
    pub(crate) fn lease_lost(&self, log: &dyn mcp_resume_log::Log) -> bool {
        lapsed(self.epoch, log)
    }

    /// Whether nothing runs in the route: no call nor server request in
    /// flight, nothing its backend sent left to commit, the backend not busy
    /// (which a hosted handler answers as "sent since last asked").
    pub(super) fn settled(&self) -> bool {
        self.lock_table().idle() && self.pending.settled() && !self.backend.busy()
    }

    /// Counts the route as used (parking waits for it to be unused).
    pub(super) fn mark_used(&self) {
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }

    /// How long the route has gone unused, as maintenance sees it: a use
    /// since its last look counts from now. So the unused time found is
    /// short of the true one by up to one maintenance interval (half the
    /// park time, or a second where that is longer, at most) and the time
    /// a pass takes; it is never longer than the true one, so a route is
    /// parked late, never early.
    pub(super) fn unused(&self) -> std::time::Duration {
        let mut quiet = self.quiet_since.lock().unwrap_or_else(|e| e.into_inner());
        if self.used.swap(false, Ordering::Relaxed) {
            *quiet = Instant::now();
        }
        quiet.elapsed()
    }

    /// The session's creator and revision, if a request was checked against
    /// its record already ([`SessionRoute::remember_head`]).
    pub(crate) fn head(&self) -> Option<&KnownHead> {
        self.head.get()
    }

    /// Keeps what a request was checked against: only an MCP session's
    /// record (a task's is never routed), on a revision this server speaks.
    pub(crate) fn remember_head(&self, principal: Option<&str>, version: &str) {
        let known = mcp_resume_proto::SUPPORTED_PROTOCOL_VERSIONS
            .iter()
            .find(|v| **v == version);
        if let Some(version) = known {
            let _ = self.head.set(KnownHead {
                principal: principal.map(Box::from),
                version,
            });
        }
    }

    pub(crate) fn lock_table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers client request `id` to be answered at `dest`.
    pub(crate) fn register(
        &self,
        id: &Value,
        params: &Value,
        dest: Dest,
    ) -> Result<(), table::Refusal> {
        self.lock_table().register(id, params, dest)
    }

    /// Forgets call `id`; where it was to be answered.
    pub(crate) fn forget(&self, id: &Value) -> Option<Dest> {
        self.lock_table().forget(id)
    }

    /// The client's response to a server request, translated for the
    /// backend; `None` when none waits for it.
    pub(crate) fn client_response(&self, message: Value) -> Option<Value> {
        self.lock_table().client_response(message)
    }

    /// Whether `wire` names a server request this route sent.
    pub(crate) fn owns(&self, wire: &str) -> bool {
        self.lock_table().sent(wire)
    }

    /// Hands a client message to the backend.
    pub(crate) fn deliver(&self, message: Value) -> Result<(), DeliverError> {
        self.backend.deliver(message)
    }

    /// Hands a client request to the backend; the work that answers it, if
    /// the backend hands it back to run ([`BackendSession::deliver_request`]).
    pub(crate) fn deliver_request(
        &self,
        message: Value,
    ) -> Result<Option<crate::backend::Work>, DeliverError> {
        self.backend.deliver_request(message)
    }
}
