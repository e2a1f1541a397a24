//! A run's expiry: what every phase of a run waits against — the wait for a slot, the sandbox's check, the
//! runner's start, the first connections to downstream servers, the server's check of the program and the
//! program itself. The run ends at the first of its time limit, the client's cancel and the server's
//! shutdown, whatever phase it is in.
//!
//! The time limit is `timeout_seconds` from the request. It stands still while the run waits for a person
//! (an approval), but those waits together move it by at most the allowance (`confirm_timeout_seconds`): a
//! run ends at the latest `timeout_seconds` plus `confirm_timeout_seconds` after its request, however many
//! approvals it waits for, at once or one after another.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What ended a run before it was over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// The time limit.
    Timeout,
    /// The client cancelled its request.
    Cancelled,
    /// The server is shutting down.
    Stopped,
}

/// Shared by a run's phases and its call tasks.
#[derive(Clone)]
pub struct Expiry {
    clock: Arc<watch::Sender<Clock>>,
    /// `timeout_seconds`, as messages name it.
    limit: Duration,
    cancel: CancellationToken,
    stopping: CancellationToken,
}

#[derive(Debug, Clone, Copy)]
struct Clock {
    /// When the run's time is up, waits for people so far counted in.
    deadline: Instant,
    /// The deadline no wait can move it past: the start, the limit and the allowance.
    latest: Instant,
    /// Waits under way; the clock stands still while there is one.
    paused: usize,
    paused_since: Instant,
}

/// Keeps the clock stopped until dropped.
pub struct Pause(Expiry);

impl Expiry {
    /// The expiry of a run that starts now, may run for `limit` and wait for people for `allowance` more.
    pub fn new(limit: Duration, allowance: Duration, cancel: CancellationToken, stopping: CancellationToken) -> Self {
        let now = Instant::now();
        let deadline = now + limit;
        let clock = Clock { deadline, latest: deadline + allowance, paused: 0, paused_since: now };
        Expiry { clock: Arc::new(watch::Sender::new(clock)), limit, cancel, stopping }
    }

    /// `timeout_seconds`.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// Stops the clock until the returned guard is dropped (nested pauses count once), within the allowance.
    pub fn pause(&self) -> Pause {
        self.clock.send_modify(|clock| {
            if clock.paused == 0 {
                clock.paused_since = Instant::now();
            }
            clock.paused += 1;
        });
        Pause(self.clone())
    }

    /// Resolves when the run must end, saying why. Cancellation-safe.
    pub async fn expired(&self) -> Expired {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Expired::Cancelled,
            () = self.stopping.cancelled() => Expired::Stopped,
            () = self.time_up() => Expired::Timeout,
        }
    }

    /// Runs `work` until it is done or the run must end, whichever comes first (`work` is dropped then).
    /// An expiry already reached wins: `work` is not started.
    pub async fn race<F: Future>(&self, work: F) -> Result<F::Output, Expired> {
        tokio::select! {
            biased;
            expired = self.expired() => Err(expired),
            done = work => Ok(done),
        }
    }

    async fn time_up(&self) {
        let mut changes = self.clock.subscribe();
        loop {
            let clock = *changes.borrow_and_update();
            let until = if clock.paused > 0 { clock.latest } else { clock.deadline };
            tokio::select! {
                () = tokio::time::sleep_until(until) => return,
                _ = changes.changed() => {}
            }
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        self.0.clock.send_modify(|clock| {
            clock.paused -= 1;
            if clock.paused == 0 {
                let waited = Instant::now().saturating_duration_since(clock.paused_since);
                clock.deadline = (clock.deadline + waited).min(clock.latest);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expiry(limit: u64, allowance: u64) -> Expiry {
        let (limit, allowance) = (Duration::from_secs(limit), Duration::from_secs(allowance));
        Expiry::new(limit, allowance, CancellationToken::new(), CancellationToken::new())
    }

    #[tokio::test(start_paused = true)]
    async fn the_limit_moves_by_the_time_spent_waiting() {
        let start = Instant::now();
        let expiry = expiry(10, 300);
        tokio::time::sleep(Duration::from_secs(4)).await;
        {
            let _outer = expiry.pause();
            let _inner = expiry.pause();
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        assert_eq!(expiry.expired().await, Expired::Timeout);
        assert_eq!(start.elapsed(), Duration::from_secs(40));
    }

    #[tokio::test(start_paused = true)]
    async fn it_does_not_expire_during_a_pause_within_the_allowance() {
        let expiry = expiry(1, 300);
        let pause = expiry.pause();
        assert!(tokio::time::timeout(Duration::from_secs(60), expiry.expired()).await.is_err());
        drop(pause);
        let start = Instant::now();
        expiry.expired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn waits_move_the_limit_by_the_allowance_at_most_however_many_there_are() {
        // A program whose background task always has an approval pending: each wait is within the allowance,
        // all of them together are not.
        let start = Instant::now();
        let expiry = expiry(5, 3);
        let nagging = {
            let expiry = expiry.clone();
            async move {
                loop {
                    let _paused = expiry.pause();
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        };
        assert_eq!(expiry.race(nagging).await, Err(Expired::Timeout));
        assert_eq!(start.elapsed(), Duration::from_secs(8));
        // One wait past the allowance ends the run too.
        let start = Instant::now();
        let expiry = self::expiry(5, 3);
        let _paused = expiry.pause();
        assert_eq!(expiry.expired().await, Expired::Timeout);
        assert_eq!(start.elapsed(), Duration::from_secs(8));
    }

    #[tokio::test(start_paused = true)]
    async fn the_client_and_the_server_end_a_run_in_any_phase_and_before_it_starts() {
        let (cancel, stopping) = (CancellationToken::new(), CancellationToken::new());
        let expiry = Expiry::new(Duration::from_secs(60), Duration::ZERO, cancel.clone(), stopping.clone());
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            cancel.cancel();
        });
        let start = Instant::now();
        assert_eq!(expiry.race(std::future::pending::<()>()).await, Err(Expired::Cancelled));
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        canceller.await.unwrap();
        stopping.cancel();
        assert_eq!(expiry.race(async {}).await, Err(Expired::Cancelled), "the client's cancel comes first");
        let expiry = Expiry::new(Duration::from_secs(60), Duration::ZERO, CancellationToken::new(), stopping);
        assert_eq!(expiry.race(async {}).await, Err(Expired::Stopped), "work is not started once stopping");
        assert_eq!(self::expiry(60, 0).race(async { 7 }).await, Ok(7));
    }
}
