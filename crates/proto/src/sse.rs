//! The one SSE codec of mcp-resume: the encoder the server writes events,
//! the priming event and ending comments with, and the incremental parser
//! (WHATWG rules, fed bytes as they arrive) every reader uses.

/// Appends one event to `out`: `id` (none for a response that is not in the
/// log), optional `event`, and `data` as one `data:` line per line of it.
pub fn encode(out: &mut Vec<u8>, id: Option<&str>, event: Option<&str>, data: &[u8]) {
    out.reserve(data.len() + id.map_or(0, str::len) + 32);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.as_bytes());
        out.push(b'\n');
    }
    if let Some(ev) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(ev.as_bytes());
        out.push(b'\n');
    }
    // JSON text as serde writes it has no line breaks: one `memchr` (a
    // vectorized search) finds none, where a byte-by-byte split cost a
    // tenth of a notification's delivery.
    let mut rest = data;
    loop {
        let (line, next) = match memchr::memchr(b'\n', rest) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
        match next {
            Some(next) => rest = next,
            None => break,
        }
    }
    out.push(b'\n');
}

/// The priming event of docs/protocol.md 4: the cursor as `id`, the `retry`
/// advice in milliseconds, and empty data.
pub fn priming(id: &str, retry_ms: u128) -> Vec<u8> {
    format!("id: {id}\nretry: {retry_ms}\ndata: \n\n").into_bytes()
}

/// A comment that says why the server ends a stream (`: error CODE: WHY`).
/// SSE clients ignore comments, so it is safe for every client and plain for
/// a human; our reader logs it and resumes from its cursor as after any end.
pub fn ending(code: &str, why: &str) -> Vec<u8> {
    format!(": error {code}: {}\n\n", why.replace(['\n', '\r'], " ")).into_bytes()
}

/// The comment sent in silence so that proxies keep the stream open.
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

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
    /// The last `: error CODE: WHY` comment seen and not yet taken.
    ending: Option<String>,
    /// How much of `buf` is known to hold no line break: a line that
    /// arrives in many small chunks is searched once, not again from its
    /// start at every chunk (which made a long line cost its length squared).
    searched: usize,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Why the server said it ends the stream (`CODE: WHY` of its last
    /// `: error` comment), once; for the reader to log or report.
    pub fn take_ending(&mut self) -> Option<String> {
        self.ending.take()
    }

    /// Feeds bytes; returns the events they completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut from = self.searched.min(self.buf.len());
        while let Some(nl) = memchr::memchr(b'\n', &self.buf[from..]) {
            let end = from + nl;
            let line = std::mem::take(&mut self.scratch);
            let mut line = line;
            line.clear();
            let raw = &self.buf[start..end];
            line.extend_from_slice(raw.strip_suffix(b"\r").unwrap_or(raw));
            start = end + 1;
            from = start;
            if let Some(ev) = self.line(&line) {
                out.push(ev);
            }
            self.scratch = line;
        }
        self.buf.drain(..start);
        self.searched = self.buf.len();
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
                self.ending = Some(String::from_utf8_lossy(why).into_owned());
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
    fn a_long_line_in_small_chunks_costs_its_length_not_its_square() {
        let mut p = SseParser::new();
        let line = format!("data: {}\n\n", "x".repeat(1 << 20));
        let started = std::time::Instant::now();
        let mut got = Vec::new();
        for chunk in line.as_bytes().chunks(16) {
            got.extend(p.feed(chunk));
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data.len(), 1 << 20);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn what_the_encoder_writes_the_parser_reads_back_whole() {
        let mut out = priming("7/0", 1000);
        for (id, data) in [
            (Some("7/1"), "one"),
            (None, "two\nlines"),
            (Some("7/2"), ""),
        ] {
            encode(&mut out, id, Some("message"), data.as_bytes());
        }
        out.extend_from_slice(KEEPALIVE);
        out.extend_from_slice(&ending("log-gap", "the log returned 5\nafter 3"));
        let mut p = SseParser::new();
        // Fed one byte at a time, as a slow network would.
        let events: Vec<SseEvent> = out.iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(events[0].id.as_deref(), Some("7/0"));
        assert_eq!(events[0].retry, Some(1000));
        assert_eq!(events[1].data, "one");
        assert_eq!(events[2].data, "two\nlines");
        assert_eq!(events[2].id, None);
        assert_eq!(events[3].id.as_deref(), Some("7/2"));
        assert_eq!(events.len(), 4);
        assert_eq!(
            p.take_ending().as_deref(),
            Some("log-gap: the log returned 5 after 3")
        );
        assert_eq!(p.take_ending(), None);
    }

    #[test]
    fn the_encoder_writes_a_data_line_per_line_of_data() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"{}", b"data: {}\n\n"),
            (b"", b"data: \n\n"),
            (b"a\nb", b"data: a\ndata: b\n\n"),
            (b"a\r\nb\r", b"data: a\ndata: b\n\n"),
            (b"a\n", b"data: a\ndata: \n\n"),
        ];
        for (data, wire) in cases {
            let mut out = Vec::new();
            encode(&mut out, None, None, data);
            assert_eq!(out, wire, "{:?}", String::from_utf8_lossy(data));
        }
        let mut out = Vec::new();
        encode(&mut out, Some("s/0/3"), Some("message"), b"x");
        assert_eq!(out, b"id: s/0/3\nevent: message\ndata: x\n\n");
    }

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
