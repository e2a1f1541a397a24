//! MCP over streamable HTTP at `http://ADDR:PORT/mcp` for several clients: rmcp's service behind our
//! [`Guard`], served by hyper. 2025-era clients get sessions (`Mcp-Session-Id`, SSE responses); 2026-07-28
//! clients are served statelessly (JSON, or SSE when notifications come first). Every session has its own
//! handler (so its requests and cancellations are its own) over one shared engine and registry.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::guard::{Guard, MCP_PATH};
use crate::app::{App, SHUTDOWN_LIMIT};
use crate::cli::{CONFIG_ERROR, FAILURE};
use crate::config::{Config, ConfigSource};
use crate::input_required::Parked;
use crate::server::PtcServer;

/// How long open connections (event streams included) get to close once runs are stopped: the last part of
/// the shutdown's [`SHUTDOWN_LIMIT`].
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Serves until SIGTERM or SIGINT; returns the exit status once everything is stopped.
pub async fn serve_http(config: Config, source: ConfigSource, addr: SocketAddr) -> u8 {
    let http = &config.serve.http;
    if !addr.ip().is_loopback() && http.token.is_none() {
        eprintln!(
            "ptc-mcp: refusing to serve on {addr} without serve.http.token: anyone who can reach that address \
             could run programs with your tools; set serve.http.token (e.g. token: ${{PTC_MCP_TOKEN}}) or listen \
             on 127.0.0.1"
        );
        return CONFIG_ERROR;
    }
    let listener = match TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("ptc-mcp: cannot listen on {addr}: {e}");
            return FAILURE;
        }
    };
    let app = match App::start(&config, Some(http.max_concurrent_runs)) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("ptc-mcp: {e}");
            return CONFIG_ERROR;
        }
    };
    super::reopen_on_hangup(app.audit.clone());
    let bound = listener.local_addr().unwrap_or(addr);
    super::announce(&app, &config, &source, format!("http://{bound}{MCP_PATH}"));

    let stop_mcp = CancellationToken::new();
    let mcp = mcp_service(&app, stop_mcp.clone());
    let guard = Arc::new(Guard::new(http));
    let connections = GracefulShutdown::new();
    let stop = super::stop_requested();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: wait a little instead of spinning.
                        tracing::warn!("accepting a connection failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (guard, mcp) = (Arc::clone(&guard), mcp.clone());
                let service = service_fn(move |request: http::Request<Incoming>| {
                    let (guard, mcp) = (Arc::clone(&guard), mcp.clone());
                    async move {
                        Ok::<_, Infallible>(match guard.check(request.uri(), request.headers()) {
                            Ok(()) => mcp.handle(request).await,
                            Err(refusal) => refusal.into_response(),
                        })
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                let connection = connections.watch(connection);
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::debug!("HTTP connection ended: {e}");
                    }
                });
            }
            () = &mut stop => break,
        }
    }
    drop(listener);
    // Runs are stopped first and answered over the connections still open, and the downstream servers
    // stopped; then the MCP sessions and the connections are closed.
    app.shutdown(SHUTDOWN_LIMIT - CLOSE_GRACE).await;
    stop_mcp.cancel();
    if tokio::time::timeout(CLOSE_GRACE, connections.shutdown()).await.is_err() {
        tracing::debug!("some HTTP connections were still open after {}s", CLOSE_GRACE.as_secs());
    }
    0
}

/// rmcp's streamable HTTP service: sessions for 2025-era clients, stateless requests (JSON responses
/// unless something is sent before the result) for 2026-07-28 ones. The guard checks Host and Origin.
fn mcp_service(app: &App, stop: CancellationToken) -> StreamableHttpService<PtcServer, LocalSessionManager> {
    let (registry, engine) = (Arc::clone(&app.registry), Arc::clone(&app.engine));
    let parked = Arc::new(Parked::default());
    let config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(stop)
        .disable_allowed_hosts()
        .disable_allowed_origins();
    StreamableHttpService::new(
        move || Ok(PtcServer::new(Arc::clone(&registry), Arc::clone(&engine)).sharing(Arc::clone(&parked))),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
