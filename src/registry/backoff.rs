//! Reconnect delays: exponential, capped, with jitter so that many servers do not retry in lockstep.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Backoff { first, cap, next: first }
    }

    /// The delay before the next attempt: the current step ±25 %, never above the cap. Doubles the step.
    pub fn next_delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.cap);
        step.mul_f64(0.75 + fastrand::f64() * 0.5).min(self.cap)
    }

    /// A delay at the cap (with jitter, never above it), for failures that retrying soon will not fix.
    /// Leaves the step at the cap.
    pub fn capped_delay(&mut self) -> Duration {
        self.next = self.cap;
        self.next_delay()
    }

    /// Back to the first step, after a connection that worked.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_exponentially_within_jitter_and_stop_at_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let steps: Vec<Duration> = (0..8).map(|_| backoff.next_delay()).collect();
        let nominal = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
        for (delay, nominal) in steps.iter().zip(nominal) {
            let nominal = Duration::from_millis(nominal);
            assert!(*delay >= nominal.mul_f64(0.75) && *delay <= nominal.mul_f64(1.25).min(Duration::from_secs(1)));
        }
    }

    #[test]
    fn capped_delays_jump_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let delay = backoff.capped_delay();
        assert!(delay >= Duration::from_millis(7500) && delay <= Duration::from_secs(10), "{delay:?}");
    }

    #[test]
    fn reset_starts_over_from_the_first_step() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        for _ in 0..5 {
            backoff.next_delay();
        }
        backoff.reset();
        assert!(backoff.next_delay() <= Duration::from_millis(125));
    }
}
