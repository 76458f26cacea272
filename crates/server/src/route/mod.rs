//! The transport's half of the [`backend`](crate::backend) seam: one route
//! per session live on this instance, holding the session's backend, its
//! routing table and its commit queue.
//!
//! What the backend sends is committed in the order it was sent, by one
//! task per session that takes everything queued, routes it
//! ([`table::Table::route`]) and commits runs of messages bound for one
//! stream in one append; the backend's sends resolved when they were queued
//! ([`Outbox`]). When the backend stops, every call still in flight is
//! answered with an error: a caller never waits forever.

pub(crate) mod bell;
mod commit;
pub(crate) mod dispatch;
pub(crate) mod inbox;
pub(crate) mod lease;
pub(crate) mod orphans;
pub(crate) mod reply;
pub(crate) mod state;
pub(crate) mod streams;
pub(crate) mod table;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use mcp_resume_log::{LogError, StreamKey};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::backend::{
    BackendError, BackendSession, DeliverError, Outbox, Pending, Queued, Shortcut,
};
use crate::jsonrpc;
use crate::route::state::AppState;
use commit::{count_messages, flush, push, Run};
use table::{Answer, Dest, Routed, Table};

/// How the wire ids of server requests start (then the instance of the
/// route that sent it, a per-route nonce and a counter): an answer with such
/// an id that no route here sent is forwarded to that instance.
pub(crate) const WIRE_PREFIX: &str = "mr.";

/// The instance whose route sent the server request with wire id `wire`.
pub(crate) fn asker(wire: &str) -> Option<&str> {
    let instance = wire.strip_prefix(WIRE_PREFIX)?.split('.').next()?;
    (instance.len() == 32 && instance.bytes().all(|b| b.is_ascii_hexdigit())).then_some(instance)
}
/// Most queued messages committed in one pass.
const BATCH: usize = 256;
/// Room kept for queued messages between passes.
const IDLE_ROOM: usize = 4;

/// The routes of the sessions live on this instance.
#[derive(Default)]
pub(crate) struct Routes {
    map: Mutex<HashMap<String, Arc<SessionRoute>>>,
    /// Sessions whose exclusive backend runs on another instance, and when
    /// that was last checked ([`lease`]).
    owners: Mutex<HashMap<String, (String, Instant)>>,
    /// This instance's inbox bell: what wakes the watchers of forwarded
    /// messages ([`bell`]).
    pub(crate) bells: Arc<bell::Bells>,
}

/// One session's route.
pub(crate) struct SessionRoute {
    backend: Box<dyn BackendSession>,
    table: Arc<Mutex<Table>>,
    used: Mutex<Instant>,
    /// The lease epoch it was opened under, for an exclusive backend on a
    /// shared log ([`lease`]).
    epoch: Option<u64>,
    /// How far its inbox read forwarded messages (request streams), so a
    /// route that replaces it under a new lease epoch goes on from there.
    pub(crate) inbox_seen: std::sync::atomic::AtomicU64,
}

