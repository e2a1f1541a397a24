//! MCP over streamable HTTP at `http://ADDR:PORT/mcp` for several clients: rmcp's service behind our
//! [`Guard`], served by hyper. 2025-era clients get sessions (`Mcp-Session-Id`, SSE responses); 2026-07-28
//! clients are served statelessly (JSON, or SSE when notifications come first). Every session has its own
//! handler (so its requests and cancellations are its own) over one shared engine and registry. What hostile
//! clients could cost is bounded: connections ([`connection`]), sessions ([`Sessions`]), and a body that does
//! not decode is answered with a JSON-RPC error ([`undecodable`]). Beside `/mcp`: the probes and metrics of
//! [`health`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, JsonRpcError, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::connection::{self, Clock, OpenCount, Timed, TimedIo, Timeouts};
use super::guard::{Guard, MCP_PATH, Refusal, Reply};
use super::health::{self, HEALTH_PATH, METRICS_PATH, READY_PATH, Readiness};
use super::sessions::Sessions;
use super::undecodable;
use crate::app::{App, SHUTDOWN_LIMIT};
use crate::cli::{CONFIG_ERROR, FAILURE};
use crate::config::{Config, ConfigSource, HttpConfig};
use crate::engine::Engine;
use crate::metrics::Gauges;
use crate::server::{Held, PtcServer};

/// How long open connections (event streams included) get to close once runs are stopped: the last part of
/// the shutdown's [`SHUTDOWN_LIMIT`].
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The environment variable the README keeps the token in.
const TOKEN_ENV: &str = "PTC_MCP_TOKEN";
/// The header of a 2025-era client's session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Serves until SIGTERM or SIGINT; returns the exit status once everything is stopped.
pub async fn serve_http(config: Config, source: ConfigSource, addr: SocketAddr) -> u8 {
    let http = &config.serve.http;
    match check_token(http, addr, std::env::var(TOKEN_ENV).ok().as_deref()) {
        Ok(None) => {}
        Ok(Some(warning)) => eprintln!("ptc-mcp: warning: {warning}"),
        Err(refusal) => {
            eprintln!("ptc-mcp: {refusal}");
            return CONFIG_ERROR;
        }
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
    super::hangup::listen(app.audit.clone(), source.clone(), config.clone());
    let bound = listener.local_addr().unwrap_or(addr);
    super::announce(&app, &config, &source, format!("http://{bound}{MCP_PATH}"));

    let stop_mcp = CancellationToken::new();
    let sessions = Arc::new(Sessions::new(http));
    sessions.expire_idle(stop_mcp.clone());
    let endpoint = Arc::new(Endpoint {
        guard: Guard::new(http),
        mcp: mcp_service(&app, Arc::new(source), Arc::clone(&sessions), stop_mcp.clone()),
        sessions,
        readiness: Readiness::new(Arc::clone(&app.engine)),
        engine: Arc::clone(&app.engine),
        connections: OpenCount::default(),
    });
    // A connection takes a slot before it is accepted: past the cap, new ones wait in the listen queue.
    let slots = Arc::new(Semaphore::new(connection::connection_cap(http.max_connections)));
    let timeouts = Timeouts::from_config(http);
    let connections = GracefulShutdown::new();
    // Readiness goes false first; runs in flight get up to `drain_seconds` to finish while connections are
    // still accepted (a load balancer takes a moment to see it), then the shutdown stops what is left.
    let stop = async {
        super::stop_requested().await;
        endpoint.readiness.stop();
        drain(&app.engine, http.drain()).await;
    };
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        spawn_connection(stream, Arc::clone(&endpoint), timeouts, slot, &connections);
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

/// Waits up to `grace` for the runs in flight (and any that start meanwhile) to end.
async fn drain(engine: &Engine, grace: Duration) {
    if grace.is_zero() {
        return;
    }
    tracing::info!("draining: runs in flight get up to {:.1}s to finish; /readyz answers 503", grace.as_secs_f64());
    if tokio::time::timeout(grace, engine.drain()).await.is_err() {
        tracing::info!("runs were still in flight after the drain's {:.1}s; stopping them", grace.as_secs_f64());
    }
}

/// Serves one accepted connection on a task of its own, timed by its [`Clock`]; its slot is given back when it
/// ends.
fn spawn_connection(
    stream: TcpStream,
    endpoint: Arc<Endpoint>,
    timeouts: Timeouts,
    slot: OwnedSemaphorePermit,
    connections: &GracefulShutdown,
) {
    let clock = Clock::start(timeouts);
    let open = endpoint.connections.open();
    let service = service_fn({
        let clock = clock.clone();
        move |request: Request<Incoming>| {
            clock.request_started();
            let (endpoint, clock) = (Arc::clone(&endpoint), clock.clone());
            async move { Ok::<_, Infallible>(endpoint.answer(request).await.map(|body| Timed::new(body, clock))) }
        }
    });
    let connection =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(TimedIo::new(stream, clock)), service);
    let connection = connections.watch(connection);
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("HTTP connection ended: {e}");
        }
        drop((open, slot));
    });
}

