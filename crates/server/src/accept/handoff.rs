//! An HTTP/1.1 SSE stream written without hyper, once its head is out.
//!
//! An idle session's GET stream holds its connection for hours, and hyper
//! keeps its read and write buffers for every HTTP/1.1 connection for as long
//! as it lives (see [`crate::sse::feed`]). A `200` SSE answer to a GET is
//! therefore armed by the connection: hyper writes its head and nothing of its
//! body, the connection drops hyper's state once the head is flushed, and
//! [`stream`] writes the body's chunks in HTTP/1.1 chunked framing from then
//! on, holding no buffer between writes. The head says `connection: close`:
//! once the stream ends (its final chunk written) the connection closes, as it
//! would after any response a server will not keep alive.

use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::chunks::Receiver;

/// The most chunks already waiting that one write carries.
const BATCH: usize = 64;

/// Writes what `rx` receives to `io` as the rest of a chunked body, until
/// the sender ends (the final chunk is written, then the connection
/// closes), the client goes (a read finds the end or fails), or the server
/// stops while a write is blocked.
pub(super) async fn stream<S>(mut io: S, mut rx: Receiver, mut stop: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Bytes the client sends on a connection whose response never ends are a
    // request it pipelined, which this connection will not answer (its head
    // said `close`): they are read and dropped, and the end of input is the
    // client gone.
    let mut probe = [0u8; 32];
    loop {
        let first = tokio::select! {
            chunk = rx.recv() => chunk,
            read = io.read(&mut probe) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            },
        };
        // Writing is boxed: the task waits idle far longer than it writes,
        // and the state of a write would size it for all of its life.
        match first {
            Some(chunk) => {
                if Box::pin(write_ready(&mut io, chunk, &mut rx, &mut stop))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            None => return Box::pin(finish(&mut io, &mut stop)).await,
        }
    }
}

/// Writes `first` and what else is ready as one chunk; the end is left for
/// the next turn, after what came before it is written.
async fn write_ready<S: AsyncWrite + Unpin>(
    io: &mut S,
    first: Bytes,
    rx: &mut Receiver,
    stop: &mut watch::Receiver<bool>,
) -> io::Result<()> {
    let mut chunks = vec![first];
    while chunks.len() < BATCH {
        match rx.try_recv() {
            Some(chunk) => chunks.push(chunk),
            None => break,
        }
    }
    write(io, &frame(&chunks), stop).await
}

/// The final chunk, then the close (unless the server stops first).
async fn finish<S: AsyncWrite + Unpin>(io: &mut S, stop: &mut watch::Receiver<bool>) {
    if write(io, b"0\r\n\r\n", stop).await.is_ok() {
        tokio::select! {
            biased;
            _ = io.shutdown() => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
}

/// `chunks` as one HTTP/1.1 chunk (RFC 9112 7.1); empty when they carry no byte.
fn frame(chunks: &[Bytes]) -> Vec<u8> {
    let len: usize = chunks.iter().map(Bytes::len).sum();
    if len == 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(len + 20);
    out.extend_from_slice(format!("{len:x}\r\n").as_bytes());
    for c in chunks {
        out.extend_from_slice(c);
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Writes and flushes `bytes`, unless the server stops while the write is
/// blocked (a client that does not read must not hold its connection past
/// shutdown). The write is tried first: at shutdown the pump has ended the
/// stream, and what it sent before, then the final chunk, still go out to a
/// client that reads.
async fn write<S: AsyncWrite + Unpin>(
    io: &mut S,
    bytes: &[u8],
    stop: &mut watch::Receiver<bool>,
) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    tokio::select! {
        biased;
        r = async { io.write_all(bytes).await?; io.flush().await } => r,
        _ = stop.wait_for(|s| *s) => Err(io::ErrorKind::Interrupted.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_framed_as_one() {
        let f = frame(&[
            Bytes::from_static(b"data: a\n\n"),
            Bytes::from_static(b": k\n\n"),
        ]);
        assert_eq!(f, b"e\r\ndata: a\n\n: k\n\n\r\n");
        assert!(frame(&[Bytes::new()]).is_empty());
    }

    /// The body's end is the final chunk and the connection's close; a
    /// client that goes ends the writer.
    #[tokio::test]
    async fn the_end_is_a_final_chunk_then_close() {
        let (server, mut client) = tokio::io::duplex(1024);
        let (tx, rx) = crate::chunks::channel(8);
        let (_stop_tx, stop) = watch::channel(false);
        let writer = tokio::spawn(stream(server, rx, stop));
        tx.send(Bytes::from_static(b"data: 1\n\n")).await.unwrap();
        drop(tx);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"9\r\ndata: 1\n\n\r\n0\r\n\r\n");
        writer.await.unwrap();

        let (server, client) = tokio::io::duplex(1024);
        let (tx, rx) = crate::chunks::channel(8);
        let (_stop_tx, stop) = watch::channel(false);
        let writer = tokio::spawn(stream(server, rx, stop));
        drop(client);
        tokio::time::timeout(std::time::Duration::from_secs(5), writer)
            .await
            .expect("the writer ends when its client goes")
            .unwrap();
        assert!(tx.is_closed(), "and drops the receiver, so the pump stops");
    }

    /// At shutdown the pump ends the stream; what it sent before, and the
    /// final chunk, still reach a client that reads (the stop only cuts a
    /// write that is blocked).
    #[tokio::test]
    async fn after_the_stop_what_can_be_written_still_is() {
        for _ in 0..20 {
            let (server, mut client) = tokio::io::duplex(64 * 1024);
            let (tx, rx) = crate::chunks::channel(8);
            let (stop_tx, stop) = watch::channel(false);
            stop_tx.send(true).unwrap();
            for i in 0..8 {
                tx.send(Bytes::from(format!("data: {i}\n\n")))
                    .await
                    .unwrap();
            }
            drop(tx);
            stream(server, rx, stop).await;
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            let text = String::from_utf8(got).unwrap();
            assert!(text.contains("data: 7\n\n"), "{text}");
            assert!(text.ends_with("\r\n0\r\n\r\n"), "{text}");
        }
    }
}