impl Routes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<SessionRoute>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates and follows this instance's inbox bell, once ([`bell`]):
    /// before a route opens here, so before this instance can be named as
    /// a session's owner or send a server request, and no ring goes unheard.
    pub(crate) async fn follow_bell(&self, state: &AppState) -> Result<(), LogError> {
        // Touched well within the session TTL, so it never expires idle.
        let touch = (state.config.session_ttl / 3).clamp(
            std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(60),
        );
        self.bells.open(&state.log, touch).await
    }

    /// The route of `session` on this instance, if it has one.
    pub(crate) fn get(&self, session: &str) -> Option<Arc<SessionRoute>> {
        let r = self.lock().get(session).cloned()?;
        *r.used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Some(r)
    }

    /// The route of `session` on this instance, without counting it as used.
    pub(crate) fn peek(&self, session: &str) -> Option<Arc<SessionRoute>> {
        self.lock().get(session).cloned()
    }

    /// The route of `session`, starting its backend if this instance has
    /// none; `restore` holds the client's `initialize` params when the
    /// session was initialized before (on another instance, by an earlier
    /// process, or before it was parked). With `lease` (a request stream
    /// count and a lease epoch), this instance holds the session's owner
    /// lease: the route takes the messages other instances forward to it
    /// through request streams after that count ([`inbox`]) for as long as
    /// it lives, and only while the lease epoch holds. The caller has
    /// followed the inbox bell ([`Routes::follow_bell`]).
    pub(crate) fn open(
        &self,
        state: &AppState,
        session: &str,
        restore: Option<Value>,
        lease: Option<(mcp_resume_log::Seq, u64)>,
    ) -> Result<Arc<SessionRoute>, BackendError> {
        let mut map = self.lock();
        if let Some(r) = map.get(session) {
            return Ok(r.clone());
        }
        let prefix = format!(
            "{WIRE_PREFIX}{}.{}.",
            state.log.instance(),
            &crate::session::new_session_id()[..8]
        );
        let mut table = Table::new(prefix);
        // The owner's inbox also takes forwarded answers: the watch that
        // runs only while answers are awaited is not needed.
        table.watching = lease.is_some();
        let table = Arc::new(Mutex::new(table));
        // A route under a lease hands nothing over unchecked: its commit
        // loop checks the lease first.
        let shortcut = match lease {
            None => Some(Arc::new(JsonAnswers(table.clone())) as Arc<dyn Shortcut>),
            Some(_) => None,
        };
        let (outbox, rx, pending) = Outbox::new(shortcut);
        let session_backend = state.backend.open(session, outbox, restore)?;
        let route = Arc::new(SessionRoute {
            backend: session_backend,
            table: table.clone(),
            used: Mutex::new(Instant::now()),
            epoch: lease.map(|(_, epoch)| epoch),
            inbox_seen: std::sync::atomic::AtomicU64::new(lease.map_or(0, |(seen, _)| seen)),
        });
        map.insert(session.to_owned(), route.clone());
        tokio::spawn(commit_loop(
            state.clone(),
            session.to_owned(),
            table,
            rx,
            pending,
            route.epoch,
        ));
        if let Some((seen, _)) = lease {
            tokio::spawn(inbox::watch(
                state.clone(),
                session.to_owned(),
                seen,
                true,
                Some(Arc::downgrade(&route)),
            ));
        }
        Ok(route)
    }

    /// Closes the route of `session` (it ended, or it is parked).
    pub(crate) fn close(&self, session: &str) {
        if let Some(r) = self.lock().remove(session) {
            r.backend.close();
        }
    }

    /// Closes `route` if it is still the route of `session`.
    pub(crate) fn close_route(&self, session: &str, route: &Arc<SessionRoute>) {
        self.close_if(session, &route.table);
    }

    /// Closes the route of `session` if it is still the one with `table`
    /// (not a newer one opened since).
    fn close_if(&self, session: &str, table: &Arc<Mutex<Table>>) {
        let mut map = self.lock();
        if map
            .get(session)
            .is_some_and(|r| Arc::ptr_eq(&r.table, table))
        {
            if let Some(r) = map.remove(session) {
                r.backend.close();
            }
        }
    }

    /// Closes every route (the server stops).
    pub(crate) fn close_all(&self) {
        for (_, r) in self.lock().drain() {
            r.backend.close();
        }
    }

    /// Run by maintenance: closes the routes of the sessions it just ended
    /// (`ended`), parks routes with nothing in flight for the backend's
    /// [`park_after`](crate::backend::Backend::park_after), and closes those
    /// whose session ended elsewhere (a `DELETE` or an expiry on another
    /// instance). The log is asked only about a route unused for a session
    /// TTL (its session may have expired by then; a route in use has a live
    /// session), so an instance with thousands of idle routes does not read
    /// thousands of records every pass.
    pub(crate) async fn sweep(&self, state: &AppState, ended: &[String]) {
        for id in ended {
            self.close(id);
        }
        let park_after = state.backend.park_after();
        let stale_after = state.config.session_ttl;
        let routes: Vec<(String, bool, std::time::Duration)> = self
            .lock()
            .iter()
            .map(|(id, r)| {
                let unused = r.used.lock().unwrap_or_else(|e| e.into_inner()).elapsed();
                (
                    id.clone(),
                    r.lock_table().idle() && !r.backend.busy(),
                    unused,
                )
            })
            .collect();
        for (id, idle, unused) in routes {
            let parked = idle && park_after.is_some_and(|after| unused >= after);
            let ended = !parked
                && unused >= stale_after
                && matches!(
                    state.log.session(&id).await,
                    Err(LogError::NoSession(_) | LogError::SessionEnded)
                );
            if ended || parked {
                self.close(&id);
            }
        }
    }
}

