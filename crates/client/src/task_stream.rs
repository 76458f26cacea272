//! Resumable task event streams (SEP-2694, docs/protocol.md 3.9): a
//! durable task's events read from a cursor with `tasks/stream`, each
//! checked to be the next `seq`, resumed with `after` when the connection
//! drops, on any instance, until the task's terminal event.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use mcp_resume_proto::{headers as h, CursorDiscontinuity, STATELESS_PROTOCOL_VERSIONS};
use serde_json::{json, Value};

use crate::session::check_status;
use crate::sse::SseParser;
use crate::{ClientError, McpClient};

/// The tasks extension a `tasks/stream` request declares.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The JSON-RPC code of `events_gone`.
const EVENTS_GONE: i64 = -32010;
/// How many times in a row a dropped stream is resumed without progress.
const RESUMES: u32 = 8;

/// One event of a task's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvent {
    /// Its position in the task's stream: 0, 1, 2, ... with no gap.
    pub seq: u64,
    /// Its type: the transport's status events are
    /// `dev.mcp-resume/task/STATUS`, a task's own vendor-prefixed.
    pub kind: String,
    /// Its payload (a JSON object).
    pub payload: Value,
}

impl TaskEvent {
    /// Whether it is the task's terminal status event (the stream's last).
    pub fn is_terminal(&self) -> bool {
        ["completed", "failed", "cancelled"]
            .iter()
            .any(|s| self.kind == format!("dev.mcp-resume/task/{s}"))
    }
}

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A task's events from a cursor; [`TaskStream::next`] yields them in order.
pub struct TaskStream {
    client: McpClient,
    task: String,
    /// The last seq yielded.
    last: Option<u64>,
    body: Option<Body>,
    parser: SseParser,
    ready: VecDeque<TaskEvent>,
    done: bool,
    stalls: u32,
}

impl McpClient {
    /// Reads the events of task `task` after seq `after` (`None`: from the
    /// earliest the server retains) with `tasks/stream`. The stream checks
    /// every event is the next `seq`, resumes with `after` on a dropped
    /// connection (any instance of a shared log serves it), and ends after
    /// the task's terminal event. A cursor the server cannot continue from
    /// is [`ClientError::Discontinuity`] (`truncated`: floor is the earliest
    /// retained seq).
    pub async fn stream_task(
        &self,
        task: &str,
        after: Option<u64>,
    ) -> Result<TaskStream, ClientError> {
        let mut s = TaskStream {
            client: self.clone(),
            task: task.to_owned(),
            last: after,
            body: None,
            parser: SseParser::new(),
            ready: VecDeque::new(),
            done: false,
            stalls: 0,
        };
        s.connect().await?;
        Ok(s)
    }
}

impl TaskStream {
    /// The last seq yielded (the cursor to resume after).
    pub fn last_seq(&self) -> Option<u64> {
        self.last
    }

