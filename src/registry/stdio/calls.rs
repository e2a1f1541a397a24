//! The `tools/call` requests of a connection that may still be answered, so that their answers are read as
//! tool results (and an answer that cannot be read fails its call at once).
//!
//! An id is forgotten when its answer arrives, when the call is cancelled, and at the latest once its caller
//! has stopped waiting: every call is bounded by `tool_call_timeout_seconds`, and the cancellation rmcp sends
//! for an abandoned call can be lost (it is dropped when rmcp's queue is full), so without that bound a
//! server that never answers would make the set grow for as long as the connection lives.

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::RequestId;
use tokio::time::Instant;

/// Below this many calls the set is not searched for expired ones.
const PRUNE_FLOOR: usize = 64;

pub struct Calls {
    /// Each call with the time its request was sent.
    waiting: HashMap<RequestId, Instant>,
    /// How long a caller waits for an answer at most.
    wait: Duration,
    /// The set is searched for expired calls when it reaches this size (twice what was left the last time,
    /// so the searches cost O(1) per call).
    prune_at: usize,
}

impl Calls {
    pub fn new(wait: Duration) -> Calls {
        Calls { waiting: HashMap::new(), wait, prune_at: PRUNE_FLOOR }
    }

    /// Notes that the request of call `id` is being sent.
    pub fn sent(&mut self, id: RequestId) {
        let now = Instant::now();
        if self.waiting.len() >= self.prune_at {
            self.waiting.retain(|_, sent| now.duration_since(*sent) < self.wait);
            self.prune_at = (2 * self.waiting.len()).max(PRUNE_FLOOR);
        }
        self.waiting.insert(id, now);
    }

    /// Forgets call `id` (it was answered or cancelled); whether its caller may still have been waiting.
    pub fn take(&mut self, id: &RequestId) -> bool {
        self.waiting.remove(id).is_some_and(|sent| sent.elapsed() < self.wait)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn calls_nobody_waits_for_any_more_are_forgotten() {
        let mut calls = Calls::new(Duration::from_secs(60));
        for id in 0..1000 {
            calls.sent(RequestId::Number(id));
        }
        assert!(calls.take(&RequestId::Number(998)));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(!calls.take(&RequestId::Number(999)), "its caller has given up");
        // Never answered, never cancelled: a server that hangs on every call.
        for round in 1..=100 {
            for id in 0..1000 {
                calls.sent(RequestId::Number(round * 1000 + id));
            }
            tokio::time::advance(Duration::from_secs(30)).await;
        }
        assert!(calls.len() <= 5000, "{} calls kept", calls.len());
        assert!(calls.take(&RequestId::Number(100_999)));
    }

    #[test]
    fn answered_calls_are_forgotten_at_once() {
        let mut calls = Calls::new(Duration::from_secs(60));
        calls.sent(RequestId::String("a".into()));
        assert!(calls.take(&RequestId::String("a".into())));
        assert!(!calls.take(&RequestId::String("a".into())));
        assert_eq!(calls.len(), 0);
    }
}
