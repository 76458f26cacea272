//! The routing table of one session: where each in-flight call is answered,
//! which progress tokens belong to which call, and the server-to-client
//! requests awaiting the client's response. No I/O: [`Table::route`] decides
//! where a message goes; the caller commits it.

use std::collections::HashMap;

use mcp_resume_log::{Seq, StreamKey, Subscription};
use serde_json::Value;
use tokio::sync::oneshot;

use super::call_key::{key, Lookup};
use super::Map;
use crate::backend::{Message, Outbound};

/// What a POST that waits on a lazy call gets.
pub(crate) enum Answer {
    /// The response, as JSON: nothing but it came.
    Json(Message),
    /// The call sent something before its response (progress, a request to
    /// the client): it has a request stream now, to be read from its start.
    Stream {
        stream: StreamKey,
        head: Seq,
        sub: Subscription,
    },
}

/// Where a call's answer goes.
pub(crate) enum Dest {
    /// A POST waits for it as JSON (nothing is committed).
    Json(oneshot::Sender<Message>),
    /// A POST waits for it as JSON unless the call sends something first;
    /// then a request stream opens for it (the fast, unlogged answer for the
    /// calls that only answer, a resumable stream for the others).
    Lazy(oneshot::Sender<Answer>),
    /// Committed to this stream: the call's request stream `R`, or the
    /// session stream for a call that came over a WebSocket.
    Stream(StreamKey),
    /// Already answered with an error (what it sent could not be
    /// committed): whatever its handler sends, its response too, is dropped,
    /// never shown on another stream after the hole.
    Failed,
}

impl Dest {
    /// The stream that messages related to the call travel on: a call
    /// answered as JSON has none of its own, so they go to the session stream.
    fn stream(&self) -> StreamKey {
        match self {
            Dest::Json(_) | Dest::Lazy(_) | Dest::Failed => StreamKey::Session,
            Dest::Stream(k) => *k,
        }
    }
}

/// What to do with one outgoing message.
pub(crate) enum Routed {
    /// Commit it to this stream.
    Commit(StreamKey, Message),
    /// Hand it to the POST that waits for it.
    Answer(oneshot::Sender<Message>, Message),
    /// Hand it to the POST that waits on a lazy call.
    AnswerLazy(oneshot::Sender<Answer>, Message),
    /// Open a request stream for lazy call `call` (its key), then commit
    /// the message to it.
    Open { call: String, message: Value },
    /// Nothing waits for it (the response of a call the client cancelled):
    /// dropped. The message's id, for the record.
    Drop(Value),
}

struct Call {
    dest: Dest,
    token: Option<String>,
    /// When it was registered ([`Table::keeps_alive`]).
    since: std::time::Instant,
}

/// A server-to-client request awaiting the client's response.
struct Asked {
    /// The id the backend gave it (rmcp's ids restart at 0 in every session
    /// incarnation, so they never go on the wire).
    backend_id: Value,
    stream: StreamKey,
    /// The call whose handler sent it, if known.
    call: Option<String>,
    /// When it was sent ([`Table::keeps_alive`]).
    since: std::time::Instant,
}

/// Where a message related to a call goes.
enum Target {
    Stream(StreamKey),
    Open(String),
    /// The call failed: nothing of it goes anywhere.
    Drop,
}

/// One session's routing state on this instance.
pub(crate) struct Table {
    /// Keyed by the ids clients choose (and their progress tokens, below):
    /// SipHash, whose order and collisions a client cannot learn.
    calls: HashMap<String, Call>,
    tokens: HashMap<String, String>,
    /// Keyed by this server's own request ids.
    asked: Map<String, Asked>,
    /// Wire ids of server requests are `PREFIX` + a counter: unique across
    /// instances and incarnations, so a late response never completes a
    /// newer request.
    prefix: String,
    next: u64,
    /// Whether a task watches the log for answers to this table's server
    /// requests that reached another instance ([`super::inbox`]).
    pub(crate) watching: bool,
    /// Set once the backend stopped and the calls in flight were answered:
    /// nothing registered later would ever be answered.
    closed: bool,
}

/// Why a call was not registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A call with the same id is in flight in the session.
    InFlight,
    /// The session's backend has stopped.
    Stopped,
}

impl Refusal {
    /// The JSON-RPC error that answers the refused call `id`.
    pub(crate) fn reply(self, id: &Value) -> Value {
        match self {
            Refusal::InFlight => crate::jsonrpc::error(
                id,
                crate::jsonrpc::INVALID_REQUEST,
                format!("a call with id {id} is already in flight in this session"),
            ),
            Refusal::Stopped => crate::jsonrpc::error_with_data(
                id,
                crate::jsonrpc::INTERNAL_ERROR,
                "the session's backend stopped; it may be retried",
                serde_json::json!({"reason": "backend-stopped"}),
            ),
        }
    }
}

impl Table {
    /// An empty table whose server requests get ids starting with `prefix`.
    pub(crate) fn new(prefix: String) -> Self {
        Self {
            calls: HashMap::new(),
            tokens: HashMap::new(),
            asked: Map::default(),
            prefix,
            next: 0,
            watching: false,
            closed: false,
        }
    }

