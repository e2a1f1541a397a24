//! Running one program: start a runner in the configured sandbox, hand it the program, serve its tool
//! calls and helpers through the registry, and enforce every budget and limit here in the server.

mod approval;
mod attachments;
mod expiry;
mod files;
mod gate;
mod login;
mod output;
mod pool;
mod preview;
mod record;
mod report;
mod run;
mod sandbox;
mod session;
#[cfg(test)]
mod testing;
mod trace;
#[cfg(test)]
mod transcript;
mod trim;

use std::sync::Arc;
use std::time::Duration;

use ptc_backends::protocol::SessionRun;
use ptc_backends::{Availability, SandboxBackend, SpawnRequest};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::audit::AuditLog;
use crate::config::ExecutionConfig;
use crate::metrics::RunMetrics;
use crate::registry::Registry;
pub use approval::{ApprovalRequest, Approver, ConfirmPolicy, Refusal};
use expiry::{Expired, Expiry};
pub use report::{Outcome, RunReport};
use sandbox::{Prepared, Preparing, Sandbox};
pub use session::{BadName, SessionKey};
use session::{Claim, Sessions};

/// Who asked for a run, and how to reach them while it runs.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// Names the client in the run's record: an HTTP session id, `stdio`, `cli`.
    pub session: String,
    /// The client's cancellation of this request.
    pub cancel: CancellationToken,
    /// Told each time a tool call finishes or the program calls `progress()`, if the client wants progress.
    pub progress: Option<watch::Sender<RunProgress>>,
    /// Asks the person behind the client to approve calls of `tools.confirm` (`None`: nobody can be asked).
    pub approver: Option<Arc<dyn Approver>>,
    /// The named session the run keeps its interpreter in (`execute_program`'s `session`).
    pub named_session: Option<SessionKey>,
}

impl std::fmt::Debug for dyn Approver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Approver")
    }
}

/// What a run from the shell (`ptc-mcp run`) asks beyond an MCP client's.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// Gets the program's output as it arrives, in chunks (the report still has what it keeps of it).
    /// While the channel is full, the program's output waits, as at a pipe; once it is closed, the rest
    /// goes only to the report.
    pub printed: Option<mpsc::Sender<String>>,
    /// The caller has already waited for the servers the program needs: the run does not wait for those
    /// still making their first connection.
    pub servers_awaited: bool,
    /// A time limit other than `execution.timeout_seconds` (a task's): the run gets a runner of its own,
    /// started with that limit (its CPU-time limit follows it), never one from the pool.
    pub time_limit: Option<TimeLimit>,
}

/// A run's time limit, and the config key that sets it (messages name it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeLimit {
    pub seconds: f64,
    pub key: &'static str,
}

impl TimeLimit {
    /// `execution.timeout_seconds`, the limit of every run but a task's.
    pub fn of_runs(settings: &ExecutionConfig) -> Self {
        TimeLimit { seconds: settings.timeout_seconds, key: "execution.timeout_seconds" }
    }

    /// `execution.task_timeout_seconds`, the limit of a program run as a task.
    pub fn of_tasks(settings: &ExecutionConfig) -> Self {
        TimeLimit { seconds: settings.task_timeout_seconds, key: "execution.task_timeout_seconds" }
    }

    pub fn duration(self) -> Duration {
        Duration::from_secs_f64(self.seconds)
    }
}

/// How far a run is: tool calls finished so far (never decreasing), the last one's tool, and what the program
/// last said with `progress()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunProgress {
    pub finished: u64,
    pub last_tool: String,
    /// `progress()` calls so far.
    pub said: u64,
    /// The last one's message (at most `MAX_PROGRESS_MESSAGE` bytes) and fraction (0 to 1).
    pub message: String,
    pub fraction: Option<f64>,
}

pub struct Engine {
    sandbox: Arc<Sandbox>,
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
    /// Every finished run is counted here too.
    metrics: RunMetrics,
    /// Named sessions: runners kept between the runs of one client.
    sessions: Sessions,
}

