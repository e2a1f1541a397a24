//! What one HTTP connection may cost: how many may be open at once, and two clocks that close the slow and
//! the silent. A request's head must arrive within `header_read_timeout` — counted from the connection's
//! start, or from the first byte of a later request — and a connection with no request in flight may stay
//! silent for `keep_alive_timeout` between requests. hyper's own header timeout starts whenever it waits for
//! a head, so it cannot tell a slow head from a quiet keep-alive connection; these clocks run in the
//! connection's reads instead, and a request in flight (a long run, an event stream) is never timed.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::task::AtomicWaker;
use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::config::HttpConfig;

/// The connections open at once: `serve.http.max_connections`, but at most half the open-files limit, so
/// that runs, downstream servers and the audit file always find descriptors.
pub fn connection_cap(configured: usize) -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return configured;
    }
    let half = usize::try_from(limit.rlim_cur / 2).unwrap_or(usize::MAX).max(1);
    if half < configured {
        tracing::warn!(
            "serve.http.max_connections is {configured}, but the open-files limit is {} (ulimit -n): at most {half} \
             connections are kept open at once",
            limit.rlim_cur
        );
    }
    configured.min(half)
}

/// How many connections are open now: each holds an [`Open`] while it lives.
#[derive(Debug, Default, Clone)]
pub struct OpenCount(Arc<AtomicUsize>);

/// One open connection, counted until dropped.
pub struct Open(Arc<AtomicUsize>);

impl OpenCount {
    pub fn open(&self) -> Open {
        self.0.fetch_add(1, Ordering::Relaxed);
        Open(Arc::clone(&self.0))
    }

    pub fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How long a connection may take, from `serve.http`.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header_read: Duration,
    pub keep_alive: Duration,
}

impl Timeouts {
    pub fn from_config(http: &HttpConfig) -> Timeouts {
        Timeouts { header_read: http.header_read_timeout(), keep_alive: http.keep_alive_timeout() }
    }
}

/// Where a connection is in its cycle of requests; shared by its reads and its requests.
#[derive(Clone)]
pub struct Clock {
    shared: Arc<Shared>,
    timeouts: Timeouts,
}

struct Shared {
    phase: Mutex<Phase>,
    /// The connection's last read that found nothing: woken when a clock starts, so that it is armed even
    /// if that read happened while the request was in flight (nothing else would wake it).
    reader: AtomicWaker,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// A request's head is on its way (or the connection is new).
    Head { since: Instant },
    /// The last response is sent; nothing of the next request has arrived.
    Idle { since: Instant },
    /// A request is being answered: no clock runs.
    Busy,
}

impl Clock {
    pub fn start(timeouts: Timeouts) -> Clock {
        let shared = Shared { phase: Mutex::new(Phase::Head { since: Instant::now() }), reader: AtomicWaker::new() };
        Clock { shared: Arc::new(shared), timeouts }
    }

    /// The head is complete: until [`Clock::request_ended`], the connection is not timed.
    pub fn request_started(&self) {
        self.set(Phase::Busy);
    }

    /// The response is sent (or dropped): the connection waits for the next request.
    pub fn request_ended(&self) {
        self.set(Phase::Idle { since: Instant::now() });
        self.shared.reader.wake();
    }

    fn bytes_arrived(&self) {
        let mut phase = self.lock();
        if let Phase::Idle { .. } = *phase {
            *phase = Phase::Head { since: Instant::now() };
        }
    }

    /// When the connection is to be closed if nothing changes, and why.
    fn deadline(&self) -> Option<(Instant, &'static str)> {
        match *self.lock() {
            Phase::Head { since } => Some((since + self.timeouts.header_read, "the request head took too long")),
            Phase::Idle { since } => Some((since + self.timeouts.keep_alive, "the connection was idle too long")),
            Phase::Busy => None,
        }
    }

