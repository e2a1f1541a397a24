//! The exec stream's stdout and stderr as readers that end when the stream does. kube's message loop shuts its
//! pipes down when it ends cleanly (the status came, or the socket closed) but drops them unclosed when it fails
//! (a connection reset, a send that failed); a tokio simplex pipe's reader then waits for ever.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// `inner`, ending once `over` is cancelled (when the message loop has ended) and what it holds is read.
pub struct EndsWithStream<R> {
    inner: R,
    over: Pin<Box<WaitForCancellationFutureOwned>>,
    ended: bool,
}

impl<R> EndsWithStream<R> {
    pub fn new(inner: R, over: &CancellationToken) -> Self {
        EndsWithStream { inner, over: Box::pin(over.clone().cancelled_owned()), ended: false }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EndsWithStream<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.ended {
            if let ready @ Poll::Ready(_) = Pin::new(&mut this.inner).poll_read(cx, buf) {
                return ready;
            }
            if this.over.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.ended = true;
        }
        // Nothing writes any more: what the pipe holds (written before the loop ended) is all there is.
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Pending => Poll::Ready(Ok(())),
            ready => ready,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_pipe_dropped_unclosed_ends_once_the_stream_is_over_with_all_it_held() {
        let (reader, mut writer) = tokio::io::simplex(64);
        let over = CancellationToken::new();
        let mut reader = EndsWithStream::new(reader, &over);
        writer.write_all(b"held").await.unwrap();
        let mut buffer = [0; 64];
        let n = reader.read(&mut buffer).await.unwrap();
        assert_eq!(&buffer[..n], b"held");
        let early = tokio::time::timeout(Duration::from_millis(100), reader.read(&mut buffer)).await;
        assert!(early.is_err(), "it must not end while the stream goes on");
        writer.write_all(b" and more").await.unwrap();
        drop(writer);
        over.cancel();
        let mut rest = String::new();
        tokio::time::timeout(Duration::from_secs(5), reader.read_to_string(&mut rest)).await.unwrap().unwrap();
        assert_eq!(rest, " and more");
    }
}
