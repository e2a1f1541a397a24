//! The downstream servers: each is connected and supervised in the background, its tools listed into one
//! [`Catalog`], and calls routed to it. A server that is down only hides its own tools. On shutdown every
//! session is closed and every stdio server's process group is gone.

mod backoff;
mod call_error;
mod catalog;
mod client;
mod held;
mod http;
mod http_held;
mod limits;
mod liveness;
mod remote;
pub mod result;
mod sse;
mod start;
mod stdio;
mod task_only;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RoleClient};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ServerConfig, ToolFilter};
use crate::naming::server_prefix;
use crate::oauth::Credentials;
pub use call_error::{CallError, Failure};
pub use catalog::{Catalog, ShapeSlots, ToolEntry};
use held::HeldResult;
use liveness::LossKind;
pub use remote::{client as http_client, describe as describe_request_error};

/// The connection state of one server.
enum ServerState {
    /// The first attempt has not finished yet. (Later attempts keep the reason of the last failure.)
    Starting { since: Instant },
    /// `losses` (remote transports) says why the connection was lost, for calls that fail with it.
    Up { peer: Peer<RoleClient>, tools: Vec<Arc<ToolEntry>>, losses: Option<liveness::Losses> },
    Down {
        reason: String,
        /// An OAuth server without usable tokens (the reason names the command that fixes it).
        needs_login: bool,
    },
}

struct Server {
    config: ServerConfig,
    /// The bearer tokens of a server with `auth`.
    credentials: Option<Arc<Credentials>>,
    state: Mutex<ServerState>,
    /// How long after start-up its first connection attempt finished (either way).
    settled_after: OnceLock<Duration>,
}

pub struct Registry {
    servers: Vec<Arc<Server>>,
    limits: limits::Limits,
    filter: ToolFilter,
    catalog: RwLock<Arc<Catalog>>,
    /// Places for the result shapes the catalog's tools remember.
    shape_slots: ShapeSlots,
    started: Instant,
    /// How many servers have finished their first connection attempt (either way).
    settled: watch::Sender<usize>,
    /// Cancelled on shutdown: the supervisors close their sessions and stop.
    stop: CancellationToken,
    supervisors: Mutex<JoinSet<()>>,
    /// Logins ptc-mcp starts itself (URL-mode elicitation), one at a time.
    logins: tokio::sync::Mutex<()>,
}

/// How long the first listing or run after start-up waits for servers that are still connecting (see
/// [`Registry::wait_for_first_attempts`]).
pub const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(15);
/// How long [`Registry::shutdown`] waits for the supervisors to close their sessions politely (which takes
/// at most ~2 s each, in parallel) before it kills what is left.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(3);

/// What a call gives the program: its value, and the image and audio blocks `show()` can attach.
pub struct CallResult {
    pub value: Box<RawValue>,
    pub media: Vec<result::Media>,
}

/// One row of `server_status()`, the original's shape.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerStatus {
    pub connected: bool,
    pub tools: usize,
    pub error: Option<String>,
    /// An OAuth server that needs `ptc-mcp login` (the error says so); not part of `server_status()`'s shape.
    #[serde(skip)]
    pub needs_login: bool,
}

impl Registry {
    /// Creates the registry and starts connecting every configured server in the background; `filter`
    /// (from `config.tools`) decides which of their tools are callable.
    pub fn start(config: &Config, filter: ToolFilter) -> Arc<Registry> {
        let started = Instant::now();
        let token_store = config.oauth.token_store();
        let registry = Arc::new(Registry {
            servers: config
                .servers
                .iter()
                .map(|c| {
                    Arc::new(Server {
                        config: c.clone(),
                        credentials: Credentials::of(c, token_store.clone()),
                        state: Mutex::new(ServerState::Starting { since: started }),
                        settled_after: OnceLock::new(),
                    })
                })
                .collect(),
            limits: limits::Limits::new(&config.execution),
            filter,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            shape_slots: ShapeSlots::default(),
            started,
            settled: watch::Sender::new(0),
            stop: CancellationToken::new(),
            supervisors: Mutex::new(JoinSet::new()),
            logins: tokio::sync::Mutex::new(()),
        });
        let mut supervisors = registry.supervisors.lock().unwrap_or_else(|e| e.into_inner());
        for server in &registry.servers {
            supervisors.spawn(supervise(Arc::clone(&registry), Arc::clone(server)));
        }
        drop(supervisors);
        registry
    }

