//! One MCP client session with a downstream server, whatever its transport: starting it within the server's
//! `connect_timeout_seconds` (era probe and handshake: see [`start`]; tool listing), re-listing on
//! `tools/list_changed`, noticing that the connection is lost, and closing it politely on shutdown.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientConfig, ClientRequest, PingRequest};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, ServiceError};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::catalog::ToolEntry;
use super::limits::Limits;
use super::liveness::{self, Loss, Losses};
use super::start::{self, StartError};
use super::stdio::StdioProcess;
use super::{http, sse};
use crate::config::{ServerConfig, TransportKind};
use crate::oauth::Credentials;

/// How often an idle remote session is pinged, so that a server that went away is noticed (its tools
/// hidden) before a program calls it. Any answer, even a JSON-RPC error, means it is there.
const HEARTBEAT: Duration = Duration::from_secs(20);
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// A re-listing after `tools/list_changed` must not stall the session (and its loss detection) for good.
const RELIST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a process whose connection ended may take to exit, so that its exit status explains the end.
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How long a closing session may take to wind down (its transport closed: a stdio server's stdin).
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// Our side of a downstream session: it only needs to hear about tool-list changes.
struct Downstream {
    list_changed: mpsc::Sender<()>,
}

impl ClientHandler for Downstream {
    fn get_info(&self) -> ClientConfig {
        start::client_info()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // A full channel already holds a pending re-list, which will see this change too.
        let _ = self.list_changed.try_send(());
    }
}

/// What carries a session, and explains its end.
enum Link {
    /// A child process: its exit status and stderr say why it ended.
    Process(Box<StdioProcess>),
    /// An HTTP connection: its transport reports the first loss.
    Remote(Losses),
}

impl Link {
    async fn reason(&mut self) -> Loss {
        match self {
            Link::Process(process) => Loss::connection(
                process.exit_reason(EXIT_WAIT).await.unwrap_or_else(|| "closed its output but kept running".into()),
            ),
            Link::Remote(losses) => losses.current().unwrap_or_else(|| Loss::connection("the connection closed")),
        }
    }

    /// Resolves when the transport reports a loss; never for a process (its end closes the session).
    async fn lost(&mut self) -> Loss {
        match self {
            Link::Process(_) => std::future::pending().await,
            Link::Remote(losses) => losses.wait().await,
        }
    }
}

/// A connected server.
pub struct Session {
    pub peer: Peer<RoleClient>,
    pub tools: Vec<Arc<ToolEntry>>,
    server: String,
    running: RunningService<RoleClient, Downstream>,
    list_changed: mpsc::Receiver<()>,
    link: Link,
}

/// Starts a session with the server: all of it (process or stream, handshake, tool listing) within its
/// `connect_timeout_seconds`.
pub async fn connect(
    config: &ServerConfig,
    limits: Limits,
    credentials: Option<&Arc<Credentials>>,
) -> Result<Session, Loss> {
    let deadline = Instant::now() + config.connect_timeout();
    match config.transport {
        TransportKind::Stdio => {
            let (mut process, transport) = StdioProcess::spawn(config, limits).map_err(Loss::connection)?;
            match start_session(config, transport, deadline).await {
                Ok(started) => Ok(Session::new(config, started, Link::Process(Box::new(process)))),
                // A process that died says best why: its exit status and last stderr line.
                Err(why) => {
                    Err(Loss::connection(process.exit_reason(EXIT_WAIT).await.unwrap_or_else(|| why.to_string())))
                }
            }
        }
        TransportKind::Http | TransportKind::Sse => {
            let (signal, losses) = liveness::channel();
            let result = if config.transport == TransportKind::Http {
                match credentials {
                    Some(credentials) => {
                        let transport = http::authorized_transport(config, limits, signal, Arc::clone(credentials))?;
                        start_session(config, transport, deadline).await
                    }
                    None => start_session(config, http::transport(config, limits, signal)?, deadline).await,
                }
            } else {
                let opening =
                    tokio::time::timeout_at(deadline, sse::connect(config, limits, signal, credentials.cloned()));
                let transport =
                    opening.await.map_err(|_| Loss::connection(too_slow(config, "open its event stream")))??;
                start_session(config, transport, deadline).await
            };
            match result {
                Ok(started) => Ok(Session::new(config, started, Link::Remote(losses))),
                // The transport's own account (refused, HTTP 500, rejected credentials) beats the handshake's.
                Err(why) => Err(losses.current().unwrap_or_else(|| Loss::connection(why))),
            }
        }
    }
}

type Started = (RunningService<RoleClient, Downstream>, mpsc::Receiver<()>, Vec<Arc<ToolEntry>>);

/// Why a session could not be started.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("did not {what} within {seconds}s (connect_timeout_seconds)")]
    TooSlow { what: &'static str, seconds: f64 },
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    List(#[from] ListError),
}

/// Why a server's tools could not be listed.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error("tools/list failed: {message} (JSON-RPC error {code})")]
    Refused { message: String, code: i32 },
    #[error("closed the connection while listing its tools")]
    Closed,
    #[error("tools/list failed: {0}")]
    Failed(ServiceError),
    #[error("tools/list did not answer within {}s", RELIST_TIMEOUT.as_secs())]
    TooSlow,
}

/// The era probe, the handshake and the tool listing, each bounded by what is left until `deadline`.
async fn start_session<T>(config: &ServerConfig, mut transport: T, deadline: Instant) -> Result<Started, SessionError>
where
    T: Transport<RoleClient> + 'static,
{
    let era = tokio::time::timeout_at(deadline, start::probe(&mut transport))
        .await
        .map_err(|_| too_slow(config, "answer"))??;
    let (tx, rx) = mpsc::channel(1);
    let running = tokio::time::timeout_at(deadline, start::handshake(Downstream { list_changed: tx }, transport, era))
        .await
        .map_err(|_| too_slow(config, "finish the handshake"))??;
    let tools = tokio::time::timeout_at(deadline, list_tools(&config.name, running.peer()))
        .await
        .map_err(|_| too_slow(config, "list its tools"))??;
    Ok((running, rx, tools))
}

/// `did not <what> within 60s (connect_timeout_seconds)`.
fn too_slow(config: &ServerConfig, what: &'static str) -> SessionError {
    SessionError::TooSlow { what, seconds: config.connect_timeout_seconds }
}

async fn list_tools(server: &str, peer: &Peer<RoleClient>) -> Result<Vec<Arc<ToolEntry>>, ListError> {
    let tools = peer.list_all_tools().await.map_err(|e| match e {
        ServiceError::McpError(e) => ListError::Refused { message: e.message.into_owned(), code: e.code.0 },
        ServiceError::TransportClosed => ListError::Closed,
        other => ListError::Failed(other),
    })?;
    Ok(tools.into_iter().map(|tool| Arc::new(ToolEntry::new(server, tool))).collect())
}

async fn relist(server: &str, peer: &Peer<RoleClient>) -> Result<Vec<Arc<ToolEntry>>, ListError> {
    tokio::time::timeout(RELIST_TIMEOUT, list_tools(server, peer)).await.unwrap_or(Err(ListError::TooSlow))
}

impl Session {
    /// What the transport reports as lost (remote sessions only), for explaining failed calls.
    pub fn losses(&self) -> Option<Losses> {
        match &self.link {
            Link::Remote(losses) => Some(losses.clone()),
            Link::Process(_) => None,
        }
    }

    fn new(config: &ServerConfig, (running, list_changed, tools): Started, link: Link) -> Session {
        Session { peer: running.peer().clone(), tools, server: config.name.clone(), running, list_changed, link }
    }

    /// Serves the session until its connection is lost, re-listing tools whenever the server says they
    /// changed (`on_relist` gets the new list). Returns why the connection was lost. Errors from a healthy
    /// server never end the session: only a lost connection does (the process or stream ended, or the
    /// transport reported a refused connection, an HTTP 5xx, a dropped stream or rejected credentials).
    ///
    /// When `stop` is cancelled first, the session is closed politely (a process gets its stdin closed,
    /// then SIGTERM, then SIGKILL, with its whole process group) and `None` is returned.
    pub async fn run_until_lost(
        self,
        stop: &CancellationToken,
        mut on_relist: impl FnMut(Vec<Arc<ToolEntry>>),
    ) -> Option<Loss> {
        let Session { peer, server, running, mut list_changed, mut link, .. } = self;
        let remote = matches!(link, Link::Remote(_));
        let mut heartbeat = tokio::time::interval_at(Instant::now() + HEARTBEAT, HEARTBEAT);
        let closing = running.cancellation_token();
        let mut waiting = std::pin::pin!(running.waiting());
        loop {
            tokio::select! {
                _ = &mut waiting => break,
                loss = link.lost() => return Some(loss),
                () = stop.cancelled() => {
                    // Ending the service closes its transport, which closes a process's stdin.
                    closing.cancel();
                    let _ = tokio::time::timeout(CLOSE_WAIT, &mut waiting).await;
                    if let Link::Process(process) = &mut link {
                        process.stop().await;
                    }
                    return None;
                }
                _ = heartbeat.tick(), if remote => {
                    // Only the transport's verdict matters (it reports a loss); the answer itself does not.
                    let peer = peer.clone();
                    tokio::spawn(async move {
                        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
                        let _ = tokio::time::timeout(HEARTBEAT_TIMEOUT, ping).await;
                    });
                }
                Some(()) = list_changed.recv() => match relist(&server, &peer).await {
                    Ok(tools) => on_relist(tools),
                    Err(why) if peer.is_transport_closed() => tracing::debug!(server = %server, "{why}"),
                    Err(why) => tracing::warn!(server = %server, "re-listing tools failed, keeping the old list: {why}"),
                },
            }
        }
        Some(link.reason().await)
    }
}
