//! The accept loop: HTTP/1.1 and HTTP/2 (h2c prior knowledge, or ALPN over
//! TLS) on one port, WebSocket upgrades, optional TLS, and the connection
//! limits `axum::serve` does not have.
//!
//! Why our own loop: a session stream is long-lived, so a server that waits
//! for slow or silent peers runs out of sockets long before it runs out of
//! work. Here a peer that starts a request header must finish it within
//! [`ConnLimits::header_read_timeout`] (slowloris), a connection with no
//! request in flight is closed after [`ConnLimits::keep_alive_idle`], a TLS
//! handshake gets [`ConnLimits::tls_handshake_timeout`], and shutdown waits
//! for in-flight requests at most [`ConnLimits::shutdown_grace`].
//!
//! A stop is graceful at the sockets too: for [`ConnLimits::drain_accept`]
//! after the signal the loop still accepts and every HTTP/1.1 answer asks
//! its connection to close (`Connection: close`), so a balancer that has not
//! seen the instance's `/readyz` turn 503, or sends on a connection it kept
//! alive, loses no request; then it stops accepting and each connection
//! finishes what it has in flight (hyper's graceful shutdown: an idle one
//! closes, an HTTP/2 one gets a GOAWAY).

mod app;
mod conn;
mod due;
mod handoff;
mod sniff;
mod tls;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub(crate) use app::{App, Endpoint};
pub use tls::tls_config;

/// Time limits of one connection; `Default` suits a public endpoint.
///
/// Non-exhaustive: start from `ConnLimits::default()` and set fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnLimits {
    /// Once a peer sends the first byte of a request (or connects, for the
    /// first request), the whole header must arrive within this; else the
    /// connection is closed. Defends against slowloris. HTTP/1 bytes that
    /// arrive while a request is in flight are its body until it has read
    /// it whole; a pipelined header after them is timed from the end of
    /// the response before it.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight and nothing received for this
    /// long is closed (HTTP/1.1 keep-alive; HTTP/2 gets a GOAWAY).
    pub keep_alive_idle: Duration,
    /// Longest TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// HTTP/2 PING interval, to find dead peers under long streams (`None`: no pings).
    pub h2_ping_interval: Option<Duration>,
    /// On shutdown, how long in-flight requests may take before their
    /// connections are dropped. An [`McpServer`](crate::McpServer) waits
    /// this long, from the signal, for the work it promised (docs/fleet.md),
    /// then ends its streams and gives the connections a moment more.
    pub shutdown_grace: Duration,
    /// On shutdown, how long the server still accepts new connections
    /// (answering every HTTP/1.1 request with `Connection: close`) before it
    /// stops accepting: long enough for a balancer's health check to see
    /// `/readyz` turn 503 and stop sending. Part of the grace, not added to it.
    pub drain_accept: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(30),
            keep_alive_idle: Duration::from_secs(60),
            tls_handshake_timeout: Duration::from_secs(10),
            h2_ping_interval: Some(Duration::from_secs(20)),
            shutdown_grace: Duration::from_secs(10),
            drain_accept: Duration::from_secs(2),
        }
    }
}

