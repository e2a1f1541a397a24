//! The `kubernetes` backend: one pod per runner, created from a template (or claimed from an agent-sandbox
//! warm pool), with the same runner and protocol as every backend over the pod's `exec` stream. Its settings
//! are always built (a config means the same in every build); the backend itself only with the `kubernetes`
//! feature, else [`Unbuilt`] says how to get it.

mod settings;

pub use settings::{KubernetesSettings, KubernetesSettingsError};

#[cfg(feature = "kubernetes")]
mod backend;
#[cfg(feature = "kubernetes")]
mod claim;
#[cfg(feature = "kubernetes")]
mod ending;
#[cfg(feature = "kubernetes")]
mod error;
#[cfg(feature = "kubernetes")]
pub mod pod;
#[cfg(feature = "kubernetes")]
mod runner;

#[cfg(feature = "kubernetes")]
pub use backend::KubernetesBackend;

/// The `kubernetes` backend of a build without it: unavailable, saying how to build it.
#[cfg(not(feature = "kubernetes"))]
pub struct Unbuilt;

#[cfg(not(feature = "kubernetes"))]
const UNBUILT: &str = "this ptc-mcp was built without the kubernetes backend; build it with `cargo build --release \
                       --features kubernetes` (or `cargo install ptc-mcp --features kubernetes`)";

#[cfg(not(feature = "kubernetes"))]
#[async_trait::async_trait]
impl crate::SandboxBackend for Unbuilt {
    fn kind(&self) -> crate::SandboxKind {
        crate::SandboxKind::Kubernetes
    }

    async fn probe(&self) -> crate::Availability {
        crate::Availability::Unavailable { reason: UNBUILT.to_string() }
    }

    async fn spawn(&self, _: &crate::SpawnRequest) -> Result<crate::RunnerProcess, crate::SpawnError> {
        Err(crate::SpawnError::Unavailable { kind: crate::SandboxKind::Kubernetes, reason: UNBUILT.to_string() })
    }
}

#[cfg(all(test, not(feature = "kubernetes")))]
mod tests {
    use super::*;
    use crate::{Availability, Limits, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

    #[tokio::test]
    async fn a_build_without_the_backend_says_how_to_get_it() {
        let reason = UNBUILT.to_string();
        assert_eq!(Unbuilt.probe().await, Availability::Unavailable { reason: reason.clone() });
        let request = SpawnRequest { limits: Limits::default(), timeout: std::time::Duration::from_secs(1) };
        match Unbuilt.spawn(&request).await.err() {
            Some(SpawnError::Unavailable { kind: SandboxKind::Kubernetes, reason: said }) => assert_eq!(said, reason),
            other => panic!("expected the kubernetes backend to be unavailable, got {other:?}"),
        }
    }
}
