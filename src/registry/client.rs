//! One MCP client session with a downstream server, whatever its transport: the handshake (2026-07-28
//! discovery with a fallback to `initialize` for 2025-era servers), tool listing, re-listing on
//! `tools/list_changed`, and noticing that the connection is lost.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, ClientRequest, Implementation, PingRequest, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::IntoTransport;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use tokio::sync::mpsc;

use super::catalog::ToolEntry;
use super::limits::Limits;
use super::liveness::{self, Loss, Losses};
use super::stdio::StdioProcess;
use super::{http, sse};
use crate::config::{ServerConfig, TransportKind};

/// How long a server may take to start, shake hands and list its tools.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a process whose connection ended may take to exit, so that its exit status explains the end.
const EXIT_WAIT: Duration = Duration::from_secs(1);
/// How often an idle remote session is pinged, so that a server that went away is noticed (its tools
/// hidden) before a program calls it. Any answer, even a JSON-RPC error, means it is there.
const HEARTBEAT: Duration = Duration::from_secs(20);
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// A re-listing after `tools/list_changed` must not stall the session (and its loss detection) for good.
const RELIST_TIMEOUT: Duration = Duration::from_secs(30);

/// Our side of a downstream session: it only needs to hear about tool-list changes.
struct Downstream {
    list_changed: mpsc::Sender<()>,
}

impl ClientHandler for Downstream {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("ptc-mcp", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
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

pub async fn connect(config: &ServerConfig, limits: Limits) -> Result<Session, Loss> {
    match config.transport {
        TransportKind::Stdio => {
            let (mut process, transport) =
                StdioProcess::spawn(config, limits.max_message_bytes).map_err(Loss::connection)?;
            match within(handshake(config, transport)).await {
                Ok(handshake) => Ok(Session::new(config, handshake, Link::Process(Box::new(process)))),
                // A process that died says best why: its exit status and last stderr line.
                Err(why) => Err(Loss::connection(process.exit_reason(EXIT_WAIT).await.unwrap_or(why))),
            }
        }
        TransportKind::Http | TransportKind::Sse => {
            let (signal, losses) = liveness::channel();
            let result = if config.transport == TransportKind::Http {
                let transport = http::transport(config, limits, signal)?;
                within(handshake(config, transport)).await
            } else {
                let opening = tokio::time::timeout(CONNECT_TIMEOUT, sse::connect(config, limits, signal));
                let transport =
                    opening.await.map_err(|_| Loss::connection("the event stream did not open in time"))??;
                within(handshake(config, transport)).await
            };
            match result {
                Ok(handshake) => Ok(Session::new(config, handshake, Link::Remote(losses))),
                // The transport's own account (refused, HTTP 500, rejected credentials) beats rmcp's.
                Err(why) => Err(losses.current().unwrap_or_else(|| Loss::connection(why))),
            }
        }
    }
}

/// Bounds a handshake: a server that accepts the connection but never answers must not stall its supervisor.
async fn within(handshake: impl Future<Output = Result<Handshake, String>>) -> Result<Handshake, String> {
    tokio::time::timeout(CONNECT_TIMEOUT, handshake).await.unwrap_or_else(|_| {
        Err(format!("it did not finish the MCP handshake and tool listing within {}s", CONNECT_TIMEOUT.as_secs()))
    })
}

type Handshake = (RunningService<RoleClient, Downstream>, mpsc::Receiver<()>, Vec<Arc<ToolEntry>>);

async fn handshake<T, E, A>(config: &ServerConfig, transport: T) -> Result<Handshake, String>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let (tx, rx) = mpsc::channel(1);
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let running = Downstream { list_changed: tx }
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let tools = list_tools(&config.name, running.peer()).await?;
    Ok((running, rx, tools))
}

async fn list_tools(server: &str, peer: &Peer<RoleClient>) -> Result<Vec<Arc<ToolEntry>>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    Ok(tools.into_iter().map(|tool| Arc::new(ToolEntry::new(server, tool))).collect())
}

async fn relist(server: &str, peer: &Peer<RoleClient>) -> Result<Vec<Arc<ToolEntry>>, String> {
    tokio::time::timeout(RELIST_TIMEOUT, list_tools(server, peer))
        .await
        .unwrap_or_else(|_| Err(format!("tools/list did not answer within {}s", RELIST_TIMEOUT.as_secs())))
}

impl Session {
    /// What the transport reports as lost (remote sessions only), for explaining failed calls.
    pub fn losses(&self) -> Option<Losses> {
        match &self.link {
            Link::Remote(losses) => Some(losses.clone()),
            Link::Process(_) => None,
        }
    }

    fn new(config: &ServerConfig, (running, list_changed, tools): Handshake, link: Link) -> Session {
        Session { peer: running.peer().clone(), tools, server: config.name.clone(), running, list_changed, link }
    }

    /// Serves the session until its connection is lost, re-listing tools whenever the server says they
    /// changed (`on_relist` gets the new list). Returns why the connection was lost. Errors from a healthy
    /// server never end the session: only a lost connection does (the process or stream ended, or the
    /// transport reported a refused connection, an HTTP 5xx, a dropped stream or rejected credentials).
    pub async fn run_until_lost(self, mut on_relist: impl FnMut(Vec<Arc<ToolEntry>>)) -> Loss {
        let Session { peer, server, running, mut list_changed, mut link, .. } = self;
        let remote = matches!(link, Link::Remote(_));
        let mut heartbeat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        let mut waiting = std::pin::pin!(running.waiting());
        loop {
            tokio::select! {
                _ = &mut waiting => break,
                loss = link.lost() => return loss,
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
        link.reason().await
    }
}
