//! Ready runners: started, confined, interpreter up and handshake done, waiting for their program. A pool
//! keeps them so a run does not pay the interpreter's start-up; each serves one run and is discarded, and the
//! pool refills in the background. It follows demand: it keeps at least `execution.pool_size` ready, as many
//! as programs recently ran at once, and as many as are taken while a taken runner is replaced (Little's law:
//! the recent arrival rate of runs times how long a runner is out of the pool — the run, the wait before its
//! refill and a start, each measured), all up to [`DEMAND_CAP`]; a few at a time ([`parallel_starts`]). A burst
//! of concurrent programs is remembered for [`DEMAND_MEMORY`]; the arrival rate fades within seconds once
//! programs stop coming ([`RATE_TIME_CONSTANT`]); then the pool goes back to `pool_size`, even if no program
//! runs to trigger it. A run never waits for the pool: with no ready runner at hand it starts its own, exactly
//! as without a pool. A runner that died while waiting is never handed out.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptc_backends::protocol::{FromRunner, PROTOCOL_VERSION};
use ptc_backends::{RunnerControl, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::lines::{Line, LineReader, ReadError};

/// How long a runner started for the pool may take to say `ready`.
const POOL_START_TIMEOUT: Duration = Duration::from_secs(60);
/// The `ready` line is tiny; anything longer is not one.
const MAX_READY_LINE: usize = 4096;
/// The most runners the pool keeps ready for bursts or a fast stream of programs (unless `pool_size` asks for
/// more): each is an idle interpreter (about 20 MiB, part of it shared) or container, and each start costs a
/// core tens of milliseconds, so past this many a faster stream is bound by the CPU rather than the pool.
pub const DEMAND_CAP: usize = 8;
/// How long a burst of concurrent programs is remembered before the pool shrinks back to `pool_size`.
pub const DEMAND_MEMORY: Duration = Duration::from_secs(300);
/// How quickly the arrival rate forgets (it falls by e every this long without arrivals): seconds, so that the
/// pool follows a change of pace soon, while two programs arriving close together by chance count little.
pub const RATE_TIME_CONSTANT: Duration = Duration::from_secs(2);
/// A runner's start time assumed until the pool has measured one (a start takes about 5-90 ms by backend).
const START_TIME_PRIOR: Duration = Duration::from_millis(100);
/// A run's time (from taking a runner to the end) assumed until one was measured.
const RUN_TIME_PRIOR: Duration = Duration::from_millis(10);
/// How long after a run the pool waits to replace its runner: the run's answer goes out first, where a start
/// (a core busy for tens of milliseconds) would hold it up by milliseconds (p50 of `print(1)` 8.9 -> 5.1 ms).
const REFILL_AFTER_A_RUN: Duration = Duration::from_millis(5);
/// The same while other runs go on, when a start is costly (a fresh interpreter's): runs started together end
/// together, and the starts that replace the first ones to end held up the others' ends by tens of
/// milliseconds (bursts of 8 concurrent 0.5 s programs took 1.10x the ideal; 1.05x this way).
const REFILL_WHILE_OTHERS_RUN: Duration = Duration::from_millis(100);
/// Starts that take less (a fork from the zygote, even on a busy machine) cost the runs around them too little
/// to wait for: the pool refills after [`REFILL_AFTER_A_RUN`] whatever else runs, and keeps up with many
/// clients.
const CHEAP_START: Duration = Duration::from_millis(30);

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

/// How many runners the pool starts at once: on this machine a start is CPU work (an interpreter, a fork from
/// the zygote, a container runtime's), and past one per core more at once only slow the runs beside them
/// (runs sent back to back under `none`: p95 15 ms with all the starts demand asked for at once, 8-10 ms
/// with two on this 2-core machine). A pod's start waits on the cluster, not on this machine.
fn parallel_starts(kind: SandboxKind) -> usize {
    match kind {
        SandboxKind::Kubernetes => DEMAND_CAP,
        _ => std::thread::available_parallelism().map_or(1, usize::from),
    }
}

pub struct RunnerPool {
    backend: Arc<dyn SandboxBackend>,
    request: SpawnRequest,
    /// `execution.pool_size`: the fewest runners kept ready (0: no pool at all).
    size: usize,
    /// The most runners started for the pool at once (see [`parallel_starts`]).
    parallel_starts: usize,
    state: Mutex<PoolState>,
    /// Runners being started for the pool; waited for at shutdown.
    starts: TaskTracker,
    /// Cancelled at shutdown: starts under way give up (their runner is killed and its scratch removed).
    closing: CancellationToken,
}

struct PoolState {
    ready: VecDeque<ReadyRunner>,
    starting: usize,
    demand: Demand,
    start_time: Learnt,
    /// A task is waiting to shrink the pool once the remembered burst expires and the arrival rate has faded.
    shrink_scheduled: bool,
}

impl Default for PoolState {
    fn default() -> Self {
        PoolState {
            ready: VecDeque::new(),
            starting: 0,
            demand: Demand::default(),
            start_time: Learnt::new(START_TIME_PRIOR),
            shrink_scheduled: false,
        }
    }
}

impl PoolState {
    /// How long after a lone run its replacement is ready: the wait before the refill, and a start.
    fn refill_lag(&self) -> Duration {
        REFILL_AFTER_A_RUN + self.start_time.estimate
    }
}

/// How many programs run at once, the most that did recently, how fast they arrive and how long they take.
#[derive(Debug, Clone, Copy)]
struct Demand {
    running: usize,
    peak: usize,
    /// When `running` last reached `peak`.
    peak_at: Option<Instant>,
    arrivals: ArrivalRate,
    /// From taking a runner to the run's end.
    run_time: Learnt,
}

impl Default for Demand {
    fn default() -> Self {
        Demand {
            running: 0,
            peak: 0,
            peak_at: None,
            arrivals: ArrivalRate::default(),
            run_time: Learnt::new(RUN_TIME_PRIOR),
        }
    }
}

impl Demand {
    fn started(&mut self, now: Instant) {
        self.running += 1;
        if self.running >= self.recent_peak(now) {
            self.peak = self.running;
            self.peak_at = Some(now);
        }
        self.arrivals.arrived(now);
    }

    fn finished(&mut self, ran: Duration) {
        self.running = self.running.saturating_sub(1);
        self.run_time.measured(ran);
    }

    /// The most programs that ran at once within [`DEMAND_MEMORY`] (at least those running now).
    fn recent_peak(&self, now: Instant) -> usize {
        if self.peak_remembered(now) { self.peak.max(self.running) } else { self.running }
    }

    fn peak_remembered(&self, now: Instant) -> bool {
        self.peak_at.is_some_and(|at| now.saturating_duration_since(at) < DEMAND_MEMORY)
    }

    /// Runners taken, at the recent arrival rate, while a taken one is out of the pool: its run, then `lag`
    /// (the wait before its refill and a start). As many must be ready or on their way for every run to find
    /// one ready. The run's share is the mean number running (Little's law again), no more than the recent
    /// peak: one long run after a quiet spell does not stand for a stream of them.
    fn in_flight(&self, lag: Duration, now: Instant) -> usize {
        let rate = self.arrivals.per_second(now);
        let running = (rate * self.run_time.estimate.as_secs_f64()).min(self.recent_peak(now) as f64);
        // A float-to-integer `as` saturates; the cap bounds it anyway.
        (rate * lag.as_secs_f64() + running).ceil() as usize
    }

    /// Ready runners to keep for a pool of at least `size`, when a taken runner is replaced `lag` after its
    /// run.
    fn target(&self, size: usize, lag: Duration, now: Instant) -> usize {
        if size == 0 {
            return 0;
        }
        let wanted = self.recent_peak(now).max(self.in_flight(lag, now));
        wanted.min(size.max(DEMAND_CAP)).max(size)
    }

    /// When the target falls back to `size` if no other program arrives: once the remembered burst expires
    /// and the arrival rate has faded. `None` if nothing remembered holds it above `size` any more (runs
    /// still going on may; each refills the pool when it ends).
    fn settles_at(&self, size: usize, lag: Duration, now: Instant) -> Option<Instant> {
        let burst = self.peak_at.filter(|_| self.peak > size && self.peak_remembered(now)).map(|at| at + DEMAND_MEMORY);
        // Where rate × (lag + run time) is `size` (the run's share capped by the peak only lowers it).
        let out_of_pool = lag + self.run_time.estimate;
        let rate = (self.in_flight(lag, now) > size)
            .then(|| self.arrivals.falls_to(size as f64 / out_of_pool.as_secs_f64(), now))
            .flatten();
        burst.max(rate)
    }
}

/// Runs per second lately: one over the learnt gap between arrivals, so that it follows a faster pace within
/// a score of arrivals (a second at τ's pace would be most of a short stream), and fading by e every τ
/// ([`RATE_TIME_CONSTANT`]) after the last arrival.
#[derive(Debug, Clone, Copy)]
struct ArrivalRate {
    gap: Learnt,
    /// The last arrival.
    at: Option<Instant>,
}

impl Default for ArrivalRate {
    fn default() -> Self {
        // A first arrival counts as 1/τ per second.
        ArrivalRate { gap: Learnt::new(RATE_TIME_CONSTANT), at: None }
    }
}

impl ArrivalRate {
    fn arrived(&mut self, now: Instant) {
        if let Some(at) = self.at {
            self.gap.measured(now.saturating_duration_since(at));
        }
        self.at = Some(now);
    }

    /// Per second as of the last arrival.
    fn rate(&self) -> f64 {
        1.0 / self.gap.estimate.as_secs_f64().max(1e-9)
    }

    fn per_second(&self, now: Instant) -> f64 {
        self.at.map_or(0.0, |at| self.rate() * decay(now.saturating_duration_since(at)))
    }

    /// When the rate falls to `per_second` without further arrivals (`now` if it is there already; `None`
    /// for never, as for 0).
    fn falls_to(&self, per_second: f64, now: Instant) -> Option<Instant> {
        let Some(at) = self.at.filter(|_| self.per_second(now) > per_second) else {
            return Some(now);
        };
        // rate · e^(-t/τ) = per_second
        let after = (self.rate() / per_second).ln() * RATE_TIME_CONSTANT.as_secs_f64();
        at.checked_add(Duration::try_from_secs_f64(after).ok()?)
    }
}

/// What is left of the rate `elapsed` after the last arrival.
fn decay(elapsed: Duration) -> f64 {
    (-elapsed.as_secs_f64() / RATE_TIME_CONSTANT.as_secs_f64()).exp()
}

/// A duration learnt from measurements (a runner's start, a run): an average in which each new one weighs a
/// quarter, so it follows the machine's load within a few.
#[derive(Debug, Clone, Copy)]
struct Learnt {
    estimate: Duration,
}

impl Learnt {
    fn new(prior: Duration) -> Self {
        Learnt { estimate: prior }
    }

    fn measured(&mut self, took: Duration) {
        self.estimate = self.estimate * 3 / 4 + took / 4;
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
            let began = Instant::now();
            let started =
                tokio::time::timeout(POOL_START_TIMEOUT, start_ready(pool.backend.as_ref(), &pool.request)).await;
            (started, began.elapsed())
        };
        tokio::select! {
            (started, took) = start => match started {
                Ok(Ok(runner)) => {
                    pool.state().start_time.measured(took);
                    self.ready = Some(runner);
                }
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
            Some(runner) if !self.pool.closing.is_cancelled() => {
                state.ready.push_back(runner);
                drop(state);
                // Starts go a few at a time (`parallel_starts`): the next may begin. Not after a failure,
                // which would start the next failure at once; the next run's end tries again.
                Arc::clone(&self.pool).refill();
            }
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
    since: Instant,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let delay = {
            let mut state = self.pool.state();
            state.demand.finished(self.since.elapsed());
            let costly_start = state.start_time.estimate > CHEAP_START;
            if state.demand.running > 0 && costly_start { REFILL_WHILE_OTHERS_RUN } else { REFILL_AFTER_A_RUN }
        };
        self.pool.refill_after(delay);
    }
}

impl RunnerPool {
    pub fn new(backend: Arc<dyn SandboxBackend>, request: SpawnRequest, size: usize) -> Arc<RunnerPool> {
        Arc::new(RunnerPool {
            parallel_starts: parallel_starts(backend.kind()),
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
        let now = Instant::now();
        self.state().demand.started(now);
        Lease { pool: Arc::clone(self), since: now }
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
                tracing::debug!("no ready runner in the pool: the run starts its own");
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
    /// go of those past it once a burst is forgotten or the arrival rate has faded.
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
            let (now, lag) = (Instant::now(), state.refill_lag());
            let target = state.demand.target(self.size, lag, now);
            let missing = target
                .saturating_sub(state.ready.len() + state.starting)
                .min(self.parallel_starts.saturating_sub(state.starting));
            state.starting += missing;
            let keep = target.min(state.ready.len());
            let surplus: Vec<ReadyRunner> = state.ready.drain(keep..).collect();
            let will_settle = state.demand.settles_at(self.size, lag, now).is_some();
            if will_settle && !std::mem::replace(&mut state.shrink_scheduled, true) {
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

    /// Shrinks the pool back towards `size` once the remembered burst expires and the arrival rate has
    /// faded (waiting again if either was renewed meanwhile), even if no program runs to trigger a refill.
    /// Runs going on past that refill the pool when they end, which schedules this again if need be.
    fn schedule_shrink(self: &Arc<Self>) {
        let pool = Arc::clone(self);
        self.starts.spawn(async move {
            loop {
                let settles = {
                    let state = pool.state();
                    state.demand.settles_at(pool.size, state.refill_lag(), Instant::now())
                };
                let Some(settles) = settles else { break };
                tokio::select! {
                    () = tokio::time::sleep_until(tokio::time::Instant::from_std(settles)) => {}
                    () = pool.closing.cancelled() => return,
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
        let start = START_TIME_PRIOR;
        let mut demand = Demand::default();
        assert_eq!(demand.target(2, start, at), 2);
        for _ in 0..5 {
            demand.started(at);
        }
        assert_eq!(demand.target(2, start, at), 5);
        for _ in 0..5 {
            demand.finished(Duration::from_millis(5));
        }
        assert_eq!(demand.target(2, start, at + DEMAND_MEMORY / 2), 5, "a burst is remembered");
        assert_eq!(demand.settles_at(2, start, at + DEMAND_MEMORY / 2), Some(at + DEMAND_MEMORY));
        assert_eq!(demand.target(2, start, at + DEMAND_MEMORY), 2, "then forgotten");
        assert_eq!(demand.settles_at(2, start, at + DEMAND_MEMORY), None);
        for _ in 0..20 {
            demand.started(at);
        }
        assert_eq!(demand.target(2, start, at), DEMAND_CAP);
        assert_eq!(demand.target(12, start, at), 12, "pool_size above the cap is kept");
        assert_eq!(demand.target(0, start, at), 0, "pool_size 0 means no pool");
    }

    #[test]
    fn runs_going_on_past_the_memory_hold_the_pool_up_but_nothing_waits_for_them() {
        let at = Instant::now();
        let mut demand = Demand::default();
        for _ in 0..5 {
            demand.started(at);
        }
        let later = at + DEMAND_MEMORY * 2;
        assert_eq!(demand.target(2, START_TIME_PRIOR, later), 5);
        assert_eq!(demand.settles_at(2, START_TIME_PRIOR, later), None, "their ends refill the pool");
    }

    /// `count` runs of no time, one every `gap` from `from`; the last one's arrival.
    fn stream(demand: &mut Demand, from: Instant, gap: Duration, count: u32) -> Instant {
        let at = |i| from + gap * i;
        for i in 0..count {
            demand.started(at(i));
            demand.finished(Duration::ZERO);
        }
        at(count - 1)
    }

    /// 300 runs a second for 30 s (15 time constants: the rate has settled).
    const GAP: Duration = Duration::from_nanos(1_000_000_000 / 300);
    const COUNT: u32 = 9000;

    #[test]
    fn a_steady_stream_keeps_as_many_ready_as_are_taken_while_one_starts() {
        let from = Instant::now();
        let mut demand = Demand::default();
        let last = stream(&mut demand, from, GAP, COUNT);
        let rate = demand.arrivals.per_second(last);
        assert!((300.0..300.3).contains(&rate), "{rate} per second");
        let start = Duration::from_millis(19);
        // 300/s × 19 ms = 5.7 taken while one starts, one at a time.
        assert_eq!(demand.target(2, start, last), 6);
        assert_eq!(demand.target(2, start, last + GAP / 2), 6, "between arrivals too");
        assert_eq!(demand.target(2, Duration::from_millis(5), last), 2, "1.5: pool_size is more");
        assert_eq!(demand.target(2, Duration::from_millis(12), last), 4, "3.6");
    }

    #[test]
    fn the_rate_fades_once_arrivals_stop_and_the_pool_settles_back_to_pool_size() {
        let from = Instant::now();
        let mut demand = Demand::default();
        let last = stream(&mut demand, from, GAP, COUNT);
        let start = Duration::from_millis(19);
        // 5.7 in flight, falling by e every 2 s: 3.46 a second later, 1.27 after 3 s.
        assert_eq!(demand.target(2, start, last + Duration::from_secs(1)), 4);
        assert_eq!(demand.target(2, start, last + Duration::from_secs(3)), 2);
        // 2 s · ln(300/s × 19 ms / 2) = 2.094 s
        let settles = demand.settles_at(2, start, last).expect("the rate holds the pool up");
        assert_eq!((settles - last).as_millis(), 2094);
        assert_eq!(demand.target(2, start, settles - Duration::from_millis(10)), 3);
        assert_eq!(demand.target(2, start, settles + Duration::from_millis(1)), 2);
        assert_eq!(demand.settles_at(2, start, settles + Duration::from_millis(1)), None);
        assert_eq!(demand.settles_at(6, start, last), None, "pool_size is more already");
    }

    #[test]
    fn a_fast_stream_is_bounded_by_the_cap_unless_pool_size_is_more_and_pool_size_0_is_no_pool() {
        let from = Instant::now();
        let mut demand = Demand::default();
        let last = stream(&mut demand, from, GAP, COUNT);
        // 300/s × 100 ms = 30
        assert_eq!(demand.target(2, START_TIME_PRIOR, last), DEMAND_CAP);
        assert_eq!(demand.target(12, START_TIME_PRIOR, last), 12);
        assert_eq!(demand.target(40, START_TIME_PRIOR, last), 40);
        assert_eq!(demand.target(0, START_TIME_PRIOR, last), 0);
    }

    #[test]
    fn the_start_time_is_learnt_from_measured_starts() {
        let mut start_time = Learnt::new(START_TIME_PRIOR);
        assert_eq!(start_time.estimate, START_TIME_PRIOR);
        start_time.measured(Duration::from_millis(20));
        assert_eq!(start_time.estimate, Duration::from_millis(80), "3/4 of 100 ms and 1/4 of 20 ms");
        for _ in 0..100 {
            start_time.measured(Duration::from_millis(20));
        }
        assert_eq!(start_time.estimate, Duration::from_millis(20));
        // With it, the stream of 300 a second keeps 6 ready (5.7 in flight) rather than the prior's cap.
        let mut demand = Demand::default();
        let last = stream(&mut demand, Instant::now(), GAP, COUNT);
        start_time.measured(Duration::from_millis(16));
        assert_eq!(start_time.estimate, Duration::from_millis(19));
        assert_eq!(demand.target(2, start_time.estimate, last), 6);
    }

    #[test]
    fn runs_back_to_back_count_their_own_time_out_of_the_pool() {
        // A 4 ms run every 6 ms (a client sending the next as soon as it is answered), replaced 10.6 ms after
        // its end: 166.7/s × 10.6 ms = 1.77 taken while one is replaced, and 0.67 running on average.
        let (mut demand, from, gap) = (Demand::default(), Instant::now(), Duration::from_millis(6));
        for i in 0..5000 {
            demand.started(from + gap * i);
            demand.finished(Duration::from_millis(4));
        }
        let last = from + gap * 4999;
        assert_eq!(demand.target(2, Duration::from_micros(10_600), last), 3);
        assert_eq!(demand.target(2, Duration::from_millis(7), last), 2, "1.17 + 0.67");
    }

    #[test]
    fn one_long_run_after_a_quiet_spell_counts_as_one_running() {
        let (mut demand, at) = (Demand::default(), Instant::now());
        demand.started(at);
        demand.finished(Duration::from_secs(60));
        let after = at + Duration::from_secs(60);
        // The rate of one arrival a minute ago is tiny; 15 s of learnt run time would stand for 0.5/s × 15 s.
        assert_eq!(demand.target(1, START_TIME_PRIOR, at), 2, "one running, and one on its way");
        assert_eq!(demand.target(1, START_TIME_PRIOR, after), 1, "a minute later, the rate has faded");
        assert_eq!(demand.settles_at(1, START_TIME_PRIOR, after), None, "nothing holds it above 1 any more");
    }

    #[test]
    fn a_faster_pace_is_followed_within_a_few_dozen_arrivals() {
        let (mut demand, from) = (Demand::default(), Instant::now());
        // 40 runs 5 ms apart, 0.2 s in all: a pace of 200/s.
        let last = stream(&mut demand, from, Duration::from_millis(5), 40);
        let rate = demand.arrivals.per_second(last);
        assert!((190.0..200.1).contains(&rate), "{rate} per second");
        assert_eq!(demand.target(2, Duration::from_millis(15), last), 3, "200/s × 15 ms");
    }
}