impl Engine {
    pub fn new(backend: Arc<dyn SandboxBackend>, registry: Arc<Registry>, settings: ExecutionConfig) -> Self {
        let request = SpawnRequest { limits: settings.limits.clone(), timeout: settings.timeout() };
        let task_timeout = (settings.max_tasks_per_client > 0).then(|| TimeLimit::of_tasks(&settings).duration());
        let cleanups = TaskTracker::new();
        Engine {
            sessions: Sessions::new(&settings.sessions, cleanups.clone()),
            sandbox: Arc::new(Sandbox::new(backend, request, settings.pool_size, task_timeout)),
            metrics: RunMetrics::new(registry.server_names()),
            runs: TaskTracker::new(),
            stopping: CancellationToken::new(),
            cleanups,
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
        self.sandbox.kind()
    }

    /// The backend's availability (probed on first use, and again now and then while unusable).
    pub async fn availability(&self) -> Availability {
        self.sandbox.availability().await
    }

    /// The runs and tool calls counted so far.
    pub fn metrics(&self) -> &RunMetrics {
        &self.metrics
    }

    /// Runners waiting in the pool, and runners being started for it.
    pub fn pool_runners(&self) -> (usize, usize) {
        self.sandbox.pool_counts()
    }

    /// Named sessions live now.
    pub fn live_sessions(&self) -> usize {
        self.sessions.live()
    }

    /// Whether the sandbox can run programs, as far as is known without waiting (see [`Sandbox::usable_now`]).
    pub fn sandbox_usable_now(&self) -> Option<bool> {
        self.sandbox.usable_now()
    }

    /// Resolves once no run is under way: runs that start meanwhile are waited for too. What the shutdown
    /// does next is unchanged.
    pub async fn drain(&self) {
        self.runs.close();
        self.runs.wait().await;
    }

    /// At shutdown: stops the runs under way, kills the runners waiting in the pool or being started for it,
    /// finishes cleaning up after past runs, and lets the backend remove what it keeps outside this process,
    /// so that nothing outlives the server.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        self.runs.close();
        self.runs.wait().await;
        self.sandbox.close_pool().await;
        self.sessions.close().await;
        self.cleanups.close();
        self.cleanups.wait().await;
        self.sandbox.shutdown_backend().await;
    }

    /// Runs `code` to the end, a failure, the time limit, or the caller's cancel; logs one line about it and
    /// appends its record to the audit file.
    pub async fn execute(&self, code: &str, caller: Caller) -> RunReport {
        self.execute_with(code, caller, RunOptions::default()).await
    }

    /// [`Engine::execute`], with what a run from the shell asks.
    pub async fn execute_with(&self, code: &str, caller: Caller, options: RunOptions) -> RunReport {
        let _running = self.runs.token();
        let started = record::Started::now(caller.session.clone());
        let report = self.run(code, caller, options).await;
        let record = started.finish(code, self.sandbox.kind().resolve_auto(), &report, self.settings.trace);
        record.log();
        if let Some(audit) = &self.audit {
            audit.append(&record);
        }
        record.count(&self.metrics, |tool| self.registry.server_of(tool));
        report
    }

    /// The run, every phase of it raced against one expiry: the time limit, the client's cancel and the
    /// server's shutdown.
    async fn run(&self, code: &str, caller: Caller, options: RunOptions) -> RunReport {
        let Caller { cancel, progress, approver, named_session, .. } = caller;
        let RunOptions { printed, servers_awaited, time_limit } = options;
        let limit = time_limit.unwrap_or(TimeLimit::of_runs(&self.settings));
        // Before the run's time starts: a person may take a while to log in.
        if let Some(approver) = &approver {
            login::log_in_where_needed(&self.registry, code, approver.as_ref(), [&cancel, &self.stopping]).await;
        }
        let allowance = self.confirm.as_ref().map_or(Duration::ZERO, |policy| policy.timeout);
        let expiry = Expiry::new(limit.duration(), allowance, cancel, self.stopping.clone());
        let _slot = match &self.gate {
            Some(gate) => match gate.enter(&expiry).await {
                Ok(slot) => Some(slot),
                Err(refused) => return refused,
            },
            None => None,
        };
        let mut claim = match named_session {
            Some(key) => match expiry.race(self.sessions.claim(key)).await {
                Ok(Ok(claim)) => Some(claim),
                Ok(Err(full)) => return RunReport::failed(Outcome::Error, full.to_string()),
                Err(expired) => return self.not_started(expired, limit, Preparing::Session),
            },
            None => None,
        };
        let (runner, _lease) = match claim.as_mut().and_then(Claim::take_runner) {
            Some(kept) => (kept, None),
            None => {
                // A session's runner gets the CPU time of many runs (each run re-arms its share of it).
                let cpu_limit = if claim.is_some() { limit.duration() * session::CPU_RUNS } else { limit.duration() };
                match self.prepare(&expiry, !servers_awaited, cpu_limit, limit).await {
                    Ok(Prepared { runner, lease }) => (runner, lease),
                    Err(report) => return report,
                }
            }
        };
        let session = claim.as_ref().map(|_| SessionRun { cpu_seconds: ptc_backends::cpu_seconds(limit.duration()) });
        let context = run::RunContext {
            registry: &self.registry,
            settings: &self.settings,
            code,
            expiry,
            limit,
            progress,
            printed,
            approval: self.confirm.clone().map(|policy| approval::Approval { policy, approver }),
            cleanups: &self.cleanups,
            session,
        };
        let (mut report, kept) = run::drive(runner, context).await;
        if let Some(claim) = claim {
            report.session = Some(claim.finish(kept, &report));
        }
        report
    }

