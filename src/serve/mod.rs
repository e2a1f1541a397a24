//! Serving MCP: on stdio (one client) or streamable HTTP (several), and what every way of serving shares: the start-up line, stopping
//! on SIGTERM or SIGINT, and what SIGHUP does (the audit file reopened, the config read again).

mod connection;
mod guard;
mod hangup;
mod health;
mod http;
mod sessions;
mod stdio;
mod stdio_transport;
mod undecodable;

use std::sync::Arc;

pub use http::serve_http;
pub use stdio::serve_stdio;

use crate::app::App;
use crate::config::{Config, ConfigSource};
use crate::stop::requested as stop_requested;

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
