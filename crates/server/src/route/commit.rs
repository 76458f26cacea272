//! A route's commits: runs of messages bound for one stream, each committed
//! in one append (fenced by the lease for an exclusive backend), retried
//! under one key while the log is unavailable, and a call's answer replaced
//! by an error past the reply deadline (`crate::route::reply`); and the
//! loop that takes what a backend sent, in order, and commits it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use mcp_resume_log::{LogError, Seq, StreamKey};
use serde_json::{json, Value};

use super::hand::{answer, lease_lost_error, open_lazy, Handed};
use super::table::{Answer, Dest, Routed, Table};
use super::{inbox, lapsed, BATCH};
use crate::backend::{Message, Pending, Queued};
use crate::jsonrpc;
use crate::route::state::AppState;

/// Messages bound for one stream, committed in one append.
pub(super) type Run = (StreamKey, Vec<Bytes>);

/// What of the queue the table routes: a message, or a call's answer.
enum Outgoing {
    Message(crate::backend::Outbound),
    Answer(Value, Message),
}

/// How many of `queued` are messages (what the outbox counts as uncommitted).
pub(super) fn count_messages(queued: &[Queued]) -> usize {
    queued
        .iter()
        .filter(|q| {
            matches!(
                q,
                Queued::Message(_) | Queued::Answer { .. } | Queued::Raw(_)
            )
        })
        .count()
}

/// Adds `m` to the run of stream `k`.
pub(super) fn push(runs: &mut Vec<Run>, k: StreamKey, m: Message) {
    push_bytes(runs, k, m.into_text());
}

/// Adds a message already encoded to the run of stream `k`.
fn push_bytes(runs: &mut Vec<Run>, k: StreamKey, bytes: Bytes) {
    match runs.last_mut() {
        Some((last, b)) if *last == k => b.push(bytes),
        _ => runs.push((k, vec![bytes])),
    }
}

/// Commits the runs in order; a run that cannot be committed is reported to
/// the backend at its next send ([`Pending::fail`]), a call it answered
/// gets an error response instead (`crate::route::reply::commit`), and a
/// call whose request stream it was bound for ends with that error too
/// ([failed](Dest::Failed), so nothing it sends later is shown after the hole). With
/// `fenced` (a route under a lease), each commit is refused once another
/// instance holds the lease: then nothing more is committed and this says
/// so (`true`). `vouched` is set once a fenced commit went through: the
/// log checked then that this instance held the lease.
pub(super) async fn flush(
    state: &AppState,
    session: &str,
    runs: &mut Vec<Run>,
    pending: &Pending,
    table: &Mutex<Table>,
    fenced: bool,
    vouched: &mut bool,
) -> bool {
    for (k, messages) in runs.drain(..) {
        match crate::route::reply::commit(state, session, k, messages, fenced).await {
            Ok(_) => *vouched |= fenced,
            Err(LogError::LeaseLost(_)) => {
                // The runs after it are dropped with the drain.
                tracing::warn!(%session, "another instance holds the session's lease: what this instance's backend sent is not committed");
                return true;
            }
            Err(e) => {
                tracing::error!(%session, stream = ?k, error = %e, "could not commit what the backend sent");
                let calls = match k {
                    StreamKey::Request(_) => {
                        table.lock().unwrap_or_else(|e| e.into_inner()).fail_on(k)
                    }
                    StreamKey::Session => Vec::new(),
                };
                for id in calls {
                    let reply = crate::route::reply::commit_failed(state, &id);
                    crate::route::reply::commit_response(state, session, k, &reply, fenced).await;
                }
                pending.fail(e);
            }
        }
    }
    false
}

/// Where a batch's runs are committed: [`flush`] with what it needs.
struct Target<'a> {
    state: &'a AppState,
    session: &'a str,
    pending: &'a Pending,
    table: &'a Mutex<Table>,
    fenced: bool,
}

impl Target<'_> {
    /// [`flush`] of `runs`.
    async fn flush(&self, runs: &mut Vec<Run>, vouched: &mut bool) -> bool {
        flush(
            self.state,
            self.session,
            runs,
            self.pending,
            self.table,
            self.fenced,
            vouched,
        )
        .await
    }
}

/// Commits messages already encoded to the session stream in one append: at
/// most once per `key` when given (the sender may retry), fenced by the
/// lease with `fenced`.
pub(super) async fn encoded(
    state: &AppState,
    session: &str,
    messages: Vec<Bytes>,
    key: Option<u64>,
    fenced: bool,
) -> Result<Seq, LogError> {
    match key {
        None if !fenced => state.commit(session, StreamKey::Session, messages).await,
        key => {
            let key = key.unwrap_or_else(AppState::once_key);
            let k = StreamKey::Session;
            state.commit_once(session, k, messages, key, fenced).await
        }
    }
}