    fn set(&self, to: Phase) {
        *self.lock() = to;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.shared.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection's stream whose reads fail with `TimedOut` once its [`Clock`] runs out (hyper then closes it).
pub struct TimedIo<S> {
    inner: S,
    clock: Clock,
    timer: Pin<Box<Sleep>>,
    armed_for: Option<Instant>,
}

impl<S> TimedIo<S> {
    pub fn new(inner: S, clock: Clock) -> Self {
        TimedIo { inner, clock, timer: Box::pin(tokio::time::sleep(Duration::ZERO)), armed_for: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedIo<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.clock.bytes_arrived();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                this.clock.shared.reader.register(cx.waker());
                let Some((deadline, why)) = this.clock.deadline() else { return Poll::Pending };
                if this.armed_for != Some(deadline) {
                    this.timer.as_mut().reset(deadline);
                    this.armed_for = Some(deadline);
                }
                match this.timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimedIo<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that tells the connection's [`Clock`] when it is sent or dropped.
pub struct Timed<B> {
    body: B,
    clock: Clock,
}

impl<B> Timed<B> {
    pub fn new(body: B, clock: Clock) -> Self {
        Timed { body, clock }
    }
}

impl<B> Drop for Timed<B> {
    fn drop(&mut self) {
        self.clock.request_ended();
    }
}

impl<B: Body + Unpin> Body for Timed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const TIMEOUTS: Timeouts = Timeouts { header_read: Duration::from_secs(10), keep_alive: Duration::from_secs(60) };

    async fn read_error(io: &mut TimedIo<tokio::io::DuplexStream>) -> io::Error {
        let mut buf = [0u8; 64];
        loop {
            match io.read(&mut buf).await {
                Ok(0) => panic!("the stream ended instead of timing out"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_must_arrive_within_the_header_timeout_counted_from_the_start() {
        let (client, server) = tokio::io::duplex(1024);
        let mut io = TimedIo::new(server, Clock::start(TIMEOUTS));
        let started = Instant::now();
        let dribble = tokio::spawn(async move {
            let mut client = client;
            // One byte every 5 s: each arrives, none completes the head.
            for _ in 0..10 {
                client.write_all(b"P").await.unwrap();
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            client
        });
        let error = read_error(&mut io).await;
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(error.to_string(), "the request head took too long");
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        dribble.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn between_requests_the_keep_alive_timeout_runs_until_the_next_head_starts() {
        let (mut client, server) = tokio::io::duplex(1024);
        let clock = Clock::start(TIMEOUTS);
        let mut io = TimedIo::new(server, clock.clone());
        clock.request_started();
        // A request in flight is never timed, however long it takes.
        let mut buf = [0u8; 8];
        assert!(tokio::time::timeout(Duration::from_secs(3600), io.read(&mut buf)).await.is_err());
        clock.request_ended();
        let idle_from = Instant::now();
        tokio::time::sleep(Duration::from_secs(59)).await;
        client.write_all(b"G").await.unwrap();
        assert_eq!(io.read(&mut buf).await.unwrap(), 1);
        // The next head's first byte came within the keep-alive timeout; now the head's own clock runs.
        let error = read_error(&mut io).await;
        assert_eq!(error.to_string(), "the request head took too long");
        assert_eq!(idle_from.elapsed(), Duration::from_secs(69));

        let (_client, server) = tokio::io::duplex(1024);
        let clock = Clock::start(TIMEOUTS);
        let mut io = TimedIo::new(server, clock.clone());
        clock.request_started();
        clock.request_ended();
        let idle_from = Instant::now();
        assert_eq!(read_error(&mut io).await.to_string(), "the connection was idle too long");
        assert_eq!(idle_from.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_that_waits_from_the_request_on_is_timed_once_the_response_is_sent() {
        let (_client, server) = tokio::io::duplex(1024);
        let clock = Clock::start(TIMEOUTS);
        clock.request_started();
        let mut io = TimedIo::new(server, clock.clone());
        let read = tokio::spawn(async move { io.read(&mut [0u8; 8]).await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!read.is_finished(), "a request in flight is not timed");
        let ended = Instant::now();
        clock.request_ended();
        let read = tokio::time::timeout(Duration::from_secs(600), read).await.expect("the waiting read is timed");
        assert_eq!(read.unwrap().unwrap_err().to_string(), "the connection was idle too long");
        assert_eq!(ended.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test]
    async fn a_response_body_ends_the_request_when_dropped() {
        let clock = Clock::start(TIMEOUTS);
        clock.request_started();
        let body = Timed::new(http_body_util::Empty::<bytes::Bytes>::new(), clock.clone());
        assert_eq!(clock.deadline(), None);
        drop(body);
        assert!(matches!(*clock.lock(), Phase::Idle { .. }));
    }

    #[test]
    fn the_cap_leaves_half_the_open_files_limit_free() {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
        let half = usize::try_from(limit.rlim_cur / 2).unwrap_or(usize::MAX);
        assert_eq!(connection_cap(10), 10.min(half));
        assert_eq!(connection_cap(usize::MAX), half.max(1));
    }
}
