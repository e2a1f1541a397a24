//! One MCP client session with a downstream server: the handshake (2026-07-28 discovery with a fallback
//! to `initialize` for 2025-era servers), tool listing, and re-listing on `tools/list_changed`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use tokio::sync::mpsc;

use super::catalog::ToolEntry;
use super::stdio::StdioProcess;
use crate::config::{ServerConfig, TransportKind};

/// How long a server may take to start, shake hands and list its tools.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

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

/// A connected server.
pub struct Session {
    pub peer: Peer<RoleClient>,
    pub tools: Vec<Arc<ToolEntry>>,
    server: String,
    running: RunningService<RoleClient, Downstream>,
    list_changed: mpsc::Receiver<()>,
    process: StdioProcess,
}

pub async fn connect(config: &ServerConfig) -> Result<Session, String> {
    match config.transport {
        TransportKind::Stdio => {}
        other => {
            return Err(format!(
                "transport '{}' is not supported by this build of ptc-mcp yet (only stdio)",
                other.name()
            ));
        }
    }
    let mut process = StdioProcess::spawn(config)?;
    match tokio::time::timeout(CONNECT_TIMEOUT, handshake(config, &mut process)).await {
        Ok(Ok((running, list_changed, tools))) => Ok(Session {
            peer: running.peer().clone(),
            tools,
            server: config.name.clone(),
            running,
            list_changed,
            process,
        }),
        Ok(Err(why)) => Err(format!("{why}; {}", process.exit_reason().await)),
        Err(_) => Err(format!(
            "it did not finish the MCP handshake and tool listing within {}s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}

type Handshake = (RunningService<RoleClient, Downstream>, mpsc::Receiver<()>, Vec<Arc<ToolEntry>>);

async fn handshake(config: &ServerConfig, process: &mut StdioProcess) -> Result<Handshake, String> {
    let (Some(stdout), Some(stdin)) = (process.child.stdout.take(), process.child.stdin.take()) else {
        return Err("its stdio was not piped".to_string());
    };
    let (tx, rx) = mpsc::channel(1);
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    };
    let running = Downstream { list_changed: tx }
        .serve_with_lifecycle((stdout, stdin), lifecycle)
        .await
        .map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let tools = list_tools(&config.name, running.peer()).await?;
    Ok((running, rx, tools))
}

async fn list_tools(server: &str, peer: &Peer<RoleClient>) -> Result<Vec<Arc<ToolEntry>>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
    Ok(tools.into_iter().map(|tool| Arc::new(ToolEntry::new(server, tool))).collect())
}

impl Session {
    /// Serves the session until its connection is lost, re-listing tools whenever the server says they
    /// changed (`on_relist` gets the new list). Returns why the connection was lost. Errors from a healthy
    /// server never end the session: only a lost connection does.
    pub async fn run_until_lost(mut self, mut on_relist: impl FnMut(Vec<Arc<ToolEntry>>)) -> String {
        let peer = self.peer.clone();
        let mut waiting = std::pin::pin!(self.running.waiting());
        loop {
            tokio::select! {
                _ = &mut waiting => break,
                Some(()) = self.list_changed.recv() => match list_tools(&self.server, &peer).await {
                    Ok(tools) => on_relist(tools),
                    Err(why) if peer.is_transport_closed() => tracing::debug!(server = %self.server, "{why}"),
                    Err(why) => tracing::warn!(server = %self.server, "re-listing tools failed, keeping the old list: {why}"),
                },
            }
        }
        self.process.exit_reason().await
    }
}
