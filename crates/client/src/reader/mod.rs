//! Reading the session stream from a cursor, over SSE or WebSocket, checking
//! every seq, reconnecting on its own, and failing loudly where continuity
//! cannot be proven (docs/protocol.md 5.6).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use mcp_resume_proto::close::{self, CloseAdvice};
use mcp_resume_proto::{
    decide_start, headers as h, ClientFrame, CursorDiscontinuity, SeqChecker, ServerFrame,
};
use serde_json::Value;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

use crate::session::{check_status, status_error};
use crate::sse::{SseEvent, SseParser};
use crate::tls::tls_cause;
use crate::upgrade::upgrade_request;
use crate::{ClientError, McpClient, Xorshift64};

mod sse;
mod ws;

use ws::WsRefusal;

type WsStream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Which transport to read over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// `GET` with `Accept: text/event-stream`.
    Sse,
    /// The cursor-safe upgrade; falls back to SSE where the server cannot do it.
    WebSocket,
}

/// How a [`SessionReader`] behaves.
///
/// Non-exhaustive: start from `ReaderOptions::default()` and set fields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReaderOptions {
    /// SSE or WebSocket.
    pub transport: Transport,
    /// Start after this seq; `None` starts with everything the server retains.
    pub from: Option<u64>,
    /// Keep the cursor in this file; when it exists it overrides `from`.
    pub cursor_file: Option<PathBuf>,
    /// Give up after this many reconnects in a row without progress (`None`: never).
    pub max_retries: Option<u32>,
    /// Longest wait between reconnects.
    pub max_backoff: Duration,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self {
            transport: Transport::Sse,
            from: None,
            cursor_file: None,
            max_retries: None,
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// One event of the session stream.
#[derive(Debug, Clone)]
pub struct ReadEvent {
    /// Its seq; `None` from a server whose event ids are opaque.
    pub seq: Option<u64>,
    /// The event id as sent.
    pub id: String,
    /// The JSON-RPC message.
    pub message: Value,
}

enum Conn {
    Sse {
        body: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, reqwest::Error>>,
        parser: SseParser,
    },
    Ws(Box<WsStream>),
}

/// A reader of one session stream that keeps the promise on the client side.
pub struct SessionReader {
    client: McpClient,
    opts: ReaderOptions,
    /// `None` until the server told us where we start (priming event).
    checker: Option<SeqChecker>,
    /// Last id from a server whose ids are not seqs.
    opaque_id: Option<String>,
    /// Seq of the last event handed to the application (the checker may be ahead of it
    /// by what is parsed but still pending).
    delivered: Option<u64>,
    conn: Option<Conn>,
    pending: VecDeque<ReadEvent>,
    ws_disabled: bool,
    retry: Duration,
    failures: u32,
    fallbacks: u32,
    reconnects: u32,
    rng: Xorshift64,
}

impl SessionReader {
    pub(crate) fn new(client: McpClient, opts: ReaderOptions) -> Result<Self, ClientError> {
        let mut from = opts.from;
        if let Some(path) = &opts.cursor_file {
            match std::fs::read_to_string(path) {
                Ok(s) => {
                    from = Some(s.trim().parse().map_err(|_| {
                        ClientError::CursorFile(format!(
                            "{} does not hold a cursor: {:?}",
                            path.display(),
                            s.trim()
                        ))
                    })?)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ClientError::CursorFile(format!("{}: {e}", path.display()))),
            }
        }
        if client.session.is_none() {
            return Err(ClientError::Usage("the reader needs a session".into()));
        }
        Ok(Self {
            client,
            checker: from.map(SeqChecker::new),
            delivered: from,
            opts,
            opaque_id: None,
            conn: None,
            pending: VecDeque::new(),
            ws_disabled: false,
            retry: Duration::from_millis(100),
            failures: 0,
            fallbacks: 0,
            reconnects: 0,
            rng: Xorshift64::from_time(),
        })
    }

    /// The cursor: the seq of the last event returned, if known.
    pub fn cursor(&self) -> Option<u64> {
        self.delivered
            .or_else(|| self.checker.as_ref().map(SeqChecker::cursor))
    }

    /// Where the connection stands: everything up to here was received and checked.
    fn received(&self) -> Option<u64> {
        self.checker.as_ref().map(SeqChecker::cursor)
    }

    /// How often an upgrade fell back to SSE (426, 503, or a 101 without the echo).
    pub fn fallbacks(&self) -> u32 {
        self.fallbacks
    }

    /// How often the reader reconnected.
    pub fn reconnects(&self) -> u32 {
        self.reconnects
    }

    /// The reader as a [`futures_util::Stream`]: every event in order, ending
    /// after the first error (which it yields).
    pub fn into_stream(self) -> impl futures_util::Stream<Item = Result<ReadEvent, ClientError>> {
        futures_util::stream::unfold(Some(self), |reader| async move {
            let mut reader = reader?;
            match reader.next().await {
                Ok(ev) => Some((Ok(ev), Some(reader))),
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// Whether the current connection is a WebSocket.
    pub fn on_websocket(&self) -> bool {
        matches!(self.conn, Some(Conn::Ws(_)))
    }

    /// The next event, in order, with no gap and no duplicate; or the reason there is none.
    pub async fn next(&mut self) -> Result<ReadEvent, ClientError> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                if ev.seq.is_some() {
                    self.delivered = ev.seq;
                }
                self.save_cursor()?;
                return Ok(ev);
            }
            if self.conn.is_none() {
                match self.connect().await {
                    // What the connection brought (a WebSocket's replay up
                    // to its cursor) is handed out before reading on.
                    Ok(()) => continue,
                    Err(e) if e.is_transient() => {
                        self.backoff(&e).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let step = match self.conn.as_mut() {
                Some(Conn::Sse { .. }) => self.read_sse().await,
                Some(Conn::Ws(_)) => self.read_ws().await,
                None => continue,
            };
            match step {
                Ok(()) => self.failures = 0,
                Err(e) if e.is_transient() => {
                    self.conn = None;
                    self.backoff(&e).await?;
                }
                Err(e) => {
                    self.close_quietly().await;
                    return Err(e);
                }
            }
        }
    }

    fn save_cursor(&self) -> Result<(), ClientError> {
        let (Some(path), Some(c)) = (&self.opts.cursor_file, self.cursor()) else {
            return Ok(());
        };
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{c}\n"))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| ClientError::CursorFile(format!("{}: {e}", path.display())))
    }

    async fn backoff(&mut self, why: &ClientError) -> Result<(), ClientError> {
        self.failures += 1;
        self.reconnects += 1;
        if let Some(max) = self.opts.max_retries {
            if self.failures > max {
                return Err(ClientError::Transport(format!(
                    "gave up after {max} reconnects: {why}"
                )));
            }
        }
        // Exponential from the server's `retry:`, capped, with full jitter on the upper half.
        let exp = self
            .retry
            .saturating_mul(1 << self.failures.min(10).saturating_sub(1))
            .min(self.opts.max_backoff);
        let jitter = exp.mul_f64(self.rng.range(0, 999) as f64 / 2000.0);
        let wait = exp / 2 + jitter;
        tracing::info!(error = %why, wait_ms = wait.as_millis() as u64, cursor = ?self.cursor(), "reconnecting");
        tokio::time::sleep(wait).await;
        Ok(())
    }

    async fn close_quietly(&mut self) {
        if let Some(Conn::Ws(mut ws)) = self.conn.take() {
            let _ = SinkExt::close(&mut ws).await;
        }
    }

    async fn connect(&mut self) -> Result<(), ClientError> {
        if self.opts.transport == Transport::WebSocket && !self.ws_disabled {
            if self.checker.is_none() {
                // Learn where "everything retained" starts from the SSE priming event,
                // so the upgrade carries an explicit prior cursor.
                self.connect_sse().await?;
                while self.checker.is_none() && self.opaque_id.is_none() && self.pending.is_empty()
                {
                    self.read_sse().await?;
                }
                if self.checker.is_none() {
                    // Opaque event ids: a plain Streamable HTTP server, which has no
                    // cursor-safe upgrade. Stay on SSE, resuming by Last-Event-ID.
                    tracing::info!(
                        "event ids are not seqs: plain Streamable HTTP server, staying on SSE"
                    );
                    self.ws_disabled = true;
                    return Ok(());
                }
                if !self.pending.is_empty() {
                    return Ok(());
                }
                self.conn = None;
            }
            match self.connect_ws().await {
                Ok(()) => return Ok(()),
                Err(WsRefusal::Fallback(why)) => {
                    self.fallbacks += 1;
                    tracing::warn!(reason = %why, cursor = ?self.cursor(), "WebSocket upgrade not resumable here; falling back to SSE from the same cursor");
                    self.ws_disabled = true;
                }
                Err(WsRefusal::Error(e)) => return Err(e),
            }
        }
        self.connect_sse().await
    }
}
