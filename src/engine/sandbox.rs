//! The sandbox as runs use it: the backend's availability and the pool of ready runners. Preparing a run
//! — the availability check, a ready runner, the first connections to downstream servers — is what a run
//! does before its program starts.

use std::sync::Arc;
use std::time::Duration;

use ptc_backends::{Availability, SandboxBackend, SandboxKind, SpawnRequest};
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;

use super::pool::{Lease, ReadyRunner, RunnerPool, StartError};
use crate::registry::{FIRST_CONNECT_WAIT, Registry};

/// An unusable sandbox is probed again after this long, so that a passing failure (an engine still starting,
/// an overloaded machine) does not last until the server restarts, while runs in between fail at once.
const REPROBE_AFTER: Duration = Duration::from_secs(30);

pub struct Sandbox {
    backend: Arc<dyn SandboxBackend>,
    /// The last probe's answer; a usable one is kept for good.
    availability: Mutex<Option<Probed>>,
    /// Runners for runs with `timeout_seconds`, filled once the sandbox is usable.
    pool: Arc<RunnerPool>,
    /// Runners for tasks (their time limit, and the CPU-time limit that follows it), filled once a task ran:
    /// at most one kept ready beyond a burst of tasks.
    task_pool: Option<Arc<RunnerPool>>,
}

struct Probed {
    availability: Availability,
    at: Instant,
}

impl Probed {
    fn still_holds(&self, now: Instant) -> bool {
        self.availability.is_usable() || now.duration_since(self.at) < REPROBE_AFTER
    }
}

/// A run ready for its program.
pub struct Prepared {
    pub runner: ReadyRunner,
    /// The run's share of the demand for ready runners of its pool, until it is over.
    pub lease: Option<Lease>,
}

/// Why a run could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum Unprepared {
    #[error("the '{kind}' sandbox is unavailable: {reason}")]
    Unavailable { kind: SandboxKind, reason: String },
    #[error(transparent)]
    Start(#[from] StartError),
}

/// What a run's preparation is waiting for, for the message when the run ends first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preparing {
    /// The run's session was busy with an earlier run.
    Session,
    Probe,
    Runner,
    Servers,
}

impl std::fmt::Display for Preparing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Preparing::Session => "an earlier run of its session was still running",
            Preparing::Probe => "the sandbox's availability check had not finished",
            Preparing::Runner => "the sandbox had not started a runner for it yet",
            Preparing::Servers => "downstream servers were still making their first connection",
        })
    }
}

impl Sandbox {
    /// With `task_timeout`, tasks run with that time limit get a pool of their own.
    pub fn new(
        backend: Arc<dyn SandboxBackend>,
        request: SpawnRequest,
        pool_size: usize,
        task_timeout: Option<Duration>,
    ) -> Self {
        let task_pool = task_timeout.filter(|timeout| *timeout != request.timeout).map(|timeout| {
            let request = SpawnRequest { timeout, ..request.clone() };
            RunnerPool::new(Arc::clone(&backend), request, pool_size.min(1))
        });
        let pool = RunnerPool::new(Arc::clone(&backend), request, pool_size);
        Sandbox { backend, availability: Mutex::new(None), pool, task_pool }
    }

    /// The pool of runners whose time limit is `timeout`, if there is one.
    fn pool_for(&self, timeout: Duration) -> Option<&Arc<RunnerPool>> {
        std::iter::once(&self.pool).chain(&self.task_pool).find(|pool| pool.timeout() == timeout)
    }

    pub fn kind(&self) -> SandboxKind {
        self.backend.kind()
    }

    /// The backend's availability: probed on first use, and again (at most every [`REPROBE_AFTER`]) while
    /// unusable. Once usable, the pool of ready runners starts filling.
    pub async fn availability(&self) -> Availability {
        let mut last = self.availability.lock().await;
        if let Some(probed) = last.as_ref().filter(|probed| probed.still_holds(Instant::now())) {
            return probed.availability.clone();
        }
        let availability = self.backend.probe().await;
        if availability.is_usable() {
            self.pool.refill();
        }
        *last = Some(Probed { availability: availability.clone(), at: Instant::now() });
        availability
    }

