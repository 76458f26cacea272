//! An incremental server-sent events parser (WHATWG rules), fed bytes as
//! they arrive.

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id` field, if this event set one.
    pub id: Option<String>,
    /// The `event` field (`message` when absent).
    pub event: Option<String>,
    /// The `data` lines joined with `\n`.
    pub data: String,
    /// The `retry` advice in milliseconds.
    pub retry: Option<u64>,
}

/// Accumulates bytes and yields complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    current: SseEvent,
    has_data: bool,
    touched: bool,
    /// Reused for each line, so parsing allocates per event, not per line.
    scratch: Vec<u8>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(nl) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let end = start + nl;
            let line = std::mem::take(&mut self.scratch);
            let mut line = line;
            line.clear();
            let raw = &self.buf[start..end];
            line.extend_from_slice(raw.strip_suffix(b"\r").unwrap_or(raw));
            start = end + 1;
            if let Some(ev) = self.line(&line) {
                out.push(ev);
            }
            self.scratch = line;
        }
        self.buf.drain(..start);
        out
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            if !self.touched {
                return None;
            }
            // Unlike a browser, surface events without data too: the priming
            // event carries only the cursor and the retry advice.
            self.touched = false;
            self.has_data = false;
            return Some(std::mem::take(&mut self.current));
        }
        if line[0] == b':' {
            // The server says why it ends a stream in a comment (`: error CODE: why`).
            if let Some(why) = line.strip_prefix(b": error ") {
                tracing::warn!("server ended the stream: {}", String::from_utf8_lossy(why));
            }
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        self.touched = true;
        match field {
            "id" if !value.contains('\0') => self.current.id = Some(value.to_owned()),
            "event" => self.current.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            "retry" => self.current.retry = value.parse().ok(),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_split_events() {
        let mut p = SseParser::new();
        assert!(
            p.feed(b"id: 0\nretry: 1000\ndata: \n\nid: 1\nevent: mess")
                .len()
                == 1
        );
        let evs = p.feed(b"age\ndata: {\"a\":1}\n\n: keepalive\n\n");
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].id.as_deref(), Some("1"));
        assert_eq!(evs[0].event.as_deref(), Some("message"));
        assert_eq!(evs[0].data, "{\"a\":1}");
    }

    #[test]
    fn multi_line_data_and_crlf() {
        let mut p = SseParser::new();
        let evs = p.feed(b"data: a\r\ndata: b\r\n\r\n");
        assert_eq!(evs[0].data, "a\nb");
    }
}
