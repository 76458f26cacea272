//! The commands clients send a Redis, as they arrive (`MONITOR`): round
//! trips, which `INFO commandstats` cannot tell from the commands a script
//! runs inside one.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `redis-cli MONITOR` on a Redis, collecting what it prints until
/// [`Monitor::stop`].
pub struct Monitor {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Monitor {
    /// Starts monitoring the Redis on 127.0.0.1:`port`; returns once
    /// Redis confirmed (every command after this call is seen).
    pub(crate) fn start(port: u16) -> Self {
        let mut child = Command::new("redis-cli")
            .args(["-p", &port.to_string(), "MONITOR"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-cli (it comes with redis-server)");
        let out = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        let started = Instant::now();
        while !lines.lock().unwrap().iter().any(|l| l.trim() == "OK") {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "redis-cli MONITOR did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Self {
            child,
            lines,
            reader: Some(reader),
        }
    }

    /// Stops, and returns what clients sent, one command a row, its words
    /// unquoted (the name in lower case): round trips, a script's own
    /// commands left out (`MONITOR` shows them as the script's, `[0 lua]`).
    pub fn stop(mut self) -> Vec<Vec<String>> {
        // What was sent last is printed within this.
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        let lines = self.lines.lock().unwrap();
        lines.iter().filter_map(|line| command(line)).collect()
    }
}

/// A `MONITOR` line's command, unless a script ran it: `TIME [DB SOURCE]
/// "NAME" "ARG" ...` (arguments with quotes or escapes in them are not
/// unescaped: the tests name keys and commands).
fn command(line: &str) -> Option<Vec<String>> {
    let (_, rest) = line.split_once(" [")?;
    let (source, words) = rest.split_once("] ")?;
    if source.ends_with(" lua") {
        return None;
    }
    let words = words.strip_prefix('"')?.strip_suffix('"')?;
    let mut out: Vec<String> = words.split("\" \"").map(str::to_owned).collect();
    out[0].make_ascii_lowercase();
    Some(out)
}

/// How many of `sent` are `name` (lower case) on a key starting with `prefix`.
pub fn count_sent(sent: &[Vec<String>], name: &str, prefix: &str) -> usize {
    sent.iter()
        .filter(|c| c[0] == name && c.get(1).is_some_and(|k| k.starts_with(prefix)))
        .count()
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
