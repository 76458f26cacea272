//! HAProxy in front of the fleet, configured from `deploy/haproxy.cfg`, the
//! file an operator copies: everything in it is kept but the address the
//! frontend binds and the `server` lines, which name this fleet's slots.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `deploy/haproxy.cfg`, as shipped: a copy inside the crate (a published
/// crate holds only its own files), kept identical by the test below.
pub(crate) const TEMPLATE: &str = include_str!("haproxy.cfg");

/// The template with the frontend bound to `listen` and one `server` line
/// per port of `slots` (a slot with nothing running is marked down by the
/// health check until an instance starts there).
pub(crate) fn config(listen: &str, slots: &[u16]) -> String {
    let mut out = String::new();
    let mut servers_written = false;
    for line in TEMPLATE.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("bind ") {
            out.push_str(&format!("    bind {listen}\n"));
        } else if trimmed.starts_with("server ") {
            if !servers_written {
                for (i, port) in slots.iter().enumerate() {
                    out.push_str(&format!("    server mcp{} 127.0.0.1:{port}\n", i + 1));
                }
                servers_written = true;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A running `haproxy`, stopped on drop.
pub(crate) struct Balancer {
    child: Child,
}

impl Balancer {
    /// Writes the configuration into `dir` and starts `haproxy` in the
    /// foreground on it; returns once `listen` accepts connections.
    pub(crate) fn start(dir: &Path, listen: &str, slots: &[u16]) -> Result<Self, String> {
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config(listen, slots))
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        let log = std::fs::File::create(dir.join("haproxy.log"))
            .map_err(|e| format!("creating haproxy.log: {e}"))?;
        let mut child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                format!(
                    "starting haproxy (Debian package `haproxy`; scripts/test installs it): {e}"
                )
            })?;
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(dir.join("haproxy.log")).unwrap_or_default();
                return Err(format!("haproxy exited ({status}): {}", log.trim()));
            }
            if TcpStream::connect(listen).is_ok() {
                return Ok(Self { child });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        Err(format!("haproxy did not listen on {listen} within 10 s"))
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_holds_the_config_deploy_ships() {
        let shipped = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/haproxy.cfg"
        ))
        .expect("deploy/haproxy.cfg");
        assert_eq!(
            TEMPLATE, shipped,
            "crates/cli/src/fleet/haproxy.cfg differs from deploy/haproxy.cfg: copy it"
        );
    }

    #[test]
    fn the_shipped_config_is_kept_but_for_its_addresses() {
        let c = config("127.0.0.1:9999", &[7001, 7002]);
        assert!(c.contains("    bind 127.0.0.1:9999\n"));
        assert!(c.contains("    server mcp1 127.0.0.1:7001\n"));
        assert!(c.contains("    server mcp2 127.0.0.1:7002\n"));
        assert!(!c.contains("8081"), "{c}");
        for kept in [
            "option httpchk GET /readyz",
            "retry-on conn-failure empty-response",
            "option redispatch",
            "timeout tunnel 1h",
        ] {
            assert!(c.contains(kept), "{kept} went missing");
        }
    }
}
