//! An official MCP SDK client as a test drives it: a child process
//! (`interop/node/client.mjs` or `interop/python/client.py`) that prints one
//! line per thing it saw and takes commands on stdin.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// An official SDK client process (interop/node/client.mjs or
/// interop/python/client.py): one line per thing it saw, commands on stdin.
pub struct SdkClient {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line so far.
    pub seen: Vec<String>,
}

impl SdkClient {
    /// Runs `program args`; a missing program fails the test.
    pub fn spawn(program: &str, args: &[String]) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {program}: {e}; run scripts/test to install the SDK clients")
            });
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (30 s at most) for a line satisfying `pred` and returns it.
    pub fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => panic!(
                    "the SDK client exited waiting for {what}; saw {:?}",
                    self.seen
                ),
            }
        }
        panic!("timed out waiting for {what}; saw {:?}", self.seen);
    }

    /// Collects whatever arrives within `d`.
    pub fn drain_for(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(_) => break,
            }
        }
    }

    /// Sends one command line.
    pub fn send(&mut self, cmd: &str) {
        writeln!(self.child.stdin.as_mut().expect("stdin"), "{cmd}").expect("write command");
    }

    /// `i` of every `EVENT count i` seen so far for this `count`.
    pub fn events(&self, count: u64) -> Vec<u64> {
        self.seen
            .iter()
            .filter_map(|l| l.strip_prefix("EVENT "))
            .filter_map(|rest| rest.split_once(' '))
            .filter(|(c, _)| c.parse::<u64>().ok() == Some(count))
            .filter_map(|(_, i)| i.parse().ok())
            .collect()
    }
}

impl Drop for SdkClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