    /// Closes every session and stops every stdio server with its whole process group (politely first:
    /// stdin closed, then SIGTERM, then SIGKILL), within a few seconds; servers still starting are killed
    /// at once. The registry serves nothing afterwards.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let mut supervisors = std::mem::take(&mut *self.supervisors.lock().unwrap_or_else(|e| e.into_inner()));
        let closed = tokio::time::timeout(SHUTDOWN_LIMIT, async { while supervisors.join_next().await.is_some() {} });
        if closed.await.is_err() {
            tracing::warn!("downstream servers did not stop within {}s; killing them", SHUTDOWN_LIMIT.as_secs());
            // Aborting drops each session: its process group is killed.
            supervisors.shutdown().await;
        }
    }

    /// The current catalog of callable tools.
    pub fn catalog(&self) -> Arc<Catalog> {
        Arc::clone(&self.catalog.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The configured servers' names, in the config's order.
    pub fn server_names(&self) -> Vec<String> {
        self.servers.iter().map(|server| server.config.name.clone()).collect()
    }

    /// The configured server a tool's namespaced name belongs to: the catalog's, else the server whose
    /// `mcp__<server>__` prefix it has (the longest, should two fit), for a tool its server no longer lists;
    /// `None` for a name no configured server could have.
    pub fn server_of(&self, tool: &str) -> Option<String> {
        if let Some(entry) = self.catalog().tools.get(tool) {
            return Some(entry.server.clone());
        }
        let prefix = |server: &Arc<Server>| server_prefix(&server.config.name);
        self.servers
            .iter()
            .filter(|server| tool.starts_with(&prefix(server)))
            .max_by_key(|server| prefix(server).len())
            .map(|server| server.config.name.clone())
    }

    /// Waits until every server has finished its first connection attempt, at most until `limit` after
    /// start-up. Lets the first program after start-up see the tools of servers that are still starting;
    /// later ones see at once which servers are still starting.
    pub async fn wait_for_first_attempts(&self, limit: Duration) {
        let total = self.servers.len();
        let mut settled = self.settled.subscribe();
        let until = tokio::time::Instant::from_std(self.started + limit);
        let _ = tokio::time::timeout_at(until, settled.wait_for(|n| *n >= total)).await;
    }

    /// [`Registry::wait_for_first_attempts`] for the servers named in `names` only.
    pub async fn wait_for_first_attempts_of(&self, names: &std::collections::BTreeSet<String>, limit: Duration) {
        let mut settled = self.settled.subscribe();
        let until = tokio::time::Instant::from_std(self.started + limit);
        let all_settled = |_: &usize| {
            let mut named = self.servers.iter().filter(|server| names.contains(&server.config.name));
            named.all(|server| server.settled_after.get().is_some())
        };
        let _ = tokio::time::timeout_at(until, settled.wait_for(all_settled)).await;
    }

    /// One sentence for each server that is not connected: `server 'x' is starting (for 12s so far)` or
    /// `server 'x' is unavailable: <reason>`.
    pub fn unavailable(&self) -> Vec<String> {
        self.not_connected().into_iter().map(|(_, sentence)| sentence).collect()
    }

    /// The tool-name prefix (`mcp__<server>__`) of each server that is not connected, with the sentence of
    /// [`Registry::unavailable`]: a program that names one of its tools learns why it is missing.
    pub fn unavailable_prefixes(&self) -> BTreeMap<String, String> {
        self.not_connected().into_iter().collect()
    }

    fn not_connected(&self) -> Vec<(String, String)> {
        self.servers
            .iter()
            .filter_map(|server| {
                let name = &server.config.name;
                let sentence = match &*server.state.lock().unwrap_or_else(|e| e.into_inner()) {
                    ServerState::Up { .. } => return None,
                    ServerState::Starting { since } => format!("server '{name}' is {}", starting(*since)),
                    ServerState::Down { reason, needs_login: true } => reason.clone(),
                    ServerState::Down { reason, .. } => format!("server '{name}' is unavailable: {reason}"),
                };
                Some((server_prefix(name), sentence))
            })
            .collect()
    }

    pub fn statuses(&self) -> BTreeMap<String, ServerStatus> {
        self.servers
            .iter()
            .map(|server| {
                let status = match &*server.state.lock().unwrap_or_else(|e| e.into_inner()) {
                    ServerState::Starting { since } => {
                        ServerStatus { connected: false, tools: 0, error: Some(starting(*since)), needs_login: false }
                    }
                    ServerState::Up { tools, .. } => {
                        ServerStatus { connected: true, tools: tools.len(), error: None, needs_login: false }
                    }
                    ServerState::Down { reason, needs_login } => ServerStatus {
                        connected: false,
                        tools: 0,
                        error: Some(reason.clone()),
                        needs_login: *needs_login,
                    },
                };
                (server.config.name.clone(), status)
            })
            .collect()
    }

    /// Calls a tool by its namespaced name, waiting at most `timeout` for its answer. A large result is read
    /// (and its shape taken, see [`ToolEntry::observe`]) on a blocking thread: the runtime thread serves every
    /// other run meanwhile.
    pub async fn call(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        max_result_bytes: usize,
    ) -> Result<CallResult, CallError> {
        let entry = self.catalog().tools.get(name).cloned().ok_or_else(|| CallError::Unknown(name.to_string()))?;
        let (peer, losses) = self.peer(&entry.server)?;
        let params = CallToolRequestParams::new(entry.tool.name.clone()).with_arguments(arguments);
        // Dropping the call on timeout makes rmcp send notifications/cancelled; the connection stays usable.
        let mut result = match tokio::time::timeout(timeout, peer.call_tool(params)).await {
            Err(_) => return Err(CallError::TimedOut { tool: name.to_string(), seconds: timeout.as_secs_f64() }),
            Ok(Err(error)) if task_only::refused_with(&error) => return Err(self.runs_only_as_a_task(&entry)),
            Ok(Err(error)) => {
                let loss = losses.and_then(|losses| losses.current());
                return Err(CallError::of(name, &entry.server, error, loss, max_result_bytes));
            }
            Ok(Ok(result)) if task_only::refused_in(&result) => return Err(self.runs_only_as_a_task(&entry)),
            Ok(Ok(result)) => result,
        };
        let mut held = held::take(&result);
        let large = held.is_some() || result::is_large(&result);
        let slots = self.shape_slots.clone();
        let read = move || -> Result<CallResult, result::ResultError> {
            let value = match &mut held {
                Some(held) => result::interpret_held(held, &entry.result_shape(), max_result_bytes)?,
                None => result::interpret(&mut result, &entry.result_shape(), max_result_bytes)?,
            };
            entry.observe(&value, &slots);
            let media = result::media(held.map_or(result, HeldResult::into_others));
            Ok(CallResult { value, media })
        };
        let read = if large {
            tokio::task::spawn_blocking(read)
                .await
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic.into_panic()))
        } else {
            read()
        };
        read.map_err(|error| CallError::Result { tool: name.to_string(), error })
    }

    /// Leaves out a tool whose server refused a direct call of it, saying it runs the tool only as a task;
    /// the error for the call.
    fn runs_only_as_a_task(&self, entry: &ToolEntry) -> CallError {
        entry.refused_direct_call();
        self.rebuild_catalog();
        CallError::TaskOnly(entry.namespaced.clone())
    }

    fn peer(&self, server_name: &str) -> Result<(Peer<RoleClient>, Option<liveness::Losses>), CallError> {
        let server = self.servers.iter().find(|s| s.config.name == server_name).expect("entries name known servers");
        let server_name = server_name.to_string();
        match &*server.state.lock().unwrap_or_else(|e| e.into_inner()) {
            ServerState::Up { peer, losses, .. } => Ok((peer.clone(), losses.clone())),
            ServerState::Down { reason, needs_login: true } => Err(CallError::NeedsLogin(reason.clone())),
            ServerState::Down { reason, .. } => Err(CallError::Down { server: server_name, reason: reason.clone() }),
            ServerState::Starting { since } => {
                Err(CallError::Starting { server: server_name, seconds: since.elapsed().as_secs() })
            }
        }
    }

    /// The configured servers a person can log in to (`auth: oauth`) whose tool prefix `code` names.
    pub fn login_servers_named_in(&self, code: &str) -> Vec<String> {
        let interactive = |server: &&Arc<Server>| server.credentials.as_ref().is_some_and(|c| c.is_interactive());
        let named = |server: &&Arc<Server>| code.contains(&server_prefix(&server.config.name));
        self.servers.iter().filter(interactive).filter(named).map(|server| server.config.name.clone()).collect()
    }

    /// Whether server `name` needs login now.
    pub fn needs_login(&self, name: &str) -> bool {
        self.servers.iter().filter(|server| server.config.name == name).any(|server| {
            matches!(
                &*server.state.lock().unwrap_or_else(|e| e.into_inner()),
                ServerState::Down { needs_login: true, .. }
            )
        })
    }

    /// The config of server `name` and its token folder, for a login.
    pub fn login_target(&self, name: &str) -> Option<(ServerConfig, std::path::PathBuf)> {
        let server = self.servers.iter().find(|server| server.config.name == name)?;
        let store = server.credentials.as_ref()?.store()?.to_path_buf();
        Some((server.config.clone(), store))
    }

    /// Held while a login started by ptc-mcp itself is under way: one at a time.
    pub async fn login_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.logins.lock().await
    }

    /// Waits (at most `limit`) until server `name` is connected.
    pub async fn wait_until_connected(&self, name: &str, limit: Duration) {
        let connected = || {
            self.servers.iter().filter(|server| server.config.name == name).any(|server| {
                matches!(&*server.state.lock().unwrap_or_else(|e| e.into_inner()), ServerState::Up { .. })
            })
        };
        let deadline = tokio::time::Instant::now() + limit;
        while !connected() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How long after start-up each server's first connection attempt finished, by server name (`None`
    /// while it is still under way).
    pub fn first_attempt_times(&self) -> BTreeMap<String, Option<Duration>> {
        self.servers.iter().map(|server| (server.config.name.clone(), server.settled_after.get().copied())).collect()
    }

    /// Counts a server's first attempt as finished (once).
    fn mark_settled(&self, server: &Server, first_attempt: &mut bool) {
        if std::mem::take(first_attempt) {
            let _ = server.settled_after.set(self.started.elapsed());
            self.settled.send_modify(|n| *n += 1);
        }
    }

    fn set_state(&self, server: &Server, state: ServerState) {
        *server.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        self.rebuild_catalog();
    }

    fn rebuild_catalog(&self) {
        // Held while the states are read: rebuilds by concurrent supervisors happen one after the other, so
        // the last one written has seen every state change before it (no stale catalog can win).
        let mut current = self.catalog.write().unwrap_or_else(|e| e.into_inner());
        let entries: Vec<Arc<ToolEntry>> = self
            .servers
            .iter()
            .flat_map(|server| match &*server.state.lock().unwrap_or_else(|e| e.into_inner()) {
                ServerState::Up { tools, .. } => tools.clone(),
                _ => Vec::new(),
            })
            .collect();
        let catalog = Arc::new(Catalog::build(entries, &self.filter));
        *current = Arc::clone(&catalog);
        // Tool calls read the catalog: log after letting go of it.
        drop(current);
        for collision in &catalog.collisions {
            tracing::warn!("{collision}");
        }
    }
}

