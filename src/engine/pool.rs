//! Ready runners: started, confined, interpreter up and handshake done, waiting for their program. A pool
//! keeps `execution.pool_size` of them so a run does not pay the interpreter's start-up; each serves one run
//! and is discarded, and the pool refills in the background. A run never waits for the pool: with no ready
//! runner at hand it starts its own, exactly as without a pool. A runner that died while waiting is never
//! handed out.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptc_backends::protocol::{FromRunner, PROTOCOL_VERSION};
use ptc_backends::{RunnerControl, SandboxBackend, SpawnRequest};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lines::{Line, LineReader};

/// How long a runner started for the pool may take to say `ready`.
const POOL_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The `ready` line is tiny; anything longer is not one.
const MAX_READY_LINE: usize = 4096;

/// A runner past its handshake.
pub struct ReadyRunner {
    pub to_runner: Pin<Box<dyn AsyncWrite + Send>>,
    pub reader: LineReader<Pin<Box<dyn AsyncRead + Send>>>,
    pub control: Box<dyn RunnerControl>,
}

/// Starts a runner and waits (until `deadline`) for its `ready`. `Err` is the run's `SandboxError` text.
pub async fn start_ready(
    backend: &dyn SandboxBackend,
    request: &SpawnRequest,
    deadline: tokio::time::Instant,
) -> Result<ReadyRunner, String> {
    let runner = backend.spawn(request).await.map_err(|e| format!("SandboxError: {e}"))?;
    let mut control = runner.control;
    let mut reader = LineReader::new(runner.from_runner, MAX_READY_LINE);
    let why = match tokio::time::timeout_at(deadline, reader.next_line()).await {
        Err(_) => "the runner did not get ready in time".to_string(),
        Ok(Ok(Line::Complete(line))) => match FromRunner::parse(line) {
            Ok(FromRunner::Ready { version: PROTOCOL_VERSION }) => {
                return Ok(ReadyRunner { to_runner: runner.to_runner, reader, control });
            }
            Ok(FromRunner::Ready { version }) => {
                format!(
                    "the runner speaks protocol version {version}, the server {PROTOCOL_VERSION}; reinstall ptc-mcp"
                )
            }
            _ => "the runner did not start with a ready message".to_string(),
        },
        Ok(Ok(Line::End)) => "the runner exited before it was ready".to_string(),
        Ok(Ok(Line::TooLong { .. })) => "the runner did not start with a ready message".to_string(),
        Ok(Err(e)) => e.to_string(),
    };
    control.kill().await;
    let stderr = control.stderr_tail();
    let detail = if stderr.trim().is_empty() { String::new() } else { format!(": {}", stderr.trim()) };
    Err(format!("SandboxError: {why}{detail}"))
}

pub struct RunnerPool {
    backend: Arc<dyn SandboxBackend>,
    request: SpawnRequest,
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

    /// A ready runner: from the pool if one is waiting, else started now (ready by `deadline`). The caller
    /// refills the pool once its run is over, so that starting runners does not compete with the run for CPU.
    pub async fn take(&self, deadline: tokio::time::Instant) -> Result<ReadyRunner, String> {
        loop {
            let Some(mut runner) = self.state().ready.pop_front() else {
                return start_ready(self.backend.as_ref(), &self.request, deadline).await;
            };
            if !runner.control.has_exited() {
                return Ok(runner);
            }
            tracing::warn!("a ready runner had died while waiting (e.g. killed from outside); starting another");
            // Dropping it kills what is left of it and removes its scratch directory.
        }
    }

    /// Starts runners in the background until `size` are ready or starting.
    pub fn refill(self: &Arc<Self>) {
        let missing = {
            let mut state = self.state();
            if self.closing.is_cancelled() {
                return;
            }
            let missing = self.size.saturating_sub(state.ready.len() + state.starting);
            state.starting += missing;
            missing
        };
        for _ in 0..missing {
            let pool = Arc::clone(self);
            self.starts.spawn(async move {
                let deadline = tokio::time::Instant::now() + POOL_START_TIMEOUT;
                let started = tokio::select! {
                    started = start_ready(pool.backend.as_ref(), &pool.request, deadline) => Some(started),
                    () = pool.closing.cancelled() => None,
                };
                let mut state = pool.state();
                state.starting -= 1;
                match started {
                    // Dropped (killed) right away if the pool is closing.
                    Some(Ok(runner)) if !pool.closing.is_cancelled() => state.ready.push_back(runner),
                    Some(Err(e)) => tracing::warn!("could not start a runner for the pool: {e}"),
                    _ => {}
                }
            });
        }
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