/// The route's way around its commit queue: a response a POST awaits as
/// JSON, sent while nothing is queued, is handed over at once.
struct JsonAnswers(Arc<Mutex<Table>>);

impl Shortcut for JsonAnswers {
    fn try_hand(&self, out: crate::backend::Outbound) -> Result<(), crate::backend::Outbound> {
        let crate::backend::Outbound { message, related } = out;
        let mut table = self.0.lock().unwrap_or_else(|e| e.into_inner());
        table
            .answer_json(message)
            .map_err(|message| crate::backend::Outbound { message, related })
    }
}

/// Whether a route opened under lease epoch `epoch` may no longer act for
/// its session: this handle's leases lapsed since (another instance may run
/// the session now).
fn lapsed(epoch: Option<u64>, log: &dyn mcp_resume_log::Log) -> bool {
    epoch.is_some_and(|e| log.lease_epoch() != e || !log.leases_fresh())
}

impl SessionRoute {
    /// Whether the lease this route runs under may have lapsed: it must not
    /// be used, and what its backend sends is no longer committed.
    pub(crate) fn lease_lost(&self, log: &dyn mcp_resume_log::Log) -> bool {
        lapsed(self.epoch, log)
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

/// Commits what a session's backend sends, in order, until the backend
/// stops; then answers every call still in flight with an error. Every
/// session has one, idle most of the time: what it awaits (a commit and its
/// retries, a stream's opening) is boxed, so the task itself stays small.
async fn commit_loop(
    state: AppState,
    session: String,
    table: Arc<Mutex<Table>>,
    mut rx: mpsc::UnboundedReceiver<Queued>,
    pending: Arc<Pending>,
    epoch: Option<u64>,
) {
    // Grown by a burst and shrunk after it: an idle session's route holds
    // no room for a batch (every session has a route).
    let mut queued = Vec::new();
    let mut ended = false;
    let mut lease_lost = false;
    let fenced = epoch.is_some();
    while rx.recv_many(&mut queued, BATCH).await > 0 {
        let taken = queued.len();
        if lapsed(epoch, &*state.log) {
            // Another instance may run the session now: nothing more from
            // this backend is committed, and it stops.
            tracing::warn!(%session, dropped = queued.len(), "the session's lease lapsed here; what its backend sent since is not committed");
            pending.done(count_messages(&queued));
            pending.handled(taken);
            queued.clear();
            lease_lost = true;
            break;
        }
        // Route each message (under the lock, no I/O) and commit runs bound
        // for one stream together, in order; a lazy call's first related
        // message first commits what came before, then opens its stream.
        let mut runs: Vec<Run> = Vec::new();
        let mut end = None;
        let mut flushes = Vec::new();
        let mut messages = 0;
        for q in queued.drain(..) {
            let out = match q {
                Queued::Message(out) => out,
                Queued::Flush(ack) => {
                    flushes.push(ack);
                    continue;
                }
                Queued::EndSession(why) => {
                    end = Some(why);
                    continue;
                }
                Queued::Encoded {
                    messages,
                    key,
                    done,
                } => {
                    // After everything queued before it, in one append.
                    lease_lost |=
                        Box::pin(flush(&state, &session, &mut runs, &pending, fenced)).await;
                    let committed = if lease_lost {
                        Err(LogError::LeaseLost(session.clone()))
                    } else {
                        Box::pin(commit::encoded(&state, &session, messages, key, fenced)).await
                    };
                    lease_lost |= matches!(committed, Err(LogError::LeaseLost(_)));
                    let _ = done.send(committed);
                    continue;
                }
            };
            messages += 1;
            let (routed, watch) = {
                let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
                let routed = t.route(out);
                let watch = t.asking() && !t.watching;
                t.watching |= watch;
                (routed, watch)
            };
            if watch {
                // Answers forwarded from other instances open request
                // streams after this count: taken before the request is
                // committed, so none can come earlier.
                let seen = state.log.request_streams(&session).await.unwrap_or(0);
                tokio::spawn(inbox::watch(
                    state.clone(),
                    session.clone(),
                    seen,
                    false,
                    None,
                ));
            }
            // An answer handed to a waiting POST goes out only after what the
            // backend sent before it is committed: a client never reads a
            // response before the notifications its call sent first.
            if matches!(routed, Routed::Answer(..) | Routed::AnswerLazy(..)) && !runs.is_empty() {
                lease_lost |= Box::pin(flush(&state, &session, &mut runs, &pending, fenced)).await;
            }
            match routed {
                Routed::Commit(k, m) => push(&mut runs, k, &m),
                Routed::Answer(tx, m) => {
                    let _ = tx.send(m);
                }
                Routed::AnswerLazy(tx, m) => {
                    let _ = tx.send(Answer::Json(m));
                }
                Routed::Open { call, message } => {
                    lease_lost |=
                        Box::pin(flush(&state, &session, &mut runs, &pending, fenced)).await;
                    let k = Box::pin(open_lazy(&state, &session, &table, &call)).await;
                    push(&mut runs, k, &message);
                }
                Routed::Drop(m) => {
                    tracing::debug!(%session, id = %m["id"], "a response nothing waits for (its call was cancelled) is dropped");
                }
            }
        }
        lease_lost |= Box::pin(flush(&state, &session, &mut runs, &pending, fenced)).await;
        pending.done(messages);
        pending.handled(taken);
        for ack in flushes {
            let _ = ack.send(if lease_lost {
                Err(LogError::LeaseLost(session.clone()))
            } else {
                Ok(())
            });
        }
        if lease_lost {
            break;
        }
        queued.shrink_to(IDLE_ROOM);
        if let Some(why) = end {
            tracing::warn!(%session, "the session's backend ended it: {why}");
            ended = true;
            break;
        }
    }
    // Nothing more is taken: senders waiting for room learn it now.
    rx.close();
    let mut rest = Vec::new();
    while let Ok(q) = rx.try_recv() {
        rest.push(q);
    }
    pending.done(count_messages(&rest));
    pending.close();
    // The backend stopped (closed, parked, or its task ended) or its lease
    // lapsed: nothing will answer what is in flight, so the transport does.
    let lease_lost = lease_lost || lapsed(epoch, &*state.log);
    let (why, reason) = if lease_lost {
        (
            "this instance lost the session's lease while this call ran (it was stalled); it may be retried",
            "lease-lost",
        )
    } else {
        (
            "the session's backend stopped while this call ran; it may be retried",
            "backend-stopped",
        )
    };
    let in_flight = table.lock().unwrap_or_else(|e| e.into_inner()).drain();
    for (id, dest) in in_flight {
        let reply =
            jsonrpc::error_with_data(&id, jsonrpc::INTERNAL_ERROR, why, json!({"reason": reason}));
        Box::pin(answer(&state, &session, dest, reply)).await;
    }
    if lease_lost {
        state.routes.close_if(&session, &table);
    }
    if ended {
        if let Err(e) = state.log.end_session(&session).await {
            tracing::warn!(%session, error = %e, "could not end the session");
        }
    }
    // If its backend ended by itself, the route is still listed: unlist it
    // (not a newer one), so that the next message starts a new backend.
    let mut map = state.routes.lock();
    if map
        .get(&session)
        .is_some_and(|r| Arc::ptr_eq(&r.table, &table))
    {
        map.remove(&session);
    }
}

/// Opens the request stream of lazy call `call` (its key) and tells the
/// POST that waits to read it; the stream its messages go to (the session
/// stream if it cannot be opened).
async fn open_lazy(state: &AppState, session: &str, table: &Mutex<Table>, call: &str) -> StreamKey {
    let id: Value = serde_json::from_str(call).unwrap_or(Value::Null);
    match streams::open_call_stream(state, session, &id).await {
        Ok((k, head, sub)) => {
            let tx = table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .opened(call, k);
            if let Some(tx) = tx {
                // A POST that is gone leaves the stream resumable anyway.
                let _ = tx.send(Answer::Stream {
                    stream: k,
                    head,
                    sub,
                });
            }
            k
        }
        Err(e) => {
            tracing::warn!(%session, error = %e, "could not open a call's request stream; its messages go to the session stream");
            StreamKey::Session
        }
    }
}

/// Delivers an answer the transport itself gives to a call: to the waiting
/// POST, or committed to its stream.
pub(crate) async fn answer(state: &AppState, session: &str, dest: Dest, reply: Value) {
    match dest {
        Dest::Json(tx) => {
            let _ = tx.send(reply);
        }
        Dest::Lazy(tx) => {
            let _ = tx.send(Answer::Json(reply));
        }
        Dest::Stream(k) => crate::route::reply::commit_response(state, session, k, &reply).await,
    }
}
