//! The handshake of every server the tests and benchmarks spawn (`mcp-resume
//! serve`, the rmcp examples, the SDK peers of `benches/peers`): started on
//! port 0 or a free port, it prints `listening on URL` as its first line on
//! stdout once it accepts connections.

use std::io::{BufRead, BufReader};
use std::process::Child;

/// Waits for the first line on `child`'s stdout (which must be piped; it is
/// taken, and closed once read) and returns the URL of `listening on URL`.
///
/// `Err` says what came instead: another line, or nothing at all (the
/// process exited, for example because its port was taken). The child is
/// left running either way; killing it is the caller's business.
pub fn listening_url(child: &mut Child) -> Result<String, String> {
    let stdout = child
        .stdout
        .take()
        .ok_or("the child's stdout is not piped (or was taken)")?;
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| format!("reading the first line: {e}"))?;
    match line.trim().strip_prefix("listening on ") {
        Some(url) => Ok(url.to_owned()),
        None => Err(format!("unexpected first line {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::listening_url;
    use std::process::{Command, Stdio};

    fn sh(script: &str) -> std::process::Child {
        Command::new("sh")
            .args(["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh")
    }

    #[test]
    fn the_url_of_the_first_line() {
        let mut c = sh("echo 'listening on http://127.0.0.1:1234/mcp'; echo more");
        assert_eq!(
            listening_url(&mut c).as_deref(),
            Ok("http://127.0.0.1:1234/mcp")
        );
        let _ = c.wait();
    }

    #[test]
    fn anything_else_is_an_error() {
        let mut c = sh("echo 'error: address in use'");
        let e = listening_url(&mut c).unwrap_err();
        assert!(e.contains("address in use"), "{e}");
        let _ = c.wait();
        let mut c = sh("exit 1");
        assert!(listening_url(&mut c).is_err());
        let _ = c.wait();
        assert!(listening_url(&mut c).unwrap_err().contains("not piped"));
    }
}