/// Why a TLS configuration could not be built; each names the file at fault,
/// so an operator knows which flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// The certificate chain file could not be read or is not PEM.
    #[error("cannot read the TLS certificate chain {}", path.display())]
    ReadCert {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate chain file holds no `CERTIFICATE` block.
    #[error("the TLS certificate file {} holds no PEM certificate", path.display())]
    NoCert {
        /// The file.
        path: PathBuf,
    },
    /// The key file could not be read, is not PEM, or holds no private key.
    #[error("cannot read a PEM private key from {}", path.display())]
    ReadKey {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the pair (say, the key does not match the certificate).
    #[error("the TLS certificate {} and key {} do not make a server configuration", cert.display(), key.display())]
    Rejected {
        /// The certificate chain file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
}

/// Serves `app` on `listener` until `signal` completes; then, after
/// [`ConnLimits::drain_accept`] (accepting still, every HTTP/1.1 answer with
/// `Connection: close`), stops accepting, shuts every connection down
/// gracefully (in-flight requests finish, idle ones close) and returns once
/// all are gone or [`ConnLimits::shutdown_grace`] has passed since the
/// signal. With `tls`, every connection is TLS (ALPN `h2`, `http/1.1`).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnLimits,
    signal: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    // The loop polls it once it stops accepting, and closes connections
    // still open a margin after it: the grace in all, from the signal.
    let grace = limits
        .shutdown_grace
        .saturating_sub(limits.drain_accept + CLOSE_MARGIN);
    let cut_off = async move { tokio::time::sleep(grace).await };
    serve_app(listener, App::router(app), tls, limits, signal, cut_off).await
}

/// How long connections still open once the server ended its streams have
/// to close before they are dropped.
const CLOSE_MARGIN: Duration = Duration::from_millis(1500);

/// [`serve`] of an [`App`]: the server's own router may come with its
/// endpoint's POST, called without the router in front of it. After the
/// stop `signal`, connections still open [`CLOSE_MARGIN`] after `ended`
/// completes (polled from the signal on: the server has ended its streams,
/// or the grace is over) are dropped.
pub(crate) async fn serve_app(
    listener: TcpListener,
    app: App,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnLimits,
    signal: impl Future<Output = ()> + Send,
    ended: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let (stop_tx, stop_rx) = watch::channel(false);
    let closing = Arc::new(AtomicBool::new(false));
    let mut conns: JoinSet<Then> = JoinSet::new();
    tokio::pin!(signal);
    tokio::pin!(ended);
    // Pending until the signal; then the end of the accepting part of the drain.
    let mut accept_until: Pin<Box<dyn Future<Output = ()> + Send>> =
        Box::pin(std::future::pending());
    let mut signalled = false;
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut signal, if !signalled => {
                signalled = true;
                closing.store(true, Ordering::Release);
                accept_until = Box::pin(tokio::time::sleep(limits.drain_accept));
                continue;
            }
            () = &mut accept_until => break,
            Some(ended) = conns.join_next(), if !conns.is_empty() => {
                then(&mut conns, ended);
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, mostly: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let acceptor = acceptor.clone();
        let stop = stop_rx.clone();
        let closing = closing.clone();
        // A task of its own shape for each: a plain connection's task does
        // not carry the room a TLS handshake needs, for as long as it lives.
        match acceptor {
            None => conns.spawn(plain(stream, peer, app, limits, stop, closing)),
            Some(acceptor) => {
                conns.spawn(secure(acceptor, stream, peer, app, limits, stop, closing))
            }
        };
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let cut_off = async {
        ended.await;
        tokio::time::sleep(CLOSE_MARGIN).await;
    };
    let drained = async {
        while let Some(ended) = conns.join_next().await {
            then(&mut conns, ended);
        }
    };
    let drained = tokio::select! {
        () = drained => true,
        () = cut_off => false,
    };
    if !drained {
        tracing::warn!(
            left = conns.len(),
            "connections still busy after the shutdown grace; dropping them"
        );
        conns.shutdown().await;
    }
    Ok(())
}

/// What a connection's task leaves to run after it: an HTTP/1.1 SSE stream
/// taken over from hyper ([`handoff`]). It runs as a task of its own, sized
/// for what it holds, where the connection's task was sized for its largest
/// state (the protocol sniffing, hyper's connection), for as long as the
/// stream lives: an idle session's GET stream lives for hours.
type Then = Option<Pin<Box<dyn Future<Output = ()> + Send>>>;

/// Runs what a connection that `ended` left to run, in `conns` as well (so
/// shutdown waits for it as for any connection).
fn then(conns: &mut JoinSet<Then>, ended: Result<Then, tokio::task::JoinError>) {
    if let Ok(Some(next)) = ended {
        conns.spawn(async move {
            next.await;
            None
        });
    }
}

/// One cleartext connection: HTTP/1.1 or h2c, told by its first bytes.
/// `closing`: the server stops, and every HTTP/1.1 answer closes its
/// connection.
async fn plain(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    app: App,
    limits: ConnLimits,
    mut stop: watch::Receiver<bool>,
    closing: Arc<AtomicBool>,
) -> Then {
    let since = tokio::time::Instant::now();
    let proto = tokio::select! {
        p = sniff::cleartext(&stream, limits.header_read_timeout) => p,
        _ = stop.wait_for(|s| *s) => return None,
    };
    match proto {
        Some(p) => conn::serve_one(stream, app, limits, stop, closing, p, since).await,
        None => {
            tracing::debug!(%peer, "no request began in time, or the socket failed; closing");
            None
        }
    }
}

/// One TLS connection: the handshake, then the protocol ALPN chose.
async fn secure(
    acceptor: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    app: App,
    limits: ConnLimits,
    stop: watch::Receiver<bool>,
    closing: Arc<AtomicBool>,
) -> Then {
    let hs = tokio::time::timeout(limits.tls_handshake_timeout, acceptor.accept(stream));
    match hs.await {
        Ok(Ok(tls)) => {
            let proto = sniff::alpn(tls.get_ref().1.alpn_protocol());
            // The first header is due from the handshake's end.
            let now = tokio::time::Instant::now();
            conn::serve_one(tls, app, limits, stop, closing, proto, now).await
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}
