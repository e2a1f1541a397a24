//! A run's time limit, which stands still while the run waits for a person (an approval): it expires
//! `timeout_seconds` of running after the start, however long the waits were.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
struct State {
    deadline: Instant,
    /// Waits under way; the clock stands still while there is one.
    paused: usize,
    paused_since: Instant,
}

/// Shared by the run's loop and its call tasks.
#[derive(Clone)]
pub struct Deadline {
    state: Arc<watch::Sender<State>>,
}

/// Keeps the clock stopped until dropped.
pub struct Pause(Deadline);

impl Deadline {
    pub fn new(deadline: Instant) -> Self {
        Deadline { state: Arc::new(watch::Sender::new(State { deadline, paused: 0, paused_since: deadline })) }
    }

    /// Stops the clock until the returned guard is dropped (nested pauses count once).
    pub fn pause(&self) -> Pause {
        self.state.send_modify(|state| {
            if state.paused == 0 {
                state.paused_since = Instant::now();
            }
            state.paused += 1;
        });
        Pause(self.clone())
    }

    /// Resolves once the run has used up its time. Cancellation-safe.
    pub async fn expired(&self) {
        let mut changes = self.state.subscribe();
        loop {
            let state = *changes.borrow_and_update();
            if state.paused > 0 {
                let _ = changes.changed().await;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep_until(state.deadline) => return,
                _ = changes.changed() => {}
            }
        }
    }
}

impl Drop for Pause {
    fn drop(&mut self) {
        self.0.state.send_modify(|state| {
            state.paused -= 1;
            if state.paused == 0 {
                state.deadline += Instant::now().saturating_duration_since(state.paused_since);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_limit_moves_by_the_time_spent_waiting() {
        let start = Instant::now();
        let deadline = Deadline::new(start + Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(4)).await;
        {
            let _outer = deadline.pause();
            let _inner = deadline.pause();
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        deadline.expired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(40));
    }

    #[tokio::test(start_paused = true)]
    async fn it_never_expires_during_a_pause() {
        let deadline = Deadline::new(Instant::now() + Duration::from_secs(1));
        let pause = deadline.pause();
        let expired = tokio::time::timeout(Duration::from_secs(60), deadline.expired()).await;
        assert!(expired.is_err());
        drop(pause);
        let start = Instant::now();
        deadline.expired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
