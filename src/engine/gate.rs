//! The bound on runs at once across all clients (`serve.http.max_concurrent_runs`): a run takes a slot or
//! waits for one — while no more than as many others wait, and within its own time limit (the wait counts
//! against it) — and otherwise fails at once saying the server is busy. It never waits without a bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::expiry::{Expired, Expiry};
use super::report::{Outcome, RunReport};

pub(super) struct RunGate {
    slots: Arc<Semaphore>,
    limit: usize,
    waiting: AtomicUsize,
}

/// Counts a run among those waiting while it exists.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RunGate {
    pub fn new(limit: usize) -> Self {
        RunGate { slots: Arc::new(Semaphore::new(limit)), limit, waiting: AtomicUsize::new(0) }
    }

    /// A slot for one run, held until the permit is dropped. `Err` is the run's report when it gets none:
    /// too many waiting, or the run's expiry came first (its time limit, the client's cancel, shutdown).
    pub async fn enter(&self, expiry: &Expiry) -> Result<OwnedSemaphorePermit, RunReport> {
        if let Ok(permit) = Arc::clone(&self.slots).try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.limit {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(self.busy(format!("{} programs are running and {} more are waiting", self.limit, self.limit)));
        }
        let _waiting = Waiting(&self.waiting);
        match expiry.race(Arc::clone(&self.slots).acquire_owned()).await {
            Ok(permit) => Ok(permit.expect("the semaphore is never closed")),
            Err(Expired::Timeout) => {
                Err(self.busy(format!("no run slot freed within {}s", expiry.limit().as_secs_f64())))
            }
            Err(Expired::Cancelled) => Err(RunReport::failed(
                Outcome::Cancelled,
                "ExecutionError: the client cancelled the run while it waited for a slot".into(),
            )),
            Err(Expired::Stopped) => Err(RunReport::stopped_before_start()),
        }
    }

    fn busy(&self, why: String) -> RunReport {
        RunReport::failed(
            Outcome::Error,
            format!(
                "ExecutionError: the server is busy: {why} (serve.http.max_concurrent_runs is {}); try again shortly",
                self.limit
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;

    fn expiry(limit: Duration, cancel: &CancellationToken, stopping: &CancellationToken) -> Expiry {
        Expiry::new(limit, Duration::ZERO, cancel.clone(), stopping.clone())
    }

    #[tokio::test]
    async fn runs_past_the_limit_wait_and_those_past_the_queue_are_refused_at_once() {
        let gate = RunGate::new(1);
        let (cancel, stopping) = (CancellationToken::new(), CancellationToken::new());
        let long = expiry(Duration::from_secs(60), &cancel, &stopping);
        let first = gate.enter(&long).await.unwrap();
        let queued = gate.enter(&long);
        tokio::pin!(queued);
        assert!(futures::poll!(&mut queued).is_pending(), "the second run waits");
        let refused = gate.enter(&long).await.unwrap_err();
        assert_eq!(refused.outcome, Outcome::Error);
        assert_eq!(
            refused.error.as_deref(),
            Some(
                "ExecutionError: the server is busy: 1 programs are running and 1 more are waiting \
                 (serve.http.max_concurrent_runs is 1); try again shortly"
            )
        );
        drop(first);
        assert!(queued.await.is_ok(), "the waiting run gets the freed slot");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_with_the_runs_time_limit_the_client_or_the_server() {
        let gate = RunGate::new(1);
        let (cancel, stopping) = (CancellationToken::new(), CancellationToken::new());
        let _held = gate.enter(&expiry(Duration::from_secs(60), &cancel, &stopping)).await.unwrap();
        let short = expiry(Duration::from_secs(5), &cancel, &stopping);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let started = tokio::time::Instant::now();
        let timed_out = gate.enter(&short).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(3), "the run's time counts from its request");
        assert!(timed_out.error.unwrap().contains("no run slot freed within 5s"));
        let client = CancellationToken::new();
        client.cancel();
        let cancelled = gate.enter(&expiry(Duration::from_secs(60), &client, &stopping)).await.unwrap_err();
        assert_eq!(cancelled.outcome, Outcome::Cancelled);
        stopping.cancel();
        let killed = gate.enter(&expiry(Duration::from_secs(60), &cancel, &stopping)).await.unwrap_err();
        assert_eq!(killed.outcome, Outcome::Killed);
        assert_eq!(gate.waiting.load(Ordering::SeqCst), 0);
    }
}
