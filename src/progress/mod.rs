//! Progress for long runs: when a client's `execute_program` request carries a progress token,
//! `notifications/progress` report the run as it goes (see [`notice`] for what each says): the tool calls
//! finished, the lines the program prints, and its `progress()` messages — at most four notifications a
//! second, each message at most 2 KiB (what arrives in between is folded into the next), and none once the run
//! has ended. What is sent takes nothing from the result.

mod notice;
mod printed;
mod relay;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{RequestContext, RoleServer};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::engine::RunProgress;
use notice::{News, Notice};
pub use relay::Relay;

/// At most this many notifications a second.
const INTERVAL: Duration = Duration::from_millis(250);
/// Output chunks (at most 64 KiB each) on their way to the reporter, which takes them as they come.
const PRINTED_QUEUE: usize = 16;

/// What a run has printed so far, as a task's status shows it: its last lines, led by how many came before.
/// It keeps a bounded amount whatever the program prints.
#[derive(Debug, Default)]
pub struct OutputSoFar(printed::Printed);

impl OutputSoFar {
    pub fn push(&mut self, chunk: &str) {
        self.0.push(chunk);
    }

    /// The last lines within `room` bytes (at most [`notice::MAX_MESSAGE`] are kept), `None` before anything
    /// was printed.
    pub fn show(&self, room: usize) -> Option<String> {
        self.0.clone().take(room)
    }
}

/// What a run tells the reporter of its request: how far it is, and what it prints.
pub struct Feed {
    pub progress: watch::Sender<RunProgress>,
    pub printed: mpsc::Sender<String>,
}

/// The reporter of one request's progress.
pub struct Reporter {
    done: CancellationToken,
    /// Ends with the number of notes it sent.
    task: JoinHandle<u64>,
    relay: Option<Relay>,
}

impl Reporter {
    /// Starts reporting if the request asked for progress; the feed goes to the engine.
    pub fn start(context: &RequestContext<RoleServer>) -> Option<(Feed, Reporter)> {
        context.meta.get_progress_token()?;
        let (progress, updates) = watch::channel(RunProgress::default());
        let (printed, arriving) = mpsc::channel(PRINTED_QUEUE);
        let reporter = Reporter::spawn(context, updates, arriving, 0, None)?;
        Some((Feed { progress, printed }, reporter))
    }

    /// Reports a run already under way (`updates`, and its output through `relay`) to this request, if it
    /// asked for progress.
    pub fn attach(
        context: &RequestContext<RoleServer>,
        updates: watch::Receiver<RunProgress>,
        relay: &Relay,
    ) -> Option<Reporter> {
        context.meta.get_progress_token()?;
        let (arriving, notes) = relay.connect();
        Reporter::spawn(context, updates, arriving, notes, Some(relay.clone()))
    }

    fn spawn(
        context: &RequestContext<RoleServer>,
        updates: watch::Receiver<RunProgress>,
        printed: mpsc::Receiver<String>,
        notes: u64,
        relay: Option<Relay>,
    ) -> Option<Reporter> {
        let token = context.meta.get_progress_token()?;
        let done = CancellationToken::new();
        let peer = context.peer.clone();
        let notify = move |notice: Notice| {
            let (peer, token): (_, ProgressToken) = (peer.clone(), token.clone());
            async move {
                let mut param = ProgressNotificationParam::new(token, notice.progress).with_message(notice.message);
                param.total = notice.total;
                if let Err(e) = peer.notify_progress(param).await {
                    tracing::debug!("progress notification not sent: {e}");
                }
            }
        };
        let news = News::since(&updates.borrow(), notes);
        let task = tokio::spawn(report(updates, Some(printed), news, done.clone(), notify));
        Some(Reporter { done, task, relay })
    }

    /// Stops reporting (the run has ended, or waits for the client) and waits until no notification is on
    /// its way.
    pub async fn finish(self) {
        self.done.cancel();
        let notes = self.task.await.unwrap_or_default();
        if let Some(relay) = self.relay {
            relay.disconnect(notes);
        }
    }
}