    /// Whether the sandbox can run programs, as far as is known without waiting: `None` while its check is
    /// under way, or when the last answer is stale (a check is then started in the background).
    pub fn usable_now(self: &Arc<Self>) -> Option<bool> {
        let last = self.availability.try_lock().ok()?;
        if let Some(probed) = last.as_ref().filter(|probed| probed.still_holds(Instant::now())) {
            return Some(probed.availability.is_usable());
        }
        drop(last);
        let sandbox = Arc::clone(self);
        tokio::spawn(async move { sandbox.availability().await });
        None
    }

    /// Runners waiting in the pool, and runners being started for it.
    pub fn pool_counts(&self) -> (usize, usize) {
        std::iter::once(&self.pool)
            .chain(&self.task_pool)
            .map(|pool| pool.counts())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }

    /// Prepares a run, saying in `phase` what it waits for; as long as the caller waits. With
    /// `first_connections`, it also waits for servers making their first connection (see [`FIRST_CONNECT_WAIT`]).
    /// The runner's time limit is `timeout` (its CPU-time limit follows it): from the pool with that limit,
    /// else started for the run.
    pub async fn prepare(
        &self,
        registry: &Registry,
        first_connections: bool,
        timeout: Duration,
        phase: watch::Sender<Preparing>,
    ) -> Result<Prepared, Unprepared> {
        if let Availability::Unavailable { reason } = self.availability().await {
            return Err(Unprepared::Unavailable { kind: self.kind(), reason });
        }
        // Counts as demand from before the run takes a runner; the pool refills when the run is over.
        let pool = self.pool_for(timeout);
        let lease = pool.map(RunnerPool::lease);
        phase.send_replace(Preparing::Runner);
        let runner = async {
            let runner = match pool {
                Some(pool) => pool.take().await,
                None => self.pool.start_own(timeout).await,
            };
            phase.send_replace(Preparing::Servers);
            runner
        };
        let servers = async {
            if first_connections {
                registry.wait_for_first_attempts(FIRST_CONNECT_WAIT).await;
            }
        };
        let (runner, ()) = tokio::join!(runner, servers);
        Ok(Prepared { runner: runner?, lease })
    }

    /// At shutdown, before the backend's: kills the ready runners and those being started.
    pub async fn close_pool(&self) {
        self.pool.close().await;
        if let Some(pool) = &self.task_pool {
            pool.close().await;
        }
    }

    /// At shutdown, last: lets the backend remove what it keeps outside this process.
    pub async fn shutdown_backend(&self) {
        self.backend.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::{Behaviour, FakeBackend};

    fn sandbox(probe: Behaviour) -> Arc<Sandbox> {
        let request = SpawnRequest { limits: Default::default(), timeout: Duration::from_secs(1) };
        Arc::new(Sandbox::new(Arc::new(FakeBackend::new(probe, Behaviour::Answers)), request, 0, None))
    }

    #[tokio::test]
    async fn usability_is_told_without_waiting_and_a_check_is_started_when_none_holds() {
        let answering = sandbox(Behaviour::Answers);
        assert_eq!(answering.usable_now(), None, "not checked yet");
        let mut told = None;
        for _ in 0..1000 {
            tokio::task::yield_now().await;
            told = answering.usable_now();
            if told.is_some() {
                break;
            }
        }
        assert_eq!(told, Some(true), "the check started in the background answered");
        let hanging = sandbox(Behaviour::Hangs);
        for _ in 0..10 {
            assert_eq!(hanging.usable_now(), None, "a check under way is never waited for");
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn a_usable_sandbox_is_kept_and_an_unusable_one_is_probed_again_later() {
        let at = Instant::now();
        let probed = |availability| Probed { availability, at };
        let later = at + REPROBE_AFTER;
        let usable = probed(Availability::Available { detail: "ok".into() });
        assert!(usable.still_holds(at) && usable.still_holds(later));
        let unusable = probed(Availability::Unavailable { reason: "engine down".into() });
        assert!(unusable.still_holds(at + REPROBE_AFTER / 2));
        assert!(!unusable.still_holds(later));
    }
}
