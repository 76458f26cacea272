//! Which HTTP a connection speaks, decided before hyper reads a byte.
//!
//! A cleartext connection's first bytes are peeked (left in the socket for
//! hyper) to tell HTTP/2's preface from an HTTP/1 request; a TLS connection is
//! told by its ALPN. Not hyper-util's auto connection, which reads the first
//! 24 bytes and hands them back through a rewinding reader: hyper's read
//! buffer then grows to hold the rest by doubling, and every HTTP/1.1
//! connection keeps the doubled buffer for as long as it lives, which an idle
//! session's GET stream does for hours (benches/results/paths.md).

use std::time::Duration;

use tokio::net::TcpStream;

/// The protocol one connection is served with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Proto {
    /// HTTP/1.1 (with upgrades: WebSocket).
    Http1,
    /// HTTP/2: h2c with prior knowledge, or ALPN `h2` over TLS.
    Http2,
    /// Unknown yet (TLS without ALPN, or only part of the HTTP/2 preface
    /// arrived): hyper-util's auto connection reads the first bytes to tell.
    Either,
}

/// The HTTP/2 connection preface (RFC 9113 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a cleartext connection speaks, from its first bytes, peeked so that
/// hyper still reads them. A strict beginning of the HTTP/2 preface (rare:
/// clients send it in one write) is left to hyper-util's auto connection,
/// which reads until it can tell, rather than peeked again and again.
/// `None`: nothing arrived within `within` (the first request's header
/// time), or the socket failed; the connection is to be closed.
pub(super) async fn cleartext(tcp: &TcpStream, within: Duration) -> Option<Proto> {
    let mut buf = [0u8; PREFACE.len()];
    let n = tokio::time::timeout(within, tcp.peek(&mut buf))
        .await
        .ok()?
        .ok()?;
    Some(decide(&buf[..n]).unwrap_or(Proto::Either))
}

/// The protocol the first bytes `seen` of a connection name, or `None` while
/// they are a strict beginning of the HTTP/2 preface. No bytes at all (the
/// peer closed) is HTTP/1: hyper ends the connection when it reads the end.
fn decide(seen: &[u8]) -> Option<Proto> {
    if seen.is_empty() || !PREFACE.starts_with(seen) {
        return Some(Proto::Http1);
    }
    (seen.len() == PREFACE.len()).then_some(Proto::Http2)
}

/// What a TLS connection speaks, by its negotiated ALPN protocol.
pub(super) fn alpn(protocol: Option<&[u8]>) -> Proto {
    match protocol {
        Some(b"h2") => Proto::Http2,
        Some(b"http/1.1") => Proto::Http1,
        _ => Proto::Either,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_decide_as_soon_as_they_can() {
        assert_eq!(decide(b"POST /mcp HTTP/1.1\r\n"), Some(Proto::Http1));
        assert_eq!(decide(b"GET / HTTP/1.1\r\n"), Some(Proto::Http1));
        // "P" could still be either; "PO" is not the preface.
        assert_eq!(decide(b"P"), None);
        assert_eq!(decide(b"PO"), Some(Proto::Http1));
        assert_eq!(decide(b"PRI * HTTP/2.0\r\n"), None);
        assert_eq!(decide(PREFACE), Some(Proto::Http2));
        assert_eq!(decide(b""), Some(Proto::Http1));
    }

    #[test]
    fn alpn_names_the_protocol_and_its_absence_leaves_it_open() {
        assert_eq!(alpn(Some(b"h2")), Proto::Http2);
        assert_eq!(alpn(Some(b"http/1.1")), Proto::Http1);
        assert_eq!(alpn(None), Proto::Either);
    }

    #[tokio::test]
    async fn a_peeked_preface_is_left_for_hyper_and_silence_is_bounded() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // The whole preface: HTTP/2, and every byte still there to read.
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        client.write_all(PREFACE).await.unwrap();
        client.flush().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            cleartext(&server, Duration::from_secs(5)).await,
            Some(Proto::Http2)
        );
        let mut all = [0u8; 24];
        server.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, PREFACE, "every byte peeked is still there to read");
        // Half of it: left to the auto connection, at once.
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(&PREFACE[..10]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = std::time::Instant::now();
        assert_eq!(
            cleartext(&server, Duration::from_secs(5)).await,
            Some(Proto::Either)
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        // A peer that sends nothing is given up on.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert_eq!(cleartext(&server, Duration::from_millis(100)).await, None);
    }
}
