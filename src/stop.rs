//! SIGTERM and SIGINT. The first asks the process to stop, cleanly and within the shutdown's bound; once a
//! shutdown is under way, however it began (a signal, stdin closed, a command done), the next one ends the
//! process at once with status 128 + its number, and what was not cleaned up yet goes as when the server is
//! killed (runners with it, containers when their stdin closes, scratch at the next server's sweep).

use std::sync::atomic::{AtomicBool, Ordering};

/// Resolves on SIGTERM or SIGINT; a shutdown is under way from then on.
pub async fn requested() {
    let Some(mut signals) = StopSignals::listen() else { return std::future::pending().await };
    let first = signals.next().await;
    tracing::info!("stopping (signal {first}); another SIGTERM or SIGINT ends the process at once");
    exit_at_next(Some(signals));
}

/// Marks a shutdown under way: the next SIGTERM or SIGINT ends the process at once.
pub fn exit_at_next_signal() {
    exit_at_next(None);
}

/// Starts the one task that ends the process at the next signal, listening on `signals` (the ones a stop was
/// just requested with, so that none in between is missed) or on fresh ones.
fn exit_at_next(signals: Option<StopSignals>) {
    static ARMED: AtomicBool = AtomicBool::new(false);
    if ARMED.swap(true, Ordering::SeqCst) {
        return;
    }
    let Some(mut signals) = signals.or_else(StopSignals::listen) else { return };
    tokio::spawn(async move {
        let signal = signals.next().await;
        tracing::warn!("stopping at once (signal {signal} during the shutdown)");
        std::process::exit(128 + signal);
    });
}

/// SIGTERM and SIGINT, as they come.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> Option<StopSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Some(StopSignals { term: signal(SignalKind::terminate()).ok()?, int: signal(SignalKind::interrupt()).ok()? })
    }

    /// The number of the next one.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.int.recv() => libc::SIGINT,
        }
    }
}