/// `starting (for 12s so far)`.
fn starting(since: Instant) -> String {
    format!("starting (for {}s so far)", since.elapsed().as_secs())
}

const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Connects a server, keeps its tool list current, and reconnects with capped backoff when its connection
/// is lost — forever, without blocking anything else, until the registry stops. Rejected credentials are
/// retried at the capped interval at once (they rarely fix themselves quickly), and a reason is logged once,
/// not on every retry.
async fn supervise(registry: Arc<Registry>, server: Arc<Server>) {
    let name = server.config.name.clone();
    let stop = registry.stop.clone();
    let mut backoff = backoff::Backoff::new(FIRST_RETRY, MAX_RETRY);
    let mut first_attempt = true;
    let mut last_logged: Option<String> = None;
    loop {
        // Stopping drops a connection attempt, which kills a server still starting.
        let attempt = tokio::select! {
            attempt = client::connect(&server.config, registry.limits, server.credentials.as_ref()) => attempt,
            () = stop.cancelled() => return,
        };
        let loss = match attempt {
            Ok(session) => {
                tracing::info!(server = %name, tools = session.tools.len(), "connected");
                last_logged = None;
                let (peer, losses) = (session.peer.clone(), session.losses());
                let up = |tools| ServerState::Up { peer: peer.clone(), tools, losses: losses.clone() };
                registry.set_state(&server, up(session.tools.clone()));
                registry.mark_settled(&server, &mut first_attempt);
                backoff.reset();
                let lost = session.run_until_lost(&stop, |tools| {
                    tracing::info!(server = %name, tools = tools.len(), "tool list changed");
                    registry.set_state(&server, up(tools));
                });
                match lost.await {
                    Some(loss) => loss,
                    None => return,
                }
            }
            Err(loss) => loss,
        };
        let delay = match loss.kind {
            LossKind::Credentials | LossKind::NeedsLogin => backoff.capped_delay(),
            LossKind::Connection => backoff.next_delay(),
        };
        if last_logged.as_deref() == Some(loss.reason.as_str()) {
            tracing::debug!(server = %name, "still unavailable: {}; retrying in {:.1}s", loss.reason, delay.as_secs_f64());
        } else {
            tracing::warn!(server = %name, "unavailable: {}; retrying in {:.1}s", loss.reason, delay.as_secs_f64());
            last_logged = Some(loss.reason.clone());
        }
        let needs_login = loss.kind == LossKind::NeedsLogin;
        registry.set_state(&server, ServerState::Down { reason: loss.reason, needs_login });
        registry.mark_settled(&server, &mut first_attempt);
        // A login (by `ptc-mcp login` in another process) is noticed at once, not after the delay.
        let login = async {
            match (&server.credentials, needs_login) {
                (Some(credentials), true) => credentials.wait_for_login().await,
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = login => {}
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_is_counted_under_the_configured_server_whose_prefix_fits_best() {
        let text = "servers:\n  - name: a\n    command: /nonexistent\n  - name: a_\n    command: /nonexistent\n";
        let config = Config::parse(text, &|_| None).unwrap();
        let registry = Registry::start(&config, config.tools.filter().unwrap());
        assert_eq!(registry.server_names(), ["a", "a_"]);
        assert_eq!(registry.server_of("mcp__a__x").as_deref(), Some("a"));
        assert_eq!(registry.server_of("mcp__a___x").as_deref(), Some("a_"), "the longer prefix");
        assert_eq!(registry.server_of("mcp__b__x"), None);
        assert_eq!(registry.server_of("print"), None);
        registry.shutdown().await;
    }
}
