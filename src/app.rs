//! What every command starts from the config: the registry of downstream servers, the audit file and the
//! engine that runs programs, and how they stop (runs and sandboxes first, then the downstream servers, then
//! the audit file's last lines), all within [`SHUTDOWN_LIMIT`].

use std::sync::Arc;
use std::time::Duration;

use ptc_backends::BackendSettings;

use crate::audit::AuditLog;
use crate::config::{Config, ServerConfig};
use crate::engine::{ConfirmPolicy, Engine};
use crate::registry::Registry;

/// The longest a shutdown takes, from the request to stop (a signal, stdin closed, a command done) to the
/// process's exit.
pub const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);
/// The part of a shutdown kept for the downstream servers, which stop within about 3 s (stdin closed, then
/// SIGTERM, then SIGKILL), and for the audit file's last lines. The runs and the sandbox get the rest: what
/// they have not cleaned up by then goes as it does when the server is killed (runners by the parent-death
/// signal, containers when their stdin closes, scratch directories at the next server's sweep).
const DOWNSTREAM_SHARE: Duration = Duration::from_secs(4);
/// Beyond a server's own connect timeout, how long a command waits for its first attempt to be settled.
const SETTLE_MARGIN: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("config error: {0}")]
    Config(#[source] crate::config::InvalidConfig),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error("cannot find its own executable (needed to start sandboxes): {0}")]
    OwnExecutable(#[source] std::io::Error),
}

pub struct App {
    pub registry: Arc<Registry>,
    pub engine: Arc<Engine>,
    pub audit: Option<Arc<AuditLog>>,
    /// The longest a configured server may take to connect.
    longest_connect: Duration,
}

impl App {
    /// Starts connecting the servers in the background and prepares the engine (on a tokio runtime), with
    /// at most `run_limit` programs running at once if given.
    pub fn start(config: &Config, run_limit: Option<usize>) -> Result<App, StartError> {
        let settings = backend_settings(config)?;
        let audit = AuditLog::open(&config.logging)?.map(Arc::new);
        let registry = Registry::start(config, config.tools.filter().map_err(StartError::Config)?);
        let confirm = match config.tools.confirm_set().map_err(StartError::Config)? {
            tools if tools.is_empty() => None,
            tools => Some(ConfirmPolicy { tools, timeout: config.tools.confirm_timeout() }),
        };
        let backend = ptc_backends::select(config.execution.sandbox, &settings);
        let engine = Engine::new(backend, Arc::clone(&registry), config.execution.clone())
            .with_audit(audit.clone())
            .with_run_limit(run_limit)
            .with_confirm(confirm);
        let longest_connect = config.servers.iter().map(|s| s.connect_timeout()).max().unwrap_or_default();
        Ok(App { registry, engine: Arc::new(engine), audit, longest_connect })
    }

    /// Waits until every server's first connection attempt has finished (within its connect timeout), for
    /// commands that start cold and want the whole picture.
    pub async fn wait_for_servers(&self) {
        self.registry.wait_for_first_attempts(self.longest_connect + SETTLE_MARGIN).await;
    }

    /// [`App::wait_for_servers`] for these servers only.
    pub async fn wait_for_these_servers(&self, servers: &[&ServerConfig]) {
        let longest_connect = servers.iter().map(|server| server.connect_timeout()).max().unwrap_or_default();
        let names = servers.iter().map(|server| server.name.clone()).collect();
        self.registry.wait_for_first_attempts_of(&names, longest_connect + SETTLE_MARGIN).await;
    }

    /// Stops runs under way and cleans up after them and the sandbox, then stops the downstream servers, so
    /// that nothing outlives the process, and writes the audit file's last lines; all within `limit` (at
    /// most [`SHUTDOWN_LIMIT`], less what the caller keeps for itself).
    pub async fn shutdown(&self, limit: Duration) {
        crate::stop::exit_at_next_signal();
        tracing::debug!("shutting down within {limit:?}");
        let deadline = tokio::time::Instant::now() + limit;
        let runs_limit = limit.saturating_sub(DOWNSTREAM_SHARE);
        if tokio::time::timeout(runs_limit, self.engine.shutdown()).await.is_err() {
            tracing::warn!(
                "runs and sandboxes were not all cleaned up within {:.1}s; leaving the rest",
                runs_limit.as_secs_f64()
            );
        }
        self.registry.shutdown().await;
        if let Some(audit) = &self.audit
            && tokio::time::timeout_at(deadline, audit.flush()).await.is_err()
        {
            tracing::warn!("the audit file's last lines were not written within the shutdown's {limit:?}");
        }
    }
}

/// What the sandbox backends need from the config and this executable (the landlock helper is this binary).
pub fn backend_settings(config: &Config) -> Result<BackendSettings, StartError> {
    let helper = std::env::current_exe().map_err(StartError::OwnExecutable)?;
    Ok(BackendSettings {
        python: config.execution.python.clone(),
        helper,
        docker: config.execution.docker.clone(),
        kubernetes: config.execution.kubernetes.clone(),
        limits: config.execution.limits.clone(),
        allow_degraded: config.execution.allow_degraded,
        zygote: config.execution.zygote,
        mounts: config.execution.backend_mounts(),
        packages: config.execution.packages(),
    })
}
