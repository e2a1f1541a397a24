//! Running one program: start a runner in the configured sandbox, hand it the program, serve its tool
//! calls and helpers through the registry, and enforce every budget and limit here in the server.

mod lines;
mod output;
mod report;
mod run;
mod trace;

use std::sync::Arc;
use std::time::Duration;

use ptc_backends::{Availability, SandboxBackend, SpawnRequest};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::config::ExecutionConfig;
use crate::registry::Registry;
pub use report::RunReport;

/// How long the first run after start-up waits for servers that are still connecting.
pub const FIRST_CONNECT_WAIT: Duration = Duration::from_secs(15);

pub struct Engine {
    backend: Arc<dyn SandboxBackend>,
    availability: OnceCell<Availability>,
    registry: Arc<Registry>,
    settings: ExecutionConfig,
}

impl Engine {
    pub fn new(backend: Arc<dyn SandboxBackend>, registry: Arc<Registry>, settings: ExecutionConfig) -> Self {
        Engine { backend, availability: OnceCell::new(), registry, settings }
    }

    pub fn settings(&self) -> &ExecutionConfig {
        &self.settings
    }

    pub fn backend_kind(&self) -> ptc_backends::SandboxKind {
        self.backend.kind()
    }

    /// The backend's availability, probed once.
    pub async fn availability(&self) -> &Availability {
        self.availability.get_or_init(|| self.backend.probe()).await
    }

    /// Runs `code` to the end, a failure, the time limit, or `cancel`.
    pub async fn execute(&self, code: &str, cancel: CancellationToken) -> RunReport {
        if let Availability::Unavailable { reason } = self.availability().await {
            return RunReport::failed(format!(
                "SandboxError: the '{}' sandbox is unavailable: {reason}",
                self.backend.kind()
            ));
        }
        let request = SpawnRequest { limits: self.settings.limits.clone(), timeout: self.settings.timeout() };
        let runner = match self.backend.spawn(&request).await {
            Ok(runner) => runner,
            Err(e) => return RunReport::failed(format!("SandboxError: {e}")),
        };
        let context = run::RunContext {
            registry: &self.registry,
            settings: &self.settings,
            code,
            deadline: tokio::time::Instant::now() + self.settings.timeout(),
            cancel,
            first_connect_wait: FIRST_CONNECT_WAIT,
        };
        run::drive(runner, context).await
    }
}
