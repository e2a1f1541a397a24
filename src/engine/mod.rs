//! Running one program: start a runner in the configured sandbox, hand it the program, serve its tool
//! calls and helpers through the registry, and enforce every budget and limit here in the server.

mod approval;
mod attachments;
mod deadline;
mod gate;
mod output;
mod pool;
mod record;
mod report;
mod run;
#[cfg(test)]
mod testing;
mod trace;
#[cfg(test)]
mod transcript;
mod trim;

use std::sync::Arc;
use std::time::Duration;

use ptc_backends::{Availability, SandboxBackend, SpawnRequest};
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::audit::AuditLog;
use crate::config::ExecutionConfig;
use crate::registry::Registry;
pub use approval::{ApprovalRequest, Approver, ConfirmPolicy};
use pool::RunnerPool;
pub use record::RunRecord;
pub use report::{Outcome, RunReport};

/// How long the first run after start-up waits for servers that are still connecting.
pub const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(15);
/// An unusable sandbox is probed again after this long, so that a passing failure (an engine still starting,
/// an overloaded machine) does not last until the server restarts, while runs in between fail at once.
const REPROBE_AFTER: Duration = Duration::from_secs(30);

struct Probed {
    availability: Availability,
    at: Instant,
}

impl Probed {
    fn still_holds(&self, now: Instant) -> bool {
        self.availability.is_usable() || now.duration_since(self.at) < REPROBE_AFTER
    }
}

/// Who asked for a run, and how to reach them while it runs.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// Names the client in the run's record: an HTTP session id, `stdio`, `cli`.
    pub session: String,
    /// The client's cancellation of this request.
    pub cancel: CancellationToken,
    /// Told each time a tool call finishes, if the client wants progress.
    pub progress: Option<watch::Sender<RunProgress>>,
    /// Asks the person behind the client to approve calls of `tools.confirm` (`None`: nobody can be asked).
    pub approver: Option<Arc<dyn Approver>>,
}

impl std::fmt::Debug for dyn Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

/// How far a run is: tool calls finished so far (never decreasing), and the last one's tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunProgress {
    pub finished: u64,
    pub last_tool: String,
}

pub struct Engine {
    backend: Arc<dyn SandboxBackend>,
    /// The last probe's answer; a usable one is kept for good.
    availability: Mutex<Option<Probed>>,
    pool: Arc<RunnerPool>,
    /// Runs under way, so that shutdown can wait for them to stop.
    runs: TaskTracker,
    /// Cancelled at shutdown: runs under way stop at once.
    stopping: CancellationToken,
    /// Runners of finished runs still being reaped and cleaned up.
    cleanups: TaskTracker,
    registry: Arc<Registry>,
    settings: ExecutionConfig,
    /// Where each run's record is appended, if configured.
    audit: Option<Arc<AuditLog>>,
    /// The bound on runs at once, if any.
    gate: Option<gate::RunGate>,
    /// The calls that need approval, if any.
    confirm: Option<ConfirmPolicy>,
}

impl Engine {
    pub fn new(backend: Arc<dyn SandboxBackend>, registry: Arc<Registry>, settings: ExecutionConfig) -> Self {
        let request = SpawnRequest { limits: settings.limits.clone(), timeout: settings.timeout() };
        let pool = RunnerPool::new(Arc::clone(&backend), request, settings.pool_size);
        Engine {
            backend,
            availability: Mutex::new(None),
            pool,
            runs: TaskTracker::new(),
            stopping: CancellationToken::new(),
            cleanups: TaskTracker::new(),
            registry,
            settings,
            audit: None,
            gate: None,
            confirm: None,
        }
    }

    /// Makes calls of the policy's tools wait for the user's approval.
    pub fn with_confirm(mut self, confirm: Option<ConfirmPolicy>) -> Self {
        self.confirm = confirm;
        self
    }

    /// Lets at most `limit` programs run at once; more wait for a slot (see [`gate`]).
    pub fn with_run_limit(mut self, limit: Option<usize>) -> Self {
        self.gate = limit.map(gate::RunGate::new);
        self
    }

