//! Ready runners: started, confined, interpreter up and handshake done, waiting for their program. A pool
//! keeps them so a run does not pay the interpreter's start-up; each serves one run and is discarded, and the
//! pool refills in the background. It follows demand: it keeps at least `execution.pool_size` ready, and as
//! many as programs recently ran at once (up to [`DEMAND_CAP`]), going back to `pool_size` once no such
//! burst was seen for [`DEMAND_MEMORY`]. A run never waits for the pool: with no ready runner at hand it
//! starts its own, exactly as without a pool. A runner that died while waiting is never handed out.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptc_backends::protocol::{FromRunner, PROTOCOL_VERSION};
use ptc_backends::{RunnerControl, SandboxBackend, SpawnError, SpawnRequest};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lines::{Line, LineReader, ReadError};

/// How long a runner started for the pool may take to say `ready`.
const POOL_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The `ready` line is tiny; anything longer is not one.
const MAX_READY_LINE: usize = 4096;
/// The most runners the pool keeps ready for bursts (unless `pool_size` asks for more): each is an idle
/// interpreter (about 20 MiB, part of it shared) or container.
pub const DEMAND_CAP: usize = 8;
/// How long a burst of concurrent programs is remembered before the pool shrinks back to `pool_size`.
pub const DEMAND_MEMORY: Duration = Duration::from_secs(300);
/// How long after a run the pool waits to replace its runner: the run's answer goes out first, where a start
/// (a core busy for tens of milliseconds) would hold it up by milliseconds (p50 of `print(1)` 8.9 -> 5.1 ms).
const REFILL_AFTER_A_RUN: Duration = Duration::from_millis(5);
/// The same while other runs go on: runs started together end together, and the starts that replace the
/// first ones to end held up the others' ends by tens of milliseconds (bursts of 8 concurrent 0.5 s
/// programs took 1.10x the ideal; 1.05x this way).
const REFILL_WHILE_OTHERS_RUN: Duration = Duration::from_millis(100);

/// A runner past its handshake.
pub struct ReadyRunner {
    pub to_runner: Pin<Box<dyn AsyncWrite + Send>>,
    pub reader: LineReader<Pin<Box<dyn AsyncRead + Send>>>,
    pub control: Box<dyn RunnerControl>,
}

/// Why a runner could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// It started, but did not say `ready`; `stderr` is what it wrote there.
    #[error("{why}{}", detail(.stderr))]
    NotReady { why: NotReady, stderr: String },
}

/// What a runner wrote to stderr, as the end of a message.
fn detail(stderr: &str) -> String {
    if stderr.is_empty() { String::new() } else { format!(": {stderr}") }
}

#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("the runner speaks protocol version {0}, the server {PROTOCOL_VERSION}; reinstall ptc-mcp")]
    Version(u32),
    #[error("the runner did not start with a ready message")]
    NoReadyMessage,
    #[error("the runner exited before it was ready")]
    Exited,
    #[error(transparent)]
    Read(ReadError),
}

/// Starts a runner and waits for its `ready`, as long as the caller waits.
pub async fn start_ready(backend: &dyn SandboxBackend, request: &SpawnRequest) -> Result<ReadyRunner, StartError> {
    let runner = backend.spawn(request).await?;
    let mut control = runner.control;
    let mut reader = LineReader::new(runner.from_runner, MAX_READY_LINE);
    let why = match reader.next_line().await {
        Ok(Line::Complete(line)) => match FromRunner::parse(line) {
            Ok(FromRunner::Ready { version: PROTOCOL_VERSION }) => {
                return Ok(ReadyRunner { to_runner: runner.to_runner, reader, control });
            }
            Ok(FromRunner::Ready { version }) => NotReady::Version(version),
            _ => NotReady::NoReadyMessage,
        },
        Ok(Line::End) => NotReady::Exited,
        Ok(Line::TooLong { .. }) => NotReady::NoReadyMessage,
        Err(e) => NotReady::Read(e),
    };
    control.kill().await;
    Err(StartError::NotReady { why, stderr: control.stderr_tail().trim().to_string() })
}

pub struct RunnerPool {
    backend: Arc<dyn SandboxBackend>,
    request: SpawnRequest,
    /// `execution.pool_size`: the fewest runners kept ready (0: no pool at all).
    size: usize,
    state: Mutex<PoolState>,
    /// Runners being started for the pool; waited for at shutdown.
    starts: TaskTracker,
    /// Cancelled at shutdown: starts under way give up (their runner is killed and its scratch removed).
    closing: CancellationToken,
}