/// rmcp's streamable HTTP service: sessions for 2025-era clients, stateless requests (JSON responses
/// unless something is sent before the result) for 2026-07-28 ones. The guard checks Host and Origin.
fn mcp_service(
    app: &App,
    source: Arc<ConfigSource>,
    sessions: Arc<Sessions>,
    stop: CancellationToken,
) -> StreamableHttpService<PtcServer, Sessions> {
    let (registry, engine) = (Arc::clone(&app.registry), Arc::clone(&app.engine));
    let held = Held::new(&engine);
    let config = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(stop)
        .disable_allowed_hosts()
        .disable_allowed_origins();
    StreamableHttpService::new(
        move || {
            let server = PtcServer::new(Arc::clone(&registry), Arc::clone(&engine), Arc::clone(&source));
            Ok(server.sharing(held.clone()))
        },
        sessions,
        config,
    )
}

/// What answers every request on every connection.
struct Endpoint {
    guard: Guard,
    mcp: StreamableHttpService<PtcServer, Sessions>,
    sessions: Arc<Sessions>,
    readiness: Readiness,
    engine: Arc<Engine>,
    connections: OpenCount,
}

impl Endpoint {
    async fn answer(&self, request: Request<Incoming>) -> Reply {
        match request.uri().path() {
            HEALTH_PATH => health::probe(request.method(), Ok(())),
            READY_PATH => health::probe(request.method(), self.readiness.check()),
            METRICS_PATH => match self.guard.check(request.uri(), request.headers()) {
                Ok(()) => health::metrics(request.method(), self.metrics()),
                Err(refusal) => refusal.into_response(),
            },
            MCP_PATH => match self.guard.check(request.uri(), request.headers()) {
                Ok(()) => self.mcp(request).await,
                Err(refusal) => refusal.into_response(),
            },
            _ => Refusal::NotFound.into_response(),
        }
    }

    /// The text of `/metrics`: the engine's counts and the gauges as they are now.
    fn metrics(&self) -> String {
        let (pool_ready, pool_starting) = self.engine.pool_runners();
        let gauges = Gauges {
            pool_ready,
            pool_starting,
            sessions: self.sessions.open(),
            connections: self.connections.now(),
            program_sessions: self.engine.live_sessions(),
        };
        self.engine.metrics().render(&gauges)
    }

    async fn mcp(&self, request: Request<Incoming>) -> Reply {
        match *request.method() {
            Method::POST => self.post(request).await,
            Method::DELETE => self.delete(request).await,
            _ => self.mcp.handle(request).await,
        }
    }

    /// Reads the body and decodes it before rmcp does (which would answer text that is not a message with a
    /// plain-text 415): what does not decode gets a JSON-RPC error, and an `initialize` past
    /// `serve.http.max_sessions` a clear refusal.
    async fn post(&self, request: Request<Incoming>) -> Reply {
        let (parts, body) = request.into_parts();
        let max = self.mcp.config.max_request_body_bytes;
        let bytes = match Limited::new(body, max).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) if e.is::<LengthLimitError>() => {
                return plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("payload too large: a request may have {max} bytes"),
                );
            }
            Err(e) => return plain(StatusCode::BAD_REQUEST, format!("bad request: the body could not be read: {e}")),
        };
        let message = match undecodable::decode(&bytes) {
            Ok(message) => message,
            Err(undecodable) => return json_rpc(StatusCode::BAD_REQUEST, undecodable.answer()),
        };
        if let ClientJsonRpcMessage::Request(request) = &message
            && matches!(request.request, ClientRequest::InitializeRequest(_))
            && !parts.headers.contains_key(SESSION_HEADER)
            && let Err(full) = self.sessions.admit().await
        {
            let error = ErrorData::new(ErrorCode(SERVER_ERROR), full.to_string(), None);
            return json_rpc(
                StatusCode::SERVICE_UNAVAILABLE,
                ServerJsonRpcMessage::Error(JsonRpcError::new(Some(request.id.clone()), error)),
            );
        }
        self.mcp.handle(Request::from_parts(parts, Full::new(bytes))).await
    }

    /// Ends a session: 204 (rmcp says 202 Accepted, which the official Python SDK reports as a failed
    /// termination), or 404 for a session that is not ours or no longer alive.
    async fn delete(&self, request: Request<Incoming>) -> Reply {
        let session = request.headers().get(SESSION_HEADER).and_then(|id| id.to_str().ok());
        if let Some(id) = session
            && !self.sessions.has_session(&id.into()).await.unwrap_or(false)
        {
            return plain(
                StatusCode::NOT_FOUND,
                "not found: no such MCP session (it ended, or was never issued)".into(),
            );
        }
        let mut response = self.mcp.handle(request).await;
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        response
    }
}

