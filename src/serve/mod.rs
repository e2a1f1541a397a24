//! Serving MCP: on stdio (one client) or streamable HTTP (several), and what every way of serving shares: the start-up line, stopping
//! on SIGTERM or SIGINT, and reopening the audit file on SIGHUP.

mod guard;
mod http;
mod stdio;

use std::sync::Arc;

pub use http::serve_http;
pub use stdio::serve_stdio;

use crate::app::App;
use crate::audit::AuditLog;
use crate::config::{Config, ConfigSource};

/// Resolves on SIGTERM or SIGINT. From then on, another of either ends the process at once (status 128 +
/// the signal's number): a shutdown can always be cut short, and what it had not cleaned up yet goes as when
/// the server is killed.
pub async fn stop_requested() {
    let Some(mut signals) = StopSignals::listen() else { return std::future::pending().await };
    let first = signals.next().await;
    tracing::info!("stopping (signal {first}); another SIGTERM or SIGINT ends the process at once");
    tokio::spawn(async move {
        let signal = signals.next().await;
        crate::cli::print_err(&format!("ptc-mcp: stopping at once (signal {signal} during the shutdown)\n"));
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

/// Reopens the audit file on every SIGHUP (log rotation), while the process runs.
fn reopen_on_hangup(audit: Option<Arc<AuditLog>>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Some(audit) = audit else { return };
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP: the audit file will not be reopened after rotation");
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            audit.reopen();
        }
    });
}

/// Logs the one start-up line in the background: version, where it serves, config, sandbox and its
/// availability (a probe may take a while), servers.
fn announce(app: &App, config: &Config, source: &ConfigSource, serving: String) {
    let engine = Arc::clone(&app.engine);
    let servers: Vec<&str> = config.servers.iter().map(|s| s.name.as_str()).collect();
    let servers = if servers.is_empty() { "none".to_string() } else { servers.join(", ") };
    let source = source.describe();
    tokio::spawn(async move {
        let availability = engine.availability().await.describe();
        tracing::info!(
            "ptc-mcp {} serving MCP on {serving}; config: {source}; sandbox {}: {availability}; servers: {servers}",
            env!("CARGO_PKG_VERSION"),
            engine.backend_kind(),
        );
    });
}
