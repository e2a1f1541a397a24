//! MCP over stdio: one client, until its stdin closes or the process is told to stop.

use rmcp::ServiceExt;

use crate::app::{App, SHUTDOWN_LIMIT};
use crate::config::{Config, ConfigSource};
use crate::server::PtcServer;

/// Serves one client on stdin/stdout; returns the exit status once everything is stopped.
pub async fn serve_stdio(config: Config, source: ConfigSource) -> u8 {
    let app = match App::start(&config, None) {
        Ok(app) => app,
        Err(e) => {
            crate::cli::print_err(&format!("ptc-mcp: {e}\n"));
            return crate::cli::CONFIG_ERROR;
        }
    };
    super::hangup::listen(app.audit.clone(), source.clone(), config.clone());
    super::announce(&app, &config, &source, "stdio".to_string());
    let transport = super::stdio_transport::StdioTransport::new(tokio::io::stdin(), tokio::io::stdout());
    let input_ended = transport.input_ended();
    let serving = PtcServer::new(app.registry.clone(), app.engine.clone(), source.into()).serve(transport);
    tokio::select! {
        served = serving => match served {
            Ok(server) => {
                // The session lives on in its own task until the shutdown below has ended the runs, so that they
                // end as stopped by the server (and answered), not as cancelled by a vanished client. The end of
                // stdin starts the shutdown at once: rmcp would wait up to 5 s for the requests in hand first.
                let session = tokio::spawn(server.waiting());
                tokio::select! {
                    _ = session => {}
                    () = input_ended.cancelled() => {}
                    () = super::stop_requested() => {}
                }
            }
            Err(e) => tracing::info!("no MCP session: {e}"),
        },
        () = super::stop_requested() => {}
    }
    // Runs still going are stopped; their runners, the pool's and what the backend keeps outside the process
    // (containers, scratch directories) go before the downstream servers do.
    app.shutdown(SHUTDOWN_LIMIT).await;
    0
}