    /// The next event; `None` once the task's terminal event was yielded.
    pub async fn next(&mut self) -> Result<Option<TaskEvent>, ClientError> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Ok(Some(e));
            }
            if self.done {
                return Ok(None);
            }
            let chunk = match self.body.as_mut() {
                Some(b) => b.next().await,
                None => None,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    let events = self.parser.feed(&bytes);
                    for ev in events {
                        if let Ok(v) = serde_json::from_str::<Value>(&ev.data) {
                            self.take(v)?;
                        }
                    }
                }
                Some(Err(_)) | None => {
                    // The connection ended before the result: resume.
                    self.body = None;
                    self.stalls += 1;
                    if self.stalls > RESUMES {
                        return Err(ClientError::Transport(format!(
                            "the stream of task {} kept dropping",
                            self.task
                        )));
                    }
                    let pause = 100u64 << self.stalls.min(5);
                    tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    self.connect().await?;
                }
            }
        }
    }

    /// Handles one message of the stream.
    fn take(&mut self, v: Value) -> Result<(), ClientError> {
        if v.get("method").and_then(Value::as_str) == Some("notifications/tasks/event") {
            let p = &v["params"];
            let seq = p["seq"]
                .as_u64()
                .ok_or_else(|| ClientError::Protocol(format!("a task event without a seq: {v}")))?;
            match self.last {
                // A repeat after a reconnect: already yielded (the draft
                // asks clients to de-duplicate by seq).
                Some(l) if seq <= l => return Ok(()),
                Some(l) if seq != l + 1 => {
                    return Err(ClientError::Discontinuity(CursorDiscontinuity::Truncated {
                        prior: l,
                        head: seq,
                        floor: seq,
                    }))
                }
                // No cursor: the server starts at the earliest it retains.
                _ => {}
            }
            self.last = Some(seq);
            self.stalls = 0;
            let event = TaskEvent {
                seq,
                kind: p["type"].as_str().unwrap_or_default().to_owned(),
                payload: p.get("payload").cloned().unwrap_or(json!({})),
            };
            self.ready.push_back(event);
            return Ok(());
        }
        if v.get("id").is_some() && v.get("method").is_none() {
            if let Some(err) = v.get("error") {
                let reason = err["data"]["reason"].as_str().unwrap_or_default();
                // The server stopped or lost the log: resume from the last seq.
                if ["server-stopping", "log-unavailable", "log-gap"].contains(&reason) {
                    self.body = None;
                    return Ok(());
                }
                // Events the stream can no longer give (retention, damage).
                if err["code"].as_i64() == Some(EVENTS_GONE) {
                    return Err(gone(err, self.last));
                }
                return Err(rpc_error(err));
            }
            self.done = true;
        }
        Ok(())
    }

    /// Sends `tasks/stream` after the last seq and takes its body.
    async fn connect(&mut self) -> Result<(), ClientError> {
        let version = STATELESS_PROTOCOL_VERSIONS[0];
        let mut params = json!({"taskId": self.task, "_meta": {
            "io.modelcontextprotocol/protocolVersion": version,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-client", "version": env!("CARGO_PKG_VERSION")}
        }});
        if let Some(a) = self.last {
            params["after"] = json!(a);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/stream", "params": params});
        let mut rb = self
            .client
            .http
            .post(&self.client.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(h::MCP_PROTOCOL_VERSION, version)
            .header(h::MCP_METHOD, "tasks/stream")
            .header(h::MCP_NAME, self.task.as_str());
        if let Some(t) = &self.client.token {
            rb = rb.bearer_auth(t);
        }
        let resp = match rb.body(body.to_string()).send().await {
            Ok(r) => r,
            Err(e) => {
                // Not reached: counted as a drop, retried by `next`.
                tracing::debug!(error = %e, "tasks/stream did not connect");
                return Ok(());
            }
        };
        let resp = match check_status(resp).await {
            Ok(r) => r,
            Err(e) if e.is_transient() => return Ok(()),
            Err(e) => return Err(e),
        };
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !sse {
            let v: Value = resp.json().await?;
            let err = v
                .get("error")
                .cloned()
                .unwrap_or(json!({"message": v.to_string()}));
            if err["code"].as_i64() == Some(EVENTS_GONE) {
                return Err(gone(&err, self.last));
            }
            return Err(rpc_error(&err));
        }
        self.parser = SseParser::new();
        self.body = Some(Box::pin(resp.bytes_stream()));
        Ok(())
    }
}

/// An `events_gone` error (-32010) as the discontinuity it names, in the
/// stream's seqs: a lost range of damaged storage (`lostFrom ..= lostTo`),
/// or events retention took (below `earliestSeq`).
fn gone(err: &Value, last: Option<u64>) -> ClientError {
    let d = &err["data"];
    let prior = last.unwrap_or(0);
    let floor = d["earliestSeq"].as_u64().unwrap_or(0);
    let head = d["latestSeq"].as_u64().unwrap_or(floor);
    ClientError::Discontinuity(match (d["lostFrom"].as_u64(), d["lostTo"].as_u64()) {
        (Some(from), Some(to)) => CursorDiscontinuity::DataLost {
            prior,
            from,
            to,
            head,
            floor,
        },
        _ => CursorDiscontinuity::Truncated { prior, head, floor },
    })
}

fn rpc_error(err: &Value) -> ClientError {
    ClientError::Rpc {
        code: err["code"].as_i64().unwrap_or(0),
        message: err["message"].as_str().unwrap_or_default().to_owned(),
    }
}
