//! A child's stdin, written from the task that delivers each message.
//!
//! Why: a call through the gateway crossed a task of its own that wrote the
//! child's stdin (the POST's task queued the line, the writer woke and
//! wrote it): one wake-up per call, and one task and channel held by every
//! session for its whole life, idle or not. A pipe takes a line at once
//! nearly always, so [`Stdin::send`] writes it there and then, without
//! blocking (the pipe is in non-blocking mode). Only what the pipe does not
//! take (the child reads slower than the client sends) is kept as a
//! backlog, written in order by a task started for it, which registers the
//! pipe with the reactor for as long as it waits and ends once the backlog
//! is written; while it runs, later lines join the backlog behind it, so the
//! child reads every line whole and in the order it was sent. An idle
//! child's stdin costs no task, no channel and no reactor registration.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The child's stdin is closed or broken: it reads nothing more.
#[derive(Debug, thiserror::Error)]
#[error("the child's stdin is closed")]
pub(super) struct Broken;

/// One child's stdin, shared by everything that writes to it.
#[derive(Clone)]
pub(super) struct Stdin(Arc<Inner>);

struct Inner {
    /// The pipe, in non-blocking mode.
    pipe: File,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Bytes the pipe has not taken yet, in order: `backlog[written..]`.
    backlog: Vec<u8>,
    written: usize,
    /// A task is writing the backlog.
    writing: bool,
    /// A write failed (the child closed its stdin or exited).
    broken: bool,
}

/// The pipe, held open while the reactor watches it for a backlog.
struct Held(Arc<Inner>);

impl AsRawFd for Held {
    fn as_raw_fd(&self) -> RawFd {
        self.0.pipe.as_raw_fd()
    }
}

/// What one non-blocking write did.
enum Wrote {
    /// This many bytes went into the pipe.
    Some(usize),
    /// The pipe is full.
    Full,
    /// The pipe is closed or broken.
    Broken,
}

impl Inner {
    fn write(&self, bytes: &[u8]) -> Wrote {
        loop {
            return match (&self.pipe).write(bytes) {
                Ok(n) => Wrote::Some(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Wrote::Full,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => Wrote::Broken,
            };
        }
    }
}

impl Stdin {
    /// Writes to the pipe `fd` (a child's stdin), switched to non-blocking
    /// mode.
    pub(super) fn new(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: fcntl on a descriptor this function owns, with flags it
        // read from it and one more.
        let set = unsafe {
            let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0
        };
        if !set {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(Arc::new(Inner {
            pipe: File::from(fd),
            state: Mutex::default(),
        })))
    }

    /// Writes `line` (one message and its `\n`) after everything sent
    /// before it: now, as far as the pipe takes it, and the rest by a task
    /// of its own. An error once a write has failed.
    pub(super) fn send(&self, line: &[u8]) -> Result<(), Broken> {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.broken {
            return Err(Broken);
        }
        if state.writing {
            state.backlog.extend_from_slice(line);
            return Ok(());
        }
        let mut at = 0;
        while at < line.len() {
            match self.0.write(&line[at..]) {
                Wrote::Some(n) => at += n,
                Wrote::Full => break,
                Wrote::Broken => {
                    state.broken = true;
                    return Err(Broken);
                }
            }
        }
        if at < line.len() {
            state.backlog.extend_from_slice(&line[at..]);
            state.writing = true;
            tokio::spawn(self.clone().write_backlog());
        }
        Ok(())
    }

    /// Writes the backlog as the pipe takes it, registered with the reactor
    /// meanwhile; ends once it is written (or the pipe broke), giving its
    /// memory and its registration back.
    async fn write_backlog(self) {
        // SAFETY: `Held` keeps the pipe's `File` (and so its descriptor)
        // open for as long as the `AsyncFd` lives, and always names it.
        let registered =
            unsafe { AsyncFd::register_with_interest(Held(self.0.clone()), Interest::WRITABLE) };
        let Ok(ready) = registered else {
            self.fail();
            return;
        };
        loop {
            let Ok(mut guard) = ready.writable().await else {
                self.fail();
                return;
            };
            let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
            let State {
                backlog, written, ..
            } = &mut *state;
            match self.0.write(&backlog[*written..]) {
                Wrote::Some(n) => *written += n,
                Wrote::Full => guard.clear_ready(),
                Wrote::Broken => {
                    drop(state);
                    self.fail();
                    return;
                }
            }
            if state.written == state.backlog.len() {
                state.backlog = Vec::new();
                state.written = 0;
                state.writing = false;
                return;
            }
        }
    }

    /// A write failed: nothing more is written, and the backlog goes.
    fn fail(&self) {
        let mut state = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        state.broken = true;
        state.writing = false;
        state.backlog = Vec::new();
        state.written = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// A pipe: the writing end as a [`Stdin`], the reading end as tokio's.
    fn pipe_pair() -> (Stdin, tokio::net::unix::pipe::Receiver) {
        let (r, w) = std::io::pipe().expect("a pipe");
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(r))
            .expect("the reading end");
        (Stdin::new(OwnedFd::from(w)).expect("stdin"), rx)
    }

    #[tokio::test]
    async fn lines_the_pipe_cannot_take_at_once_arrive_whole_and_in_order() {
        let (stdin, mut rx) = pipe_pair();
        // 2,000 lines of about 1 KiB: far more than a pipe holds (64 KiB),
        // sent while nothing reads, so most of them wait in the backlog.
        let mut expected = Vec::new();
        for i in 0..2000 {
            let line = format!("{i:05} {}\n", "x".repeat(1000));
            stdin.send(line.as_bytes()).expect("sent");
            expected.extend_from_slice(line.as_bytes());
        }
        assert!(
            stdin.0.state.lock().unwrap().writing,
            "a backlog is being written"
        );
        let mut got = vec![0; expected.len()];
        tokio::time::timeout(std::time::Duration::from_secs(10), rx.read_exact(&mut got))
            .await
            .expect("read within 10 s")
            .expect("read");
        assert!(got == expected, "every line whole and in order");
        // The backlog's task ended and gave its memory back.
        for _ in 0..100 {
            if !stdin.0.state.lock().unwrap().writing {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let state = stdin.0.state.lock().unwrap();
        assert!(!state.writing && state.backlog.capacity() == 0);
    }

    #[tokio::test]
    async fn a_line_the_pipe_takes_is_written_at_once_with_no_task() {
        let (stdin, mut rx) = pipe_pair();
        stdin.send(b"{\"id\":1}\n").expect("sent");
        assert!(!stdin.0.state.lock().unwrap().writing, "no backlog");
        let mut got = [0u8; 9];
        rx.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"{\"id\":1}\n");
    }

    #[tokio::test]
    async fn a_closed_reader_is_an_error_not_a_silent_loss() {
        let (stdin, rx) = pipe_pair();
        stdin.send(b"one\n").expect("the reader is still there");
        drop(rx);
        // The write that finds the pipe closed may be a backlog's task's:
        // the error then shows at a later send, within a bound.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while stdin.send(b"two\n").is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "a closed pipe is never reported"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(stdin.send(b"three\n").is_err(), "and stays an error");
        assert!(stdin.0.state.lock().unwrap().backlog.capacity() == 0);
    }
}
