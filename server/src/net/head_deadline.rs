//! A deadline for the first request's head on every accepted connection.
//!
//! Without it a peer can hold a socket forever: one that connects and says
//! nothing (half-open), or one that trickles its upgrade request a byte at a
//! time (slow-loris). hyper, as `axum::serve` runs it, has no such limit.
//! [`HeadDeadline`] wraps a listener; each connection it hands out fails its
//! next read with `TimedOut` (and hyper drops it) unless the end of the first
//! request head (`\r\n\r\n`) has arrived within the limit. After that the
//! connection is the endpoint's: a WebSocket has its own heartbeat, and the
//! dashboard's keep-alive connections are short-lived by nature.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What a peer gets to send the first request head.
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// A listener whose connections must send a request head in time.
pub struct HeadDeadline<L> {
    inner: L,
    limit: Duration,
}

impl<L> HeadDeadline<L> {
    pub fn new(inner: L, limit: Duration) -> Self {
        HeadDeadline { inner, limit }
    }
}

impl<L: axum::serve::Listener> axum::serve::Listener for HeadDeadline<L> {
    type Io = HeadDeadlineIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        (HeadDeadlineIo::new(io, self.limit), addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails its reads once its deadline passes without a
/// complete request head.
pub struct HeadDeadlineIo<T> {
    inner: T,
    /// `None` once the head is complete.
    deadline: Option<Pin<Box<Sleep>>>,
    /// How much of `\r\n\r\n` the bytes read so far end with.
    matched: usize,
}

impl<T> HeadDeadlineIo<T> {
    fn new(inner: T, limit: Duration) -> Self {
        HeadDeadlineIo {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(limit))),
            matched: 0,
        }
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// Feeds bytes read; disarms the deadline at the end of the head.
    fn saw(&mut self, bytes: &[u8]) {
        const END: &[u8] = b"\r\n\r\n";
        for &b in bytes {
            self.matched = if b == END[self.matched] {
                self.matched + 1
            } else if b == b'\r' {
                1
            } else {
                0
            };
            if self.matched == END.len() {
                self.deadline = None;
                return;
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for HeadDeadlineIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(deadline) = this.deadline.as_mut() {
            if deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no complete request head in time",
                )));
            }
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.deadline.is_some() {
            if let Poll::Ready(Ok(())) = &polled {
                let new = buf.filled()[before..].to_vec();
                this.saw(&new);
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for HeadDeadlineIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests;