    /// Whether nothing is in flight: no call, no server request.
    pub(crate) fn idle(&self) -> bool {
        self.calls.is_empty() && self.asked.is_empty()
    }

    /// Where a message related to call `call` (its key) goes.
    fn target_of(&self, call: Option<String>) -> Target {
        match call
            .as_ref()
            .and_then(|c| self.calls.get(c).map(|d| (c, d)))
        {
            Some((
                c,
                Call {
                    dest: Dest::Lazy(_),
                    ..
                },
            )) => Target::Open(c.clone()),
            Some((
                _,
                Call {
                    dest: Dest::Failed, ..
                },
            )) => Target::Drop,
            Some((_, d)) => Target::Stream(d.dest.stream()),
            None => Target::Stream(StreamKey::Session),
        }
    }

    /// Lazy call `call` has request stream `k` now: its messages go there,
    /// and the POST that waits is handed back to be told.
    pub(crate) fn opened(&mut self, call: &str, k: StreamKey) -> Option<oneshot::Sender<Answer>> {
        let c = self.calls.get_mut(call)?;
        match std::mem::replace(&mut c.dest, Dest::Stream(k)) {
            Dest::Lazy(tx) => Some(tx),
            other => {
                c.dest = other;
                None
            }
        }
    }

    /// Whether something in flight keeps the session from idle expiry: a
    /// call or a server request younger than `within` (one older is
    /// presumed abandoned: a hung handler, a client that never answers),
    /// and, for a call answered as JSON, only while its POST still waits
    /// (a client that hung up leaves nothing to answer).
    pub(crate) fn keeps_alive(&self, within: std::time::Duration) -> bool {
        let waited = |c: &Call| match &c.dest {
            Dest::Json(tx) => !tx.is_closed(),
            Dest::Lazy(tx) => !tx.is_closed(),
            Dest::Stream(_) => true,
            Dest::Failed => false,
        };
        self.calls
            .values()
            .any(|c| c.since.elapsed() < within && waited(c))
            || self.asked.values().any(|a| a.since.elapsed() < within)
    }

    /// Whether server requests await the client's response.
    pub(crate) fn asking(&self) -> bool {
        !self.asked.is_empty()
    }