/// The JSON-RPC code of a refusal that is the server's own (the range -32000 to -32099 is for those).
const SERVER_ERROR: i32 = -32000;

fn json_rpc(status: StatusCode, message: ServerJsonRpcMessage) -> Reply {
    let body = serde_json::to_vec(&message).expect("JSON-RPC messages serialise");
    http::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("a valid response")
}

fn plain(status: StatusCode, text: String) -> Reply {
    http::Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(text + "\n")).boxed())
        .expect("a valid response")
}

/// Why `serve --http` will not start: every client must show a token.
#[derive(Debug, PartialEq, thiserror::Error)]
enum Unprotected {
    #[error(
        "refusing to serve on {0} without serve.http.token: anyone who can reach the port (on loopback, any local \
         user) could run programs with your tools and secrets; put `token: ${{{TOKEN_ENV}}}` under serve.http in \
         the config and start with {TOKEN_ENV}=$(openssl rand -hex 24)"
    )]
    NoToken(SocketAddr),
    #[error(
        "refusing to serve on {0} without serve.http.token: {TOKEN_ENV} is set in the environment, but the config \
         does not use it; put `token: ${{{TOKEN_ENV}}}` under serve.http in the config"
    )]
    TokenNotInConfig(SocketAddr),
}

/// Whether the config protects the server with a token (`from_env`: the value of `PTC_MCP_TOKEN`); a
/// warning when that variable is set to something else, which its clients would send in vain.
fn check_token(http: &HttpConfig, addr: SocketAddr, from_env: Option<&str>) -> Result<Option<String>, Unprotected> {
    let from_env = from_env.filter(|value| !value.is_empty());
    match (&http.token, from_env) {
        (None, None) => Err(Unprotected::NoToken(addr)),
        (None, Some(_)) => Err(Unprotected::TokenNotInConfig(addr)),
        (Some(token), Some(value)) if token.expose() != value => Ok(Some(format!(
            "{TOKEN_ENV} is set in the environment but is not serve.http.token: clients that send \
             ${TOKEN_ENV} will get 401 (use `token: ${{{TOKEN_ENV}}}` in the config, or unset the variable)"
        ))),
        (Some(_), _) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(token: Option<&str>) -> HttpConfig {
        let text = token.map(|t| format!("serve:\n  http:\n    token: {t}\n")).unwrap_or_default();
        Config::parse(&text, &|_| None).unwrap().serve.http
    }

    #[test]
    fn serving_needs_a_token_from_the_config_and_warns_when_the_environment_has_another() {
        let addr: SocketAddr = "127.0.0.1:8765".parse().unwrap();
        assert_eq!(check_token(&http(None), addr, None), Err(Unprotected::NoToken(addr)));
        assert_eq!(check_token(&http(None), addr, Some("")), Err(Unprotected::NoToken(addr)));
        assert_eq!(check_token(&http(None), addr, Some("abc")), Err(Unprotected::TokenNotInConfig(addr)));
        assert_eq!(check_token(&http(Some("abc")), addr, Some("abc")), Ok(None));
        assert_eq!(check_token(&http(Some("abc")), addr, None), Ok(None));
        let warning = check_token(&http(Some("abc")), addr, Some("xyz")).unwrap().unwrap();
        assert!(
            warning.starts_with("PTC_MCP_TOKEN is set in the environment but is not serve.http.token"),
            "{warning}"
        );
        assert!(!warning.contains("abc") && !warning.contains("xyz"), "never the tokens: {warning}");
        let refusal = Unprotected::TokenNotInConfig(addr).to_string();
        assert!(refusal.contains("put `token: ${PTC_MCP_TOKEN}` under serve.http"), "{refusal}");
    }
}
