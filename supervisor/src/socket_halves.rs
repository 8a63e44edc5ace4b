//! A Unix socket that wakes its reader only when the peer says something.
//!
//! The runtime registers a socket for both directions, and a Unix socket signals "writable"
//! every time its peer reads: each answer a client read (each frame a worker read) woke the
//! daemon once more, for nothing. Here the read half alone is registered; the write half
//! writes at once and registers itself only to wait for room, when the peer is behind.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, Interest, ReadBuf};

/// Splits a connected socket into its two halves, which share its one descriptor (a
/// connection costs no extra file descriptor); the socket is put in non-blocking mode.
pub fn split(stream: UnixStream) -> io::Result<(ReadSide, WriteSide)> {
    stream.set_nonblocking(true)?;
    let socket = Arc::new(register(stream, Interest::READABLE)?);
    Ok((ReadSide(Arc::clone(&socket)), WriteSide(socket)))
}

/// Takes a connected socket out of the runtime's two-way registration and splits it.
pub(crate) fn split_async(
    stream: cellvisor_ipc::socket::AsyncStream,
) -> io::Result<(ReadSide, WriteSide)> {
    let cellvisor_ipc::socket::AsyncStream::UdSocket(stream) = stream;
    split(UnixStream::from(std::os::fd::OwnedFd::try_from(stream)?))
}

/// Registers `socket` with the runtime for `interest` alone.
fn register(socket: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: a `UnixStream` owns its descriptor, and `as_raw_fd` returns that same open
    // descriptor until the stream is dropped, which happens only with the `AsyncFd` owning it.
    unsafe { AsyncFd::register_with_interest(socket, interest) }.map_err(io::Error::from)
}

/// The half that reads, registered for readability only.
pub struct ReadSide(Arc<AsyncFd<UnixStream>>);

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            match guard.try_io(|socket| socket.get_ref().read(unfilled)) {
                Ok(Ok(read)) => {
                    // A short read took all the socket held: the next read waits for the
                    // peer's next bytes instead of trying once more for `EAGAIN` (one system
                    // call per message saved). Bytes that arrive meanwhile are an edge the
                    // runtime sees at its next poll, so none is missed.
                    if read > 0 && read < room {
                        guard.clear_ready();
                    }
                    buf.advance(read);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(err)) => return Poll::Ready(Err(err)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The half that writes (straight to the shared descriptor); it shuts the connection's
/// sending side when dropped, so the peer sees the end even while the read half lives on.
pub struct WriteSide(Arc<AsyncFd<UnixStream>>);

impl WriteSide {
    /// Writes all of `bytes`, waiting for the peer to make room when its buffer is full.
    pub async fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let mut room: Option<AsyncFd<UnixStream>> = None;
        while !bytes.is_empty() {
            match self.0.get_ref().write(bytes) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => bytes = &bytes[written..],
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    // Registered (on a duplicate descriptor) only while the peer is behind.
                    let waiter = match &room {
                        Some(waiter) => waiter,
                        None => room
                            .insert(register(self.0.get_ref().try_clone()?, Interest::WRITABLE)?),
                    };
                    // Cleared before the next try: a wake-up in between means room, which
                    // that try then finds.
                    waiter.writable().await?.clear_ready();
                }
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

impl Drop for WriteSide {
    fn drop(&mut self) {
        let _ = self.0.get_ref().shutdown(std::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn both_halves_carry_bytes_and_a_full_buffer_waits_for_the_reader() {
        let (ours, theirs) = tokio::net::UnixStream::pair().expect("pair");
        let (mut read, mut write) = split(ours.into_std().expect("std")).expect("split");
        // More than any socket buffer holds: the write must wait for the reader.
        let big = vec![7u8; 4 << 20];
        let expected = big.len();
        let writer = tokio::spawn(async move {
            write.write_all(&big).await.expect("write");
        });
        let (mut their_read, mut their_write) = theirs.into_split();
        let mut got = vec![0u8; expected];
        their_read.read_exact(&mut got).await.expect("read");
        assert!(got.iter().all(|b| *b == 7));
        writer.await.expect("writer");
        // Dropping the write side ends what the peer reads.
        assert_eq!(their_read.read(&mut [0u8; 8]).await.expect("eof"), 0);
        tokio::io::AsyncWriteExt::write_all(&mut their_write, b"hello")
            .await
            .expect("write");
        let mut line = [0u8; 5];
        read.read_exact(&mut line).await.expect("read");
        assert_eq!(&line, b"hello");
    }
}
