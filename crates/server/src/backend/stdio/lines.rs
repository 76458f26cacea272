//! A child's output, line by line, with no buffer held while it waits.
//!
//! The gateway runs a child per session, idle most of its life, and reads its
//! stdout and its stderr for as long as it lives, so what a waiting reader
//! holds is held per session. [`Lines`] waits for the pipe to be readable with
//! nothing allocated, reads what is there through a buffer on the stack, and
//! keeps only the part of a line not ended yet (a `BufReader` would keep its
//! whole buffer for each pipe from the start; the sizes are in
//! benches/results/gateway.md).

use std::io;
use std::os::fd::OwnedFd;
use std::task::{ready, Context, Poll};

use tokio::net::unix::pipe;

/// The most bytes one read takes from the pipe.
const CHUNK: usize = 8192;

/// The lines a child writes to one of its pipes.
pub(super) struct Lines {
    pipe: pipe::Receiver,
    /// Bytes read and not handed out yet: `pending[start..]`.
    pending: Vec<u8>,
    start: usize,
    /// How far past `start` no newline was found (a long line is searched
    /// once, not again at every read).
    scanned: usize,
    /// The pipe's writer closed it.
    eof: bool,
}

impl Lines {
    /// Reads the pipe `fd` (a child's stdout or stderr). Inside a runtime.
    pub(super) fn new(fd: OwnedFd) -> io::Result<Self> {
        Ok(Self {
            pipe: pipe::Receiver::from_owned_fd(fd)?,
            pending: Vec::new(),
            start: 0,
            scanned: 0,
            eof: false,
        })
    }

    /// The next line, without its `\n` or `\r\n`; `None` once the pipe is
    /// closed and everything before was handed out. A line that is not
    /// UTF-8 is an `InvalidData` error, as with `BufReader::lines`.
    pub(super) async fn next_line(&mut self) -> io::Result<Option<String>> {
        std::future::poll_fn(|cx| self.poll_next_line(cx)).await
    }

    /// [`Lines::next_line`] as a poll: waiting on it stores nothing but the
    /// waker in the reactor, where a readiness future would be kept in the
    /// waiting task (176 bytes a pipe, in every idle session's reader).
    fn poll_next_line(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Option<String>>> {
        loop {
            if let Some(line) = self.take_line() {
                return Poll::Ready(line.map(Some));
            }
            if self.eof {
                if self.start == self.pending.len() {
                    return Poll::Ready(Ok(None));
                }
                let rest = self.pending.split_off(self.start);
                self.clear();
                return Poll::Ready(text(rest).map(Some));
            }
            ready!(self.pipe.poll_read_ready(cx))?;
            self.fill()?;
        }
    }

    /// A whole line from what was read, if there is one.
    fn take_line(&mut self) -> Option<io::Result<String>> {
        let from = self.start + self.scanned;
        let Some(at) = self.pending[from..].iter().position(|b| *b == b'\n') else {
            self.scanned = self.pending.len() - self.start;
            return None;
        };
        let end = from + at;
        let mut line = &self.pending[self.start..end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        let line = text(line.to_vec());
        self.start = end + 1;
        self.scanned = 0;
        if self.start == self.pending.len() {
            self.clear();
        }
        Some(line)
    }

    /// Reads what the pipe holds now (up to [`CHUNK`] bytes).
    fn fill(&mut self) -> io::Result<()> {
        let mut buf = [0u8; CHUNK];
        match self.pipe.try_read(&mut buf) {
            Ok(0) => self.eof = true,
            Ok(n) => {
                if self.start > 0 {
                    self.pending.drain(..self.start);
                    self.start = 0;
                }
                self.pending.extend_from_slice(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Everything was handed out: the room goes back, so a reader waiting
    /// on an idle child holds nothing.
    fn clear(&mut self) {
        self.pending = Vec::new();
        self.start = 0;
        self.scanned = 0;
    }
}

/// `bytes` as text, or the error `BufReader::lines` gives.
fn text(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A pipe whose writing end the test holds.
    fn pipe_pair() -> (Lines, std::fs::File) {
        let (r, w) = std::io::pipe().unwrap();
        (
            Lines::new(OwnedFd::from(r)).unwrap(),
            std::fs::File::from(OwnedFd::from(w)),
        )
    }

    #[tokio::test]
    async fn lines_split_across_reads_and_crlf_come_out_whole() {
        let (mut lines, mut w) = pipe_pair();
        w.write_all(b"{\"a\":1}\r\n{\"b\":").unwrap();
        assert_eq!(
            lines.next_line().await.unwrap().as_deref(),
            Some("{\"a\":1}")
        );
        w.write_all(b"2}\n\n").unwrap();
        assert_eq!(
            lines.next_line().await.unwrap().as_deref(),
            Some("{\"b\":2}")
        );
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some(""));
        // Nothing is held while it waits.
        assert_eq!(lines.pending.capacity(), 0);
        w.write_all(b"last, unended").unwrap();
        drop(w);
        assert_eq!(
            lines.next_line().await.unwrap().as_deref(),
            Some("last, unended")
        );
        assert_eq!(lines.next_line().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_line_longer_than_a_read_and_a_burst_of_lines() {
        let (mut lines, mut w) = pipe_pair();
        let long = "x".repeat(3 * CHUNK + 5);
        let writer = std::thread::spawn(move || {
            w.write_all(long.as_bytes()).unwrap();
            w.write_all(b"\n").unwrap();
            for i in 0..1000 {
                writeln!(w, "{i}").unwrap();
            }
        });
        assert_eq!(
            lines.next_line().await.unwrap().unwrap().len(),
            3 * CHUNK + 5
        );
        for i in 0..1000 {
            assert_eq!(lines.next_line().await.unwrap(), Some(i.to_string()));
        }
        writer.join().unwrap();
        assert_eq!(lines.next_line().await.unwrap(), None);
    }

    /// An error for that line only: the next one is read as usual (the
    /// gateway goes on reading a child's stderr past it).
    #[tokio::test]
    async fn a_line_that_is_not_utf8_is_an_error_and_the_next_one_is_read() {
        let (mut lines, mut w) = pipe_pair();
        w.write_all(b"\xff\xfe\nnext\n").unwrap();
        let e = lines.next_line().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("next"));
    }
}
