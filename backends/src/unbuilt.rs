use async_trait::async_trait;

use crate::{Availability, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

/// A backend kind this build cannot provide. It reports why, so the server can refuse runs with a clear
/// reason instead of falling back to a weaker sandbox.
pub struct UnbuiltBackend {
    kind: SandboxKind,
}

impl UnbuiltBackend {
    pub fn new(kind: SandboxKind) -> Self {
        UnbuiltBackend { kind }
    }

    fn reason(&self) -> String {
        format!(
            "the {} backend is not part of this build of ptc-mcp yet; use landlock (Linux) or seatbelt (macOS)",
            self.kind
        )
    }
}

#[async_trait]
impl SandboxBackend for UnbuiltBackend {
    fn kind(&self) -> SandboxKind {
        self.kind
    }

    async fn probe(&self) -> Availability {
        Availability::Unavailable { reason: self.reason() }
    }

    async fn spawn(&self, _request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        Err(SpawnError::Unavailable { kind: self.kind, reason: self.reason() })
    }
}
