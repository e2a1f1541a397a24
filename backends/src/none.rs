//! The `none` backend: the same runner in a plain child process with an empty environment, rlimits and a
//! process-group kill, but no OS isolation. An explicit opt-in for machines without a real sandbox.

use async_trait::async_trait;

use crate::host::{RunGroup, runner_args, spawn_confined};
use crate::python::ResolvedPython;
use crate::{Availability, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

pub struct NoneBackend {
    python: ResolvedPython,
}

impl NoneBackend {
    pub fn new(configured_python: String) -> Self {
        NoneBackend { python: ResolvedPython::new(configured_python) }
    }
}

#[async_trait]
impl SandboxBackend for NoneBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    async fn probe(&self) -> Availability {
        match self.python.get().await {
            Ok(python) => Availability::Available {
                detail: format!(
                    "NO OS ISOLATION (programs can read and write your files and use the network); empty \
                     environment, rlimits and process-group kill only; {}; python {} at {}",
                    RunGroup::describe(),
                    python.version,
                    python.executable.display()
                ),
            },
            Err(e) => Availability::Unavailable { reason: e.to_string() },
        }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = self.python.for_spawn(SandboxKind::None).await?;
        let mut argv = vec![python.executable.clone().into_os_string()];
        argv.extend(runner_args().into_iter().map(Into::into));
        spawn_confined(request, |_| argv).await
    }

    async fn shutdown(&self) {
        crate::scratch::release();
    }
}
