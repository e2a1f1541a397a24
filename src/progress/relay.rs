//! The progress of a run that outlives its requests (it waits between them for an approval): what it prints
//! goes to whichever request reports on it now, and is dropped while none does, so the program never waits
//! for a client that is away; the count of notes sent carries over from request to request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::PRINTED_QUEUE;

#[derive(Debug, Clone, Default)]
pub struct Relay {
    /// The output queue of the request reporting now.
    to: Arc<Mutex<Option<mpsc::Sender<String>>>>,
    /// Notifications with a note (printed lines, a `progress()` message) sent to the requests before.
    notes: Arc<AtomicU64>,
}

impl Relay {
    /// The queue the run's output goes into; a task passes what arrives on until the run drops its end.
    pub fn feed(&self) -> mpsc::Sender<String> {
        let (printed, mut arriving) = mpsc::channel::<String>(PRINTED_QUEUE);
        let to = Arc::clone(&self.to);
        tokio::spawn(async move {
            while let Some(chunk) = arriving.recv().await {
                let reporting = to.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(reporting) = reporting {
                    let _ = reporting.send(chunk).await;
                }
            }
        });
        printed
    }

    /// A request reports from now on: its queue of output, and the notes sent before.
    pub(super) fn connect(&self) -> (mpsc::Receiver<String>, u64) {
        let (printed, arriving) = mpsc::channel(PRINTED_QUEUE);
        *self.to.lock().unwrap_or_else(|e| e.into_inner()) = Some(printed);
        (arriving, self.notes.load(Ordering::Relaxed))
    }

    /// The request reports no more; it sent `notes` in all.
    pub(super) fn disconnect(&self, notes: u64) {
        *self.to.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.notes.fetch_max(notes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn output_goes_to_the_request_reporting_now_and_is_dropped_between_requests() {
        let relay = Relay::default();
        let feed = relay.feed();
        for i in 0..PRINTED_QUEUE * 4 {
            feed.send(format!("away {i}\n")).await.unwrap();
        }
        let (mut arriving, notes) = relay.connect();
        assert_eq!(notes, 0);
        feed.send("here\n".into()).await.unwrap();
        let mut first = arriving.recv().await.unwrap();
        while first.starts_with("away") {
            first = arriving.recv().await.unwrap();
        }
        assert_eq!(first, "here\n");
        relay.disconnect(3);
        assert_eq!(relay.connect().1, 3, "the next request counts on from there");
    }
}