/// Commits what a session's backend sends, in order, until the backend
/// stops; then answers every call still in flight with an error. Every
/// session has one, idle most of the time: a batch and the ending run
/// boxed, so what the task holds while it waits is only [`Committer`] and
/// the queue.
pub(super) async fn commit_loop(committer: Committer) {
    // Grown by a burst and shrunk after it: an idle session's route holds
    // no room for a batch (every session has a route).
    let mut queued = Vec::new();
    let mut ended = false;
    let mut lease_lost = false;
    let pending = committer.pending.clone();
    let rx = &pending.queue;
    while rx.recv_many(&mut queued, BATCH).await > 0 {
        let taken = queued.len();
        if lapsed(committer.epoch, &*committer.state.log) {
            // Another instance may run the session now: nothing more from
            // this backend is committed, and it stops.
            tracing::warn!(session = %committer.session, dropped = queued.len(), "the session's lease lapsed here; what its backend sent since is not committed");
            committer.pending.done(count_messages(&queued));
            committer.pending.handled(taken);
            queued.clear();
            lease_lost = true;
            break;
        }
        let end = Box::pin(committer.batch(&mut queued, taken, &mut lease_lost)).await;
        if lease_lost {
            break;
        }
        if rx.release_if_empty() {
            // Idle again: give back the room a burst took.
            queued.shrink_to(0);
        }
        if let Some(why) = end {
            tracing::warn!(session = %committer.session, "the session's backend ended it: {why}");
            ended = true;
            break;
        }
    }
    Box::pin(committer.wind_down(lease_lost, ended)).await;
}

/// What a session's commit loop commits for: its route's table, the
/// backend's count of what is not committed yet, and the lease epoch of a
/// route under a lease.
pub(super) struct Committer {
    pub(super) state: AppState,
    pub(super) session: String,
    pub(super) table: Arc<Mutex<Table>>,
    pub(super) pending: Arc<Pending>,
    pub(super) epoch: Option<u64>,
}

