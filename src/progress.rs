//! Progress for long runs: when a client's `execute_program` request carries a progress token, a
//! `notifications/progress` reports the tool calls finished so far (never decreasing), at most four a
//! second, with a short message naming the last tool. Nothing is sent once the run has ended.

use std::future::Future;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::engine::RunProgress;

/// At most this many notifications a second.
const INTERVAL: Duration = Duration::from_millis(250);

/// The reporter of one request's progress.
pub struct Reporter {
    done: CancellationToken,
    task: JoinHandle<()>,
}

impl Reporter {
    /// Starts reporting if the request asked for progress; the sender goes to the engine.
    pub fn start(context: &RequestContext<RoleServer>) -> Option<(watch::Sender<RunProgress>, Reporter)> {
        context.meta.get_progress_token()?;
        let (progress, updates) = watch::channel(RunProgress::default());
        Some((progress, Reporter::attach(context, updates)?))
    }

    /// Reports `updates` of a run already under way to this request, if it asked for progress.
    pub fn attach(context: &RequestContext<RoleServer>, updates: watch::Receiver<RunProgress>) -> Option<Reporter> {
        let token = context.meta.get_progress_token()?;
        let done = CancellationToken::new();
        let peer = context.peer.clone();
        let notify = move |update: RunProgress| {
            let (peer, token): (_, ProgressToken) = (peer.clone(), token.clone());
            async move {
                let message = format!("{} tool calls finished; last: {}", update.finished, update.last_tool);
                let param = ProgressNotificationParam::new(token, update.finished as f64).with_message(message);
                if let Err(e) = peer.notify_progress(param).await {
                    tracing::debug!("progress notification not sent: {e}");
                }
            }
        };
        let task = tokio::spawn(report(updates, done.clone(), notify));
        Some(Reporter { done, task })
    }

    /// Stops reporting (the run has ended) and waits until no notification is on its way.
    pub async fn finish(self) {
        self.done.cancel();
        let _ = self.task.await;
    }
}

/// Sends each change of `updates` through `notify`, at most one per [`INTERVAL`] (later changes in between
/// are folded into the next), until `done`.
async fn report<F, Fut>(mut updates: watch::Receiver<RunProgress>, done: CancellationToken, mut notify: F)
where
    F: FnMut(RunProgress) -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { return },
            () = done.cancelled() => return,
        }
        let update = updates.borrow_and_update().clone();
        tokio::select! {
            () = notify(update) => {}
            () = done.cancelled() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(INTERVAL) => {}
            () = done.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::time::Instant;

    use super::*;

    fn call(progress: &watch::Sender<RunProgress>, tool: &str) {
        progress.send_modify(|p| {
            p.finished += 1;
            p.last_tool = tool.to_string();
        });
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_calls_is_reported_at_most_four_times_a_second_and_never_decreasing() {
        let (progress, updates) = watch::channel(RunProgress::default());
        let sent: Arc<Mutex<Vec<(Duration, u64, String)>>> = Arc::default();
        let (start, log) = (Instant::now(), Arc::clone(&sent));
        let done = CancellationToken::new();
        let reporter = tokio::spawn(report(updates, done.clone(), move |update: RunProgress| {
            log.lock().unwrap().push((start.elapsed(), update.finished, update.last_tool));
            async {}
        }));
        // 100 calls finishing 10 ms apart: one second.
        for i in 0..100 {
            call(&progress, &format!("mcp__s__t{i}"));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        done.cancel();
        reporter.await.unwrap();
        let sent = sent.lock().unwrap().clone();
        assert!((4..=6).contains(&sent.len()), "{sent:?}");
        assert!(sent.windows(2).all(|w| w[1].0 - w[0].0 >= INTERVAL && w[1].1 > w[0].1), "{sent:?}");
        assert_eq!(sent.last().map(|s| (s.1, s.2.as_str())), Some((100, "mcp__s__t99")), "the last state is sent");
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_sent_without_a_change_or_after_the_run() {
        let (progress, updates) = watch::channel(RunProgress::default());
        let count = Arc::new(Mutex::new(0));
        let counted = Arc::clone(&count);
        let done = CancellationToken::new();
        let reporter = tokio::spawn(report(updates, done.clone(), move |_| {
            *counted.lock().unwrap() += 1;
            async {}
        }));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(*count.lock().unwrap(), 0);
        done.cancel();
        reporter.await.unwrap();
        call(&progress, "mcp__s__late");
        assert_eq!(*count.lock().unwrap(), 0);
    }
}