/// Sends what is new in `updates` and `printed` through `notify`, at most one notification per [`INTERVAL`]
/// (what arrives in between is folded into the next), until `done`; then the notes sent in all. `printed` is
/// taken as it arrives, even while a notification is on its way: a slow client never holds up the program.
async fn report<F, Fut>(
    mut updates: watch::Receiver<RunProgress>,
    mut printed: Option<mpsc::Receiver<String>>,
    mut news: News,
    done: CancellationToken,
    mut notify: F,
) -> u64
where
    F: FnMut(Notice) -> Fut,
    Fut: Future<Output = ()>,
{
    let (mut changed, mut updates_open) = (false, true);
    let mut sending: Option<Pin<Box<Fut>>> = None;
    let mut next = Instant::now();
    loop {
        let due = sending.is_none() && (changed || news.has_printed());
        tokio::select! {
            biased;
            () = done.cancelled() => return news.notes(),
            () = async { sending.as_mut().expect("checked").await }, if sending.is_some() => {
                sending = None;
                next = Instant::now() + INTERVAL;
            }
            // Before the output: a program that never stops printing does not hold notifications up.
            () = tokio::time::sleep_until(next), if due => {
                changed = false;
                if let Some(notice) = news.next(&updates.borrow_and_update()) {
                    sending = Some(Box::pin(notify(notice)));
                }
            }
            chunk = async { printed.as_mut().expect("checked").recv().await }, if printed.is_some() => match chunk {
                Some(chunk) => news.print(&chunk),
                None => printed = None,
            },
            update = updates.changed(), if updates_open && !changed => match update {
                Ok(()) => changed = true,
                Err(_) => updates_open = false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn call(progress: &watch::Sender<RunProgress>, tool: &str) {
        progress.send_modify(|p| {
            p.finished += 1;
            p.last_tool = tool.to_string();
        });
    }

    type Log = Arc<Mutex<Vec<(Duration, Notice)>>>;

    /// A reporter whose notifications are logged with their time; `stall` makes each one take that long.
    fn logging_reporter(
        updates: watch::Receiver<RunProgress>,
        printed: Option<mpsc::Receiver<String>>,
        stall: Duration,
    ) -> (Log, CancellationToken, JoinHandle<u64>) {
        let sent: Log = Arc::default();
        let (start, log) = (Instant::now(), Arc::clone(&sent));
        let done = CancellationToken::new();
        let news = News::since(&updates.borrow(), 0);
        let reporter = tokio::spawn(report(updates, printed, news, done.clone(), move |notice: Notice| {
            log.lock().unwrap().push((start.elapsed(), notice));
            tokio::time::sleep(stall)
        }));
        (sent, done, reporter)
    }

    fn never_closer(sent: &[(Duration, Notice)]) -> bool {
        sent.windows(2).all(|w| w[1].0 - w[0].0 >= INTERVAL && w[1].1.progress > w[0].1.progress)
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_calls_is_reported_at_most_four_times_a_second_and_never_decreasing() {
        let (progress, updates) = watch::channel(RunProgress::default());
        let (sent, done, reporter) = logging_reporter(updates, None, Duration::ZERO);
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
        assert!(never_closer(&sent), "{sent:?}");
        let last = &sent.last().unwrap().1;
        assert_eq!((last.progress, last.message.as_str()), (100.0, "100 tool calls finished; last: mcp__s__t99"));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_sent_without_a_change_or_after_the_run() {
        let (progress, updates) = watch::channel(RunProgress::default());
        let (printed, arriving) = mpsc::channel(PRINTED_QUEUE);
        let (sent, done, reporter) = logging_reporter(updates, Some(arriving), Duration::ZERO);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(sent.lock().unwrap().is_empty());
        done.cancel();
        reporter.await.unwrap();
        call(&progress, "mcp__s__late");
        assert!(printed.send("late\n".into()).await.is_err(), "nobody reads once the run is over");
        assert!(sent.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_output_is_taken_as_it_comes_and_sent_four_times_a_second_in_bounded_messages() {
        let (_progress, updates) = watch::channel(RunProgress::default());
        let (printed, arriving) = mpsc::channel(PRINTED_QUEUE);
        // Each notification takes a second to go out (a slow client): the output does not wait for it.
        let (sent, done, reporter) = logging_reporter(updates, Some(arriving), Duration::from_secs(1));
        let chunk = "0123456789".repeat(6553) + "\n";
        let start = Instant::now();
        for _ in 0..400 {
            // 25 MiB in 64 KiB chunks; the queue has room at once, or the program would wait.
            printed.try_send(chunk.clone()).or(Err("the reporter did not keep up")).unwrap();
            tokio::task::yield_now().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "no wait on the client");
        printed.send("last\n".into()).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        done.cancel();
        reporter.await.unwrap();
        let sent = sent.lock().unwrap().clone();
        assert!(never_closer(&sent), "{sent:?}");
        assert!(sent.iter().all(|(_, notice)| notice.message.len() <= notice::MAX_MESSAGE), "{sent:?}");
        assert!(sent.len() <= 3, "one a second while each takes a second: {}", sent.len());
        assert!(sent.last().unwrap().1.message.ends_with("\nlast"), "{sent:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_progress_calls_sends_the_latest_four_times_a_second() {
        let (progress, updates) = watch::channel(RunProgress::default());
        let (sent, done, reporter) = logging_reporter(updates, None, Duration::ZERO);
        for i in 1..=10_000u64 {
            progress.send_modify(|p| {
                p.said = i;
                p.message = format!("step {i}");
                p.fraction = Some(i as f64 / 10_000.0);
            });
            if i % 100 == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        done.cancel();
        reporter.await.unwrap();
        let sent = sent.lock().unwrap().clone();
        assert!((4..=6).contains(&sent.len()), "{sent:?}");
        assert!(never_closer(&sent), "{sent:?}");
        let last = &sent.last().unwrap().1;
        assert_eq!(last.message, "step 10000");
        assert_eq!(last.total, Some(last.progress), "a fraction of 1");
    }
}