    /// Whether `wire` is the id of a server request this table sent (pending
    /// or not): an answer to it needs no forwarding.
    pub(crate) fn sent(&self, wire: &str) -> bool {
        wire.strip_prefix(&self.prefix)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n < self.next)
    }

    /// Registers client request `id` (with its `params`, for a progress
    /// token) to be answered at `dest`.
    pub(crate) fn register(
        &mut self,
        id: &Value,
        params: &Value,
        dest: Dest,
    ) -> Result<(), Refusal> {
        if self.closed {
            return Err(Refusal::Stopped);
        }
        let k = key(id);
        if self.calls.contains_key(&k) {
            return Err(Refusal::InFlight);
        }
        let token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .map(key);
        if let Some(t) = &token {
            self.tokens.insert(t.clone(), k.clone());
        }
        self.calls.insert(
            k,
            Call {
                dest,
                token,
                since: std::time::Instant::now(),
            },
        );
        Ok(())
    }

    /// Forgets call `id` (answered, cancelled by the client, or it could
    /// not be delivered) with the server requests its handler sent that
    /// were not answered (nothing waits for them now, and they would keep
    /// the route from parking), and returns where it was answered.
    pub(crate) fn forget(&mut self, id: &Value) -> Option<Dest> {
        let k = Lookup::of(id);
        let k = k.as_str();
        let call = self.calls.remove(k)?;
        if let Some(t) = call.token {
            self.tokens.remove(&t);
        }
        if !self.asked.is_empty() {
            self.asked.retain(|_, a| a.call.as_deref() != Some(k));
        }
        self.give_back_room();
        Some(call.dest)
    }

    /// Frees the maps' room once no call is in flight: every session has a
    /// table, idle most of its life, and a map keeps its buckets (about 370
    /// bytes for the first call's) after its last entry goes.
    fn give_back_room(&mut self) {
        if self.calls.is_empty() {
            self.calls.shrink_to_fit();
            self.tokens.shrink_to_fit();
        }
    }

    /// Marks call `id` [failed](Dest::Failed) (it is answered with an error
    /// now) and returns where it was answered.
    pub(crate) fn fail(&mut self, id: &Value) -> Option<Dest> {
        let c = self.calls.get_mut(Lookup::of(id).as_str())?;
        Some(std::mem::replace(&mut c.dest, Dest::Failed))
    }

    /// Marks every call answered on request stream `k` [failed](Dest::Failed)
    /// (what was sent to it could not be committed, so it ends with an
    /// error) and returns their ids.
    pub(crate) fn fail_on(&mut self, k: StreamKey) -> Vec<Value> {
        self.calls
            .iter_mut()
            .filter(|(_, c)| matches!(c.dest, Dest::Stream(s) if s == k))
            .filter_map(|(key, c)| {
                c.dest = Dest::Failed;
                serde_json::from_str(key).ok()
            })
            .collect()
    }

    /// Every call in flight, removed (the backend stopped: each needs an
    /// error answer).
    pub(crate) fn drain(&mut self) -> Vec<(Value, Dest)> {
        self.closed = true;
        self.tokens.clear();
        self.asked.clear();
        self.calls
            .drain()
            .map(|(k, c)| (serde_json::from_str(&k).unwrap_or(Value::Null), c.dest))
            .collect()
    }

    /// The client's response to a server request: its id translated back to
    /// the backend's; `None` when no such request waits (unknown, or already
    /// answered).
    pub(crate) fn client_response(&mut self, mut message: Value) -> Option<Value> {
        let wire = message.get("id")?.as_str()?.to_owned();
        let asked = self.asked.remove(&wire)?;
        message["id"] = asked.backend_id;
        Some(message)
    }

    /// Hands `message`, the answer to call `id`, to the POST that awaits it
    /// if that call is answered as JSON (nothing to commit); otherwise gives
    /// it back.
    pub(crate) fn answer_json(&mut self, id: &Value, message: Message) -> Result<(), Message> {
        let k = Lookup::of(id);
        let k = k.as_str();
        match self.calls.get(k).map(|c| &c.dest) {
            Some(Dest::Json(_) | Dest::Lazy(_)) => {}
            _ => return Err(message),
        }
        let call = self.calls.remove(k).expect("looked up under the same lock");
        if let Some(t) = call.token {
            self.tokens.remove(&t);
        }
        self.give_back_room();
        // A POST that is gone (its client hung up) drops the answer.
        match call.dest {
            Dest::Json(tx) => drop(tx.send(message)),
            Dest::Lazy(tx) => drop(tx.send(Answer::Json(message))),
            Dest::Stream(_) | Dest::Failed => {}
        }
        Ok(())
    }

    /// Decides where one outgoing message goes, translating the ids of
    /// server requests.
    pub(crate) fn route(&mut self, out: Outbound) -> Routed {
        let Outbound {
            mut message,
            related,
        } = out;
        let method = message
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (method.as_deref(), message.get("id").cloned()) {
            // A server-to-client request.
            (Some(_), Some(backend_id)) => {
                let call = related
                    .map(|r| key(&r))
                    .filter(|k| self.calls.contains_key(k));
                let target = self.target_of(call.clone());
                if matches!(target, Target::Drop) {
                    return Routed::Drop(backend_id);
                }
                let wire = format!("{}{}", self.prefix, self.next);
                self.next += 1;
                message["id"] = Value::String(wire.clone());
                let stream = match &target {
                    Target::Stream(k) => *k,
                    Target::Open(_) | Target::Drop => StreamKey::Session,
                };
                self.asked.insert(
                    wire,
                    Asked {
                        backend_id,
                        stream,
                        call,
                        since: std::time::Instant::now(),
                    },
                );
                routed(target, message)
            }
            (Some("notifications/progress"), None) => {
                let call = message
                    .get("params")
                    .and_then(|p| p.get("progressToken"))
                    .and_then(|t| self.tokens.get(&key(t)))
                    .cloned();
                routed(self.target_of(call), message)
            }
            (Some("notifications/cancelled"), None) => {
                // The backend gave up a server request: translate its id and
                // send the cancel where the request went.
                let backend_id = message
                    .get("params")
                    .and_then(|p| p.get("requestId"))
                    .cloned()
                    .unwrap_or(Value::Null);
                let found = self
                    .asked
                    .iter()
                    .find(|(_, a)| a.backend_id == backend_id)
                    .map(|(w, a)| {
                        let now = a.call.as_ref().and_then(|c| self.calls.get(c));
                        (w.clone(), now.map_or(a.stream, |c| c.dest.stream()))
                    });
                match found {
                    Some((wire, stream)) => {
                        self.asked.remove(&wire);
                        message["params"]["requestId"] = Value::String(wire);
                        Routed::Commit(stream, Message::Value(message))
                    }
                    None => Routed::Commit(StreamKey::Session, Message::Value(message)),
                }
            }
            (Some(_), None) => Routed::Commit(StreamKey::Session, Message::Value(message)),
            (None, Some(id)) => self.route_answer(&id, Message::Value(message)),
            (None, None) => Routed::Drop(Value::Null),
        }
    }

    /// Decides where `message`, the answer (a response or error) to call
    /// `id`, goes: the POST that awaits it, or the call's stream.
    pub(crate) fn route_answer(&mut self, id: &Value, message: Message) -> Routed {
        match self.forget(id) {
            Some(Dest::Json(tx)) => Routed::Answer(tx, message),
            Some(Dest::Lazy(tx)) => Routed::AnswerLazy(tx, message),
            Some(Dest::Stream(k)) => Routed::Commit(k, message),
            Some(Dest::Failed) | None => Routed::Drop(id.clone()),
        }
    }
}

/// `message` to `target`.
fn routed(target: Target, message: Value) -> Routed {
    match target {
        Target::Stream(k) => Routed::Commit(k, Message::Value(message)),
        Target::Open(call) => Routed::Open { call, message },
        Target::Drop => Routed::Drop(message.get("id").cloned().unwrap_or(Value::Null)),
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