    /// Appends a record of every run to `audit`.
    pub fn with_audit(mut self, audit: Option<Arc<AuditLog>>) -> Self {
        self.audit = audit;
        self
    }

    /// How long a call may wait for approval, when some calls need it (`tools.confirm`).
    pub fn confirm_timeout(&self) -> Option<Duration> {
        self.confirm.as_ref().map(|policy| policy.timeout)
    }

    pub fn settings(&self) -> &ExecutionConfig {
        &self.settings
    }

    pub fn backend_kind(&self) -> ptc_backends::SandboxKind {
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

    /// At shutdown: stops the runs under way, kills the runners waiting in the pool or being started for it,
    /// finishes cleaning up after past runs, and lets the backend remove what it keeps outside this process,
    /// so that nothing outlives the server.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        self.runs.close();
        self.runs.wait().await;
        self.pool.close().await;
        self.cleanups.close();
        self.cleanups.wait().await;
        self.backend.shutdown().await;
    }

    /// Runs `code` to the end, a failure, the time limit, or the caller's cancel; logs one line about it and
    /// appends its record to the audit file.
    pub async fn execute(&self, code: &str, caller: Caller) -> RunReport {
        let _running = self.runs.token();
        let started = record::Started::now(caller.session.clone());
        let report = self.run(code, caller).await;
        let record = started.finish(code, self.backend.kind().resolve_auto(), &report, self.settings.trace);
        record.log();
        if let Some(audit) = &self.audit {
            audit.append(&record);
        }
        report
    }

    async fn run(&self, code: &str, caller: Caller) -> RunReport {
        let Caller { cancel, progress, approver, .. } = caller;
        let stopped = || {
            RunReport::failed(
                Outcome::Killed,
                "ExecutionError: the server is shutting down; the run was not started".into(),
            )
        };
        if self.stopping.is_cancelled() {
            return stopped();
        }
        let _slot = match &self.gate {
            Some(gate) => match gate.enter(self.settings.timeout(), &cancel, &self.stopping).await {
                Ok(slot) => Some(slot),
                Err(refused) => return refused,
            },
            None => None,
        };
        if let Availability::Unavailable { reason } = self.availability().await {
            return RunReport::failed(
                Outcome::Sandbox,
                format!("SandboxError: the '{}' sandbox is unavailable: {reason}", self.backend.kind()),
            );
        }
        let deadline = tokio::time::Instant::now() + self.settings.timeout();
        // Counts as demand for ready runners while it runs; the pool refills when it is over.
        let _lease = self.pool.lease();
        let preparing = async {
            tokio::join!(self.pool.take(deadline), self.registry.wait_for_first_attempts(FIRST_CONNECT_WAIT)).0
        };
        let runner = tokio::select! {
            runner = preparing => runner,
            () = self.stopping.cancelled() => return stopped(),
        };
        let runner = match runner {
            Ok(runner) => runner,
            Err(error) => return RunReport::failed(Outcome::Sandbox, error),
        };
        let context = run::RunContext {
            registry: &self.registry,
            settings: &self.settings,
            code,
            deadline: deadline::Deadline::new(deadline),
            cancel,
            progress,
            approval: self.confirm.clone().map(|policy| approval::Approval { policy, approver }),
            stopping: &self.stopping,
            cleanups: &self.cleanups,
        };
        run::drive(runner, context).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_come_from_the_os_not_from_a_generator_that_can_be_replayed() {
        let id = || {
            let report = RunReport::default();
            let record = record::Started::now("s".into()).finish(
                "",
                ptc_backends::SandboxKind::None,
                &report,
                Default::default(),
            );
            let line: serde_json::Value = serde_json::from_slice(&record.audit_line(false)).unwrap();
            line["run_id"].as_str().unwrap().to_string()
        };
        fastrand::seed(7);
        let first = id();
        fastrand::seed(7);
        assert_ne!(first, id());
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
