//! Processes the two-instance tests drive: `rmcp_durable` instances, the
//! official SDK clients, and a switchable TCP proxy standing in for a load
//! balancer in front of the instances.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::{example, example_binary};
use std::path::Path;

/// One `rmcp_durable` process.
pub struct Instance {
    child: Child,
    /// `http://ADDR/mcp`.
    pub url: String,
    /// `ADDR`.
    pub addr: SocketAddr,
}

impl Instance {
    /// Starts one on a free port with `--store store` and waits for its line.
    pub fn spawn(store: &str) -> Self {
        Self::spawn_bin(&example_binary(), store)
    }

    /// Starts the example `name` (which takes `--listen` and `--store` and
    /// prints `listening on URL`, as `rmcp_durable` does).
    pub fn spawn_example(name: &str, store: &str) -> Self {
        Self::spawn_bin_with(&example(name), store, &[])
    }

    /// [`Self::spawn_example`] with `args` added (e.g. `--transport rmcp`).
    pub fn spawn_example_with(name: &str, store: &str, args: &[&str]) -> Self {
        Self::spawn_bin_with(&example(name), store, args)
    }

    fn spawn_bin(bin: &Path, store: &str) -> Self {
        Self::spawn_bin_with(bin, store, &[])
    }

    fn spawn_bin_with(bin: &Path, store: &str, args: &[&str]) -> Self {
        let mut child = Command::new(bin)
            .args(["--listen", "127.0.0.1:0", "--store", store])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let url = mcp_resume_testkit::listening_url(&mut child)
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
        let addr = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .parse()
            .expect("an address");
        Self { child, url, addr }
    }

    /// `kill -9`.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A TCP proxy on 127.0.0.1 that sends each new connection to the current
/// target: what a client behind a load balancer sees when an instance dies.
pub struct Proxy {
    /// `http://ADDR/mcp`.
    pub url: String,
    target: Arc<Mutex<SocketAddr>>,
    /// Set to black-hole what the connections open now receive.
    stall: Arc<Mutex<Arc<AtomicBool>>>,
}

impl Proxy {
    /// Starts it on `rt`, forwarding to `target`.
    pub fn start(rt: &tokio::runtime::Runtime, target: SocketAddr) -> Self {
        let target = Arc::new(Mutex::new(target));
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let t = target.clone();
        let stall: Arc<Mutex<Arc<AtomicBool>>> = Arc::default();
        let st = stall.clone();
        rt.spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let to = *t.lock().expect("target");
                let stalled = st.lock().expect("stall").clone();
                tokio::spawn(async move {
                    if let Ok(outbound) = tokio::net::TcpStream::connect(to).await {
                        pipe(inbound, outbound, stalled).await;
                    }
                });
            }
        });
        Self {
            url: format!("http://{addr}/mcp"),
            target,
            stall,
        }
    }

    /// From now on, the connections open now silently drop everything the
    /// server sends (a stalled network path); later connections are not affected.
    pub fn stall(&self) {
        let mut cur = self.stall.lock().expect("stall");
        cur.store(true, Ordering::SeqCst);
        *cur = Arc::default();
    }

    /// New connections go to `target` from now on.
    pub fn switch(&self, target: SocketAddr) {
        *self.target.lock().expect("target") = target;
    }
}

/// Copies both ways until either side ends; server bytes vanish once `stalled`.
async fn pipe(
    inbound: tokio::net::TcpStream,
    outbound: tokio::net::TcpStream,
    stalled: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut ci, mut co) = inbound.into_split();
    let (mut si, mut so) = outbound.into_split();
    let up = tokio::io::copy(&mut ci, &mut so);
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match si.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if stalled.load(Ordering::SeqCst) {
                continue;
            }
            if co.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// The official SDK clients, driven as child processes.
#[allow(unused_imports)]
pub use mcp_resume_testkit::SdkClient;
