//! The SSE half of the reader: connect from the cursor, parse, check each seq.

use super::*;

impl SessionReader {
    pub(super) async fn connect_sse(&mut self) -> Result<(), ClientError> {
        let mut rb = self
            .client
            .request_builder(reqwest::Method::GET)
            .header("accept", "text/event-stream");
        if let Some(c) = self.received() {
            rb = rb.header(h::LAST_EVENT_ID, c.to_string());
        } else if let Some(id) = &self.opaque_id {
            rb = rb.header(h::LAST_EVENT_ID, id.as_str());
        }
        let resp = rb.send().await?;
        let resp = check_status(resp).await.map_err(|e| self.with_prior(e))?;
        self.conn = Some(Conn::Sse {
            body: resp.bytes_stream().boxed(),
            parser: SseParser::new(),
        });
        Ok(())
    }

    /// Fills in the reader's own cursor in a server's 409.
    pub(super) fn with_prior(&self, e: ClientError) -> ClientError {
        match (e, self.received()) {
            (
                ClientError::Discontinuity(CursorDiscontinuity::Ahead { head, floor, .. }),
                Some(prior),
            ) => ClientError::Discontinuity(CursorDiscontinuity::Ahead { prior, head, floor }),
            (
                ClientError::Discontinuity(CursorDiscontinuity::Truncated { head, floor, .. }),
                Some(prior),
            ) => ClientError::Discontinuity(CursorDiscontinuity::Truncated { prior, head, floor }),
            (e, _) => e,
        }
    }

    pub(super) async fn read_sse(&mut self) -> Result<(), ClientError> {
        let Some(Conn::Sse { body, parser }) = self.conn.as_mut() else {
            return Ok(());
        };
        let chunk = match body.next().await {
            Some(Ok(c)) => c,
            Some(Err(e)) => return Err(ClientError::Transport(e.to_string())),
            None => return Err(ClientError::Transport("the SSE stream ended".into())),
        };
        let events = parser.feed(&chunk);
        if let Some(why) = parser.take_ending() {
            tracing::warn!("server ended the stream: {why}");
        }
        for ev in events {
            self.on_sse_event(ev)?;
        }
        Ok(())
    }

    pub(super) fn on_sse_event(&mut self, ev: SseEvent) -> Result<(), ClientError> {
        if let Some(ms) = ev.retry {
            self.retry = Duration::from_millis(ms.clamp(10, 60_000));
        }
        let Some(id) = ev.id else { return Ok(()) };
        let seq = id.parse::<u64>().ok();
        if ev.data.is_empty() {
            // Priming event: where the server starts this stream.
            match (seq, &self.checker) {
                (Some(s), None) => self.checker = Some(SeqChecker::new(s)),
                (Some(s), Some(c)) if s != c.cursor() => {
                    return Err(ClientError::Protocol(format!(
                        "asked to resume after {}, the server primed {s}",
                        c.cursor()
                    )));
                }
                (None, _) => self.opaque_id = Some(id),
                _ => {}
            }
            return Ok(());
        }
        let message: Value = serde_json::from_str(&ev.data)
            .map_err(|e| ClientError::Protocol(format!("event {id} is not JSON: {e}")))?;
        match (seq, self.checker.as_mut()) {
            (Some(s), Some(c)) => c.on_event(s).map_err(ClientError::Discontinuity)?,
            (Some(s), None) => self.checker = Some(SeqChecker::new(s)),
            (None, _) => self.opaque_id = Some(id.clone()),
        }
        self.pending.push_back(ReadEvent { seq, id, message });
        Ok(())
    }
}