#[derive(Default)]
struct PoolState {
    ready: VecDeque<ReadyRunner>,
    starting: usize,
    demand: Demand,
    /// A task is waiting to shrink the pool once the remembered burst expires.
    shrink_scheduled: bool,
}

/// How many programs run at once, and the most that did recently.
#[derive(Debug, Default, Clone, Copy)]
struct Demand {
    running: usize,
    peak: usize,
    /// When `running` last reached `peak`.
    peak_at: Option<Instant>,
}

impl Demand {
    fn started(&mut self, now: Instant) {
        self.running += 1;
        if self.running >= self.recent_peak(now) {
            self.peak = self.running;
            self.peak_at = Some(now);
        }
    }

    fn finished(&mut self) {
        self.running = self.running.saturating_sub(1);
    }

    /// The most programs that ran at once within [`DEMAND_MEMORY`] (at least those running now).
    fn recent_peak(&self, now: Instant) -> usize {
        let remembered = self.peak_at.is_some_and(|at| now.duration_since(at) < DEMAND_MEMORY);
        if remembered { self.peak.max(self.running) } else { self.running }
    }

    /// Ready runners to keep for a pool of at least `size`.
    fn target(&self, size: usize, now: Instant) -> usize {
        if size == 0 {
            return 0;
        }
        self.recent_peak(now).min(size.max(DEMAND_CAP)).max(size)
    }
}

/// One runner being started for the pool, counted in `starting` until this is dropped — when the runner is
/// ready or failed, and also when its task panicked or was aborted, so that the count never strays.
struct Start {
    pool: Arc<RunnerPool>,
    /// Handed to the pool when the start ends.
    ready: Option<ReadyRunner>,
}

impl Start {
    async fn run(mut self, delay: Duration) {
        let pool = Arc::clone(&self.pool);
        let start = async {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            tokio::time::timeout(POOL_START_TIMEOUT, start_ready(pool.backend.as_ref(), &pool.request)).await
        };
        tokio::select! {
            started = start => match started {
                Ok(Ok(runner)) => self.ready = Some(runner),
                Ok(Err(e)) => tracing::warn!("could not start a runner for the pool: {e}"),
                Err(_) => tracing::warn!(
                    "could not start a runner for the pool: it was not ready within {}s",
                    POOL_START_TIMEOUT.as_secs()
                ),
            },
            () = pool.closing.cancelled() => {}
        }
    }
}

impl Drop for Start {
    fn drop(&mut self) {
        let mut state = self.pool.state();
        state.starting -= 1;
        match self.ready.take() {
            Some(runner) if !self.pool.closing.is_cancelled() => state.ready.push_back(runner),
            // Dropping it (outside the lock) kills it and removes its scratch directory.
            refused => {
                drop(state);
                drop(refused);
            }
        }
    }
}

/// One run's share of the demand, from before it takes a runner until it is over; then the pool refills.
pub struct Lease {
    pool: Arc<RunnerPool>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let others_run = {
            let demand = &mut self.pool.state().demand;
            demand.finished();
            demand.running > 0
        };
        self.pool.refill_after(if others_run { REFILL_WHILE_OTHERS_RUN } else { REFILL_AFTER_A_RUN });
    }
}