impl Committer {
    /// Routes what one wake took (under the lock, no I/O) and commits the
    /// runs bound for one stream together, in order; a lazy call's first
    /// related message first commits what came before, then opens its
    /// stream. Sets `lease_lost` once another instance holds the lease;
    /// returns why the backend ended the session, if it did.
    async fn batch(
        &self,
        queued: &mut Vec<Queued>,
        taken: usize,
        lease_lost: &mut bool,
    ) -> Option<String> {
        let (state, session, table, pending) = (
            &self.state,
            self.session.as_str(),
            &*self.table,
            &*self.pending,
        );
        let fenced = self.epoch.is_some();
        let to = Target {
            state,
            session,
            pending,
            table,
            fenced,
        };
        // A fenced commit of this batch that went through: the log checked
        // the lease then.
        let mut vouched = false;
        // Under a lease, answers a POST awaits are handed over at the end,
        // once the lease is known to hold (see `hand_over`).
        let mut answers: Vec<Handed> = Vec::new();
        let mut runs: Vec<Run> = Vec::new();
        let mut end = None;
        let mut flushes = Vec::new();
        let mut messages = 0;
        for q in queued.drain(..) {
            let item = match q {
                Queued::Message(out) => Outgoing::Message(out),
                Queued::Answer { id, message } => Outgoing::Answer(id, message),
                Queued::Raw(bytes) => {
                    messages += 1;
                    push_bytes(&mut runs, StreamKey::Session, bytes);
                    continue;
                }
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
                    *lease_lost |= to.flush(&mut runs, &mut vouched).await;
                    let committed = if *lease_lost {
                        Err(LogError::LeaseLost(session.to_owned()))
                    } else {
                        encoded(state, session, messages, key, fenced).await
                    };
                    *lease_lost |= matches!(committed, Err(LogError::LeaseLost(_)));
                    let _ = done.send(committed);
                    continue;
                }
            };
            messages += 1;
            let (routed, watch) = {
                let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
                let routed = match item {
                    Outgoing::Message(out) => t.route(out),
                    Outgoing::Answer(id, message) => t.route_answer(&id, message),
                };
                let watch = t.asking() && !t.watching;
                t.watching |= watch;
                (routed, watch)
            };
            if watch {
                // Answers forwarded from other instances open request
                // streams after this count: taken before the request is
                // committed, so none can come earlier.
                let seen = state.log.request_streams(session).await.unwrap_or(0);
                tokio::spawn(inbox::watch(
                    state.clone(),
                    session.to_owned(),
                    seen,
                    false,
                    None,
                ));
            }
            // An answer handed to a waiting POST goes out only after what the
            // backend sent before it is committed: a client never reads a
            // response before the notifications its call sent first.
            if matches!(routed, Routed::Answer(..) | Routed::AnswerLazy(..)) && !runs.is_empty() {
                *lease_lost |= to.flush(&mut runs, &mut vouched).await;
            }
            match routed {
                Routed::Commit(k, m) => push(&mut runs, k, m),
                Routed::Answer(tx, m) if fenced => answers.push(Handed::Json(tx, m)),
                Routed::AnswerLazy(tx, m) if fenced => answers.push(Handed::Lazy(tx, m)),
                Routed::Answer(tx, m) => {
                    let _ = tx.send(m);
                }
                Routed::AnswerLazy(tx, m) => {
                    let _ = tx.send(Answer::Json(m));
                }
                Routed::Open { call, message } => {
                    *lease_lost |= to.flush(&mut runs, &mut vouched).await;
                    if let Some(k) = open_lazy(state, session, table, &call).await {
                        push(&mut runs, k, Message::Value(message));
                    }
                }
                Routed::Drop(id) => {
                    tracing::debug!(%session, %id, "a message of a call nothing waits for (cancelled, or failed) is dropped");
                }
            }
        }
        *lease_lost |= to.flush(&mut runs, &mut vouched).await;
        if !answers.is_empty() {
            *lease_lost |= !self.hand_over(answers, *lease_lost, vouched).await;
        }
        pending.done(messages);
        pending.handled(taken);
        for ack in flushes {
            let _ = ack.send(if *lease_lost {
                Err(LogError::LeaseLost(session.to_owned()))
            } else {
                Ok(())
            });
        }
        end
    }

    /// Hands the answers a route under a lease took from its backend to the
    /// POSTs that await them, once the lease is known to hold: a fenced
    /// commit of the batch went through (`vouched`), or the log names this
    /// instance as the holder now ([`Leases::holds`](mcp_resume_log::Leases::holds)).
    /// A heartbeat that stayed fresh does not tell: a claim a Redis failover
    /// took back, or a lease taken after this instance's heartbeat key was
    /// evicted, leaves it fresh while another instance's child serves the
    /// session. When the lease is lost (`lease_lost`, or the log names
    /// another holder) every POST gets the `lease-lost` error instead, never
    /// an answer of a backend that no longer holds the session. Whether the
    /// lease held.
    async fn hand_over(&self, answers: Vec<Handed>, lease_lost: bool, vouched: bool) -> bool {
        let held = if lease_lost {
            false
        } else if vouched {
            true
        } else {
            let deadline = Instant::now() + self.state.config.reply_deadline;
            let session = self.session.as_str();
            match crate::route::reply::retrying(&self.state, Some(deadline), || {
                self.state.log.holds(session)
            })
            .await
            {
                Ok(held) => held,
                Err(e) => {
                    tracing::error!(%session, error = %e, "could not tell whether this instance still holds the session's lease; its answers are errors");
                    for handed in answers {
                        let failed = crate::route::reply::commit_failed(&self.state, &handed.id());
                        handed.send(Message::Value(failed));
                    }
                    return true;
                }
            }
        };
        if !held {
            tracing::warn!(session = %self.session, "another instance holds the session's lease: this instance's answers are not handed over");
        }
        for handed in answers {
            if held {
                handed.send_answer();
            } else {
                let lost = lease_lost_error(&handed.id());
                handed.send(Message::Value(lost));
            }
        }
        held
    }

    /// The loop is over: answers what is still in flight, and unlists the
    /// route (its backend stopped, the session ended, or the lease lapsed).
    async fn wind_down(self, lease_lost: bool, ended: bool) {
        let Committer {
            state,
            session,
            table,
            pending,
            epoch,
        } = self;
        // Nothing more is taken: senders waiting for room learn it now.
        let rx = &pending.queue;
        rx.close();
        let mut rest = Vec::new();
        while let Some(q) = rx.try_recv() {
            rest.push(q);
        }
        pending.done(count_messages(&rest));
        pending.close();
        // The backend stopped (closed, parked, or its task ended) or its lease
        // lapsed: nothing will answer what is in flight, so the transport does.
        let lease_lost = lease_lost || lapsed(epoch, &*state.log);
        let in_flight = table.lock().unwrap_or_else(|e| e.into_inner()).drain();
        let mut abandoned = Vec::new();
        for (id, dest) in in_flight {
            if lease_lost && matches!(dest, Dest::Stream(StreamKey::Session)) {
                // The session stream is the lease holder's now: it answers.
                abandoned.push(id);
                continue;
            }
            let reply = if lease_lost {
                lease_lost_error(&id)
            } else {
                jsonrpc::error_with_data(
                    &id,
                    jsonrpc::INTERNAL_ERROR,
                    "the session's backend stopped while this call ran; it may be retried",
                    json!({"reason": "backend-stopped"}),
                )
            };
            // Fenced: an instance that lost the lease writes nothing more
            // (a call on a request stream then ends as an orphan of the
            // lost lease); a waiting POST gets it as it is.
            answer(&state, &session, dest, reply, epoch.is_some()).await;
        }
        if !abandoned.is_empty() {
            tokio::spawn(inbox::hand_abandoned(
                state.clone(),
                session.clone(),
                abandoned,
            ));
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
}