    /// A runner for the run, whose CPU-time limit follows `cpu_limit`, with the servers it needs connected
    /// (with `first_connections`, those making their first connection are waited for); `Err` is the run's
    /// report when that ends first.
    async fn prepare(
        &self,
        expiry: &Expiry,
        first_connections: bool,
        cpu_limit: Duration,
        limit: TimeLimit,
    ) -> Result<Prepared, RunReport> {
        let (phase, preparing) = watch::channel(Preparing::Probe);
        let (sandbox, registry) = (Arc::clone(&self.sandbox), Arc::clone(&self.registry));
        // On a task of its own, so that the expiry is watched even while a backend's start holds its thread;
        // dropped (its runner killed) when the run ends first.
        let preparation = AbortOnDropHandle::new(tokio::spawn(async move {
            sandbox.prepare(&registry, first_connections, cpu_limit, phase).await
        }));
        match expiry.race(preparation).await {
            Ok(Ok(Ok(prepared))) => Ok(prepared),
            Ok(Ok(Err(unprepared))) => Err(RunReport::failed(Outcome::Sandbox, format!("SandboxError: {unprepared}"))),
            Ok(Err(failed)) => match failed.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Only the runtime's own shutdown cancels it.
                Err(_) => Err(self.not_started(Expired::Stopped, limit, *preparing.borrow())),
            },
            Err(expired) => Err(self.not_started(expired, limit, *preparing.borrow())),
        }
    }

    /// The report of a run that ended before its program started, while `phase` was under way.
    fn not_started(&self, expired: Expired, limit: TimeLimit, phase: Preparing) -> RunReport {
        match expired {
            Expired::Timeout => RunReport::failed(Outcome::Timeout, report::timed_out_before_start(limit, phase)),
            Expired::Cancelled => RunReport::failed(
                Outcome::Cancelled,
                "ExecutionError: the client cancelled the run before the program started".into(),
            ),
            Expired::Stopped => RunReport::stopped_before_start(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::testing::{Behaviour, FakeBackend};
    use super::*;
    use crate::config::Config;

    fn engine(probe: Behaviour, spawn: Behaviour) -> Engine {
        let config = Config::default();
        let registry = Registry::start(&config, config.tools.filter().unwrap());
        let settings = ExecutionConfig { timeout_seconds: 5.0, ..ExecutionConfig::default() };
        Engine::new(Arc::new(FakeBackend::new(probe, spawn)), registry, settings)
    }

    /// Runs a program, failing the test if the engine has not answered within a minute.
    async fn execute(engine: &Engine, caller: Caller) -> RunReport {
        tokio::time::timeout(Duration::from_secs(60), engine.execute("print(1)", caller))
            .await
            .expect("the run ended within a minute")
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_whose_sandbox_hangs_ends_at_its_time_limit_saying_what_it_waited_for() {
        for (probe, spawn, waited_for) in [
            (Behaviour::Hangs, Behaviour::Answers, "the sandbox's availability check had not finished"),
            (Behaviour::Answers, Behaviour::Hangs, "the sandbox had not started a runner for it yet"),
        ] {
            let engine = engine(probe, spawn);
            let started = Instant::now();
            let report = execute(&engine, Caller::default()).await;
            assert_eq!(started.elapsed(), Duration::from_secs(5));
            assert_eq!(report.outcome, Outcome::Timeout);
            let error = format!(
                "TimeoutError: Execution exceeded 5s limit before the program started: {waited_for}. The limit is \
                 execution.timeout_seconds in ptc-mcp's config"
            );
            assert_eq!(report.error, Some(error));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_client_or_the_server_ends_a_run_while_it_is_prepared() {
        let engine = engine(Behaviour::Answers, Behaviour::Hangs);
        let caller = Caller::default();
        let cancel = caller.cancel.clone();
        let started = Instant::now();
        let (report, ()) = tokio::join!(execute(&engine, caller), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cancel.cancel();
        });
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert_eq!(
            report.error.as_deref(),
            Some("ExecutionError: the client cancelled the run before the program started")
        );
        let (report, ()) = tokio::join!(execute(&engine, Caller::default()), async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            engine.shutdown().await;
        });
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(report.outcome, Outcome::Killed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_with_a_time_limit_of_its_own_gets_a_runner_started_with_it_and_names_its_key() {
        let backend = Arc::new(FakeBackend::new(Behaviour::Answers, Behaviour::Hangs));
        let config = Config::default();
        let registry = Registry::start(&config, config.tools.filter().unwrap());
        let settings = ExecutionConfig { timeout_seconds: 5.0, pool_size: 0, ..ExecutionConfig::default() };
        let engine = Engine::new(Arc::clone(&backend) as Arc<dyn SandboxBackend>, registry, settings);
        let limit = TimeLimit { seconds: 30.0, key: "execution.task_timeout_seconds" };
        let options = RunOptions { time_limit: Some(limit), ..RunOptions::default() };
        let started = Instant::now();
        let report = engine.execute_with("print(1)", Caller::default(), options).await;
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert_eq!(backend.timeouts(), [Duration::from_secs(30)], "its CPU-time limit follows its own limit");
        let error = "TimeoutError: Execution exceeded 30s limit before the program started: the sandbox had not \
                     started a runner for it yet. The limit is execution.task_timeout_seconds in ptc-mcp's config";
        assert_eq!(report.error.as_deref(), Some(error));
    }

    #[tokio::test(start_paused = true)]
    async fn tasks_get_runners_with_their_limit_from_a_pool_filled_once_a_task_ran() {
        let backend = Arc::new(FakeBackend::new(Behaviour::Answers, Behaviour::Answers));
        let config = Config::default();
        let registry = Registry::start(&config, config.tools.filter().unwrap());
        let settings = ExecutionConfig { timeout_seconds: 5.0, pool_size: 2, ..ExecutionConfig::default() };
        let task = TimeLimit::of_tasks(&settings);
        let engine = Engine::new(Arc::clone(&backend) as Arc<dyn SandboxBackend>, registry, settings);
        let with_task_limit = || backend.timeouts().iter().filter(|t| **t == task.duration()).count();
        execute(&engine, Caller::default()).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(backend.timeouts().contains(&Duration::from_secs(5)), "{:?}", backend.timeouts());
        assert_eq!(with_task_limit(), 0, "no task ran yet");
        let options = RunOptions { time_limit: Some(task), ..RunOptions::default() };
        engine.execute_with("print(1)", Caller::default(), options).await;
        assert_eq!(with_task_limit(), 1, "the task's own start");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(with_task_limit() >= 2, "then the pool of task runners fills: {:?}", backend.timeouts());
    }

    #[tokio::test]
    async fn a_runner_that_cannot_start_is_a_sandbox_error_naming_the_cause() {
        let report = execute(&engine(Behaviour::Answers, Behaviour::Answers), Caller::default()).await;
        assert_eq!(report.outcome, Outcome::Sandbox);
        assert_eq!(
            report.error.as_deref(),
            Some("SandboxError: could not start the runner (fake): the fake starts nothing")
        );
    }

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
            let line: serde_json::Value =
                serde_json::from_slice(&crate::audit::AuditRecord::audit_line(&record, false)).unwrap();
            line["run_id"].as_str().unwrap().to_string()
        };
        fastrand::seed(7);
        let first = id();
        fastrand::seed(7);
        assert_ne!(first, id());
    }
}