impl RunnerPool {
    pub fn new(backend: Arc<dyn SandboxBackend>, request: SpawnRequest, size: usize) -> Arc<RunnerPool> {
        Arc::new(RunnerPool {
            backend,
            request,
            size,
            state: Mutex::new(PoolState::default()),
            starts: TaskTracker::new(),
            closing: CancellationToken::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a run as demand until the lease is dropped (when the run is over), which refills the pool:
    /// starting runners then does not compete with the run for CPU.
    pub fn lease(self: &Arc<Self>) -> Lease {
        self.state().demand.started(Instant::now());
        Lease { pool: Arc::clone(self) }
    }

    /// The time limit of its runners.
    pub fn timeout(&self) -> Duration {
        self.request.timeout
    }

    /// Runners waiting in the pool, and runners being started for it.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state();
        (state.ready.len(), state.starting)
    }

    /// A ready runner: from the pool if one is waiting, else started now (as long as the caller waits).
    pub async fn take(&self) -> Result<ReadyRunner, StartError> {
        loop {
            let Some(mut runner) = self.state().ready.pop_front() else {
                return start_ready(self.backend.as_ref(), &self.request).await;
            };
            if !runner.control.has_exited() {
                return Ok(runner);
            }
            tracing::warn!("a ready runner had died while waiting (e.g. killed from outside); starting another");
            // Dropping it kills what is left of it and removes its scratch directory.
        }
    }

    /// A runner started now for one run whose time limit is `timeout` rather than the pool's (the limit its
    /// CPU time gets), as long as the caller waits; never kept in the pool.
    pub async fn start_own(&self, timeout: Duration) -> Result<ReadyRunner, StartError> {
        let request = SpawnRequest { timeout, ..self.request.clone() };
        start_ready(self.backend.as_ref(), &request).await
    }

    /// Starts runners in the background until as many as demand asks for are ready or starting, or lets
    /// go of those past it once a burst is forgotten.
    pub fn refill(self: &Arc<Self>) {
        self.refill_after(Duration::ZERO);
    }

    /// [`refill`](Self::refill), with the starts beginning after `delay`.
    fn refill_after(self: &Arc<Self>, delay: Duration) {
        let (missing, surplus) = {
            let mut state = self.state();
            if self.closing.is_cancelled() {
                return;
            }
            let target = state.demand.target(self.size, Instant::now());
            let missing = target.saturating_sub(state.ready.len() + state.starting);
            state.starting += missing;
            let keep = target.min(state.ready.len());
            let surplus: Vec<ReadyRunner> = state.ready.drain(keep..).collect();
            if target > self.size && !std::mem::replace(&mut state.shrink_scheduled, true) {
                self.schedule_shrink();
            }
            (missing, surplus)
        };
        // Dropping a runner kills it and removes its scratch directory.
        drop(surplus);
        for _ in 0..missing {
            let start = Start { pool: Arc::clone(self), ready: None };
            self.starts.spawn(start.run(delay));
        }
    }

    /// Shrinks the pool back towards `size` once the remembered burst expires (and again later if it was
    /// renewed meanwhile), even if no program runs to trigger a refill.
    fn schedule_shrink(self: &Arc<Self>) {
        let pool = Arc::clone(self);
        self.starts.spawn(async move {
            loop {
                let expires = pool.state().demand.peak_at.map_or_else(Instant::now, |at| at + DEMAND_MEMORY);
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(expires)) => {}
                    () = pool.closing.cancelled() => return,
                }
                if pool.state().demand.target(pool.size, Instant::now()) <= pool.size {
                    break;
                }
            }
            pool.state().shrink_scheduled = false;
            pool.refill();
        });
    }

    /// At shutdown: stops refilling, kills every waiting runner and those being started, and waits until
    /// they are gone with their scratch directories.
    pub async fn close(&self) {
        self.closing.cancel();
        let drained: Vec<ReadyRunner> = self.state().ready.drain(..).collect();
        let cleanups = drained.into_iter().map(|mut runner| async move { runner.control.kill().await });
        futures::future::join_all(cleanups).await;
        self.starts.close();
        self.starts.wait().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::{Behaviour, FakeBackend};

    #[tokio::test]
    async fn a_start_that_panics_is_no_longer_counted_and_the_pool_starts_again() {
        let backend = Arc::new(FakeBackend::new(Behaviour::Answers, Behaviour::Panics));
        let request = SpawnRequest { limits: Default::default(), timeout: Duration::from_secs(1) };
        let pool = RunnerPool::new(Arc::clone(&backend) as Arc<dyn SandboxBackend>, request, 1);
        for attempt in 1..=2 {
            pool.refill();
            pool.starts.close();
            pool.starts.wait().await;
            pool.starts.reopen();
            assert_eq!(pool.state().starting, 0, "attempt {attempt}");
            assert_eq!(backend.spawns(), attempt, "a new start each time");
        }
    }

    #[test]
    fn demand_grows_with_concurrent_runs_up_to_the_cap_and_is_forgotten_after_a_while() {
        let at = Instant::now();
        let mut demand = Demand::default();
        assert_eq!(demand.target(2, at), 2);
        for _ in 0..5 {
            demand.started(at);
        }
        assert_eq!(demand.target(2, at), 5);
        for _ in 0..5 {
            demand.finished();
        }
        assert_eq!(demand.target(2, at + DEMAND_MEMORY / 2), 5, "a burst is remembered");
        assert_eq!(demand.target(2, at + DEMAND_MEMORY), 2, "then forgotten");
        for _ in 0..20 {
            demand.started(at);
        }
        assert_eq!(demand.target(2, at), DEMAND_CAP);
        assert_eq!(demand.target(12, at), 12, "pool_size above the cap is kept");
        assert_eq!(demand.target(0, at), 0, "pool_size 0 means no pool");
    }
}
