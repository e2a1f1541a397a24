use serde::Deserialize;

/// `execution.sandbox`: which backend contains the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxKind {
    /// The OS's own sandbox: seatbelt on macOS, landlock on Linux. Never `none`.
    Auto,
    Seatbelt,
    Landlock,
    Docker,
    /// One pod per runner in a Kubernetes cluster (the `kubernetes` cargo feature).
    Kubernetes,
    /// No OS isolation; explicit opt-in only.
    None,
}

impl SandboxKind {
    /// The concrete kind `auto` stands for on this OS (other kinds are returned unchanged).
    pub fn resolve_auto(self) -> SandboxKind {
        match self {
            SandboxKind::Auto if cfg!(target_os = "macos") => SandboxKind::Seatbelt,
            SandboxKind::Auto => SandboxKind::Landlock,
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SandboxKind::Auto => "auto",
            SandboxKind::Seatbelt => "seatbelt",
            SandboxKind::Landlock => "landlock",
            SandboxKind::Docker => "docker",
            SandboxKind::Kubernetes => "kubernetes",
            SandboxKind::None => "none",
        }
    }
}

impl std::fmt::Display for SandboxKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_never_resolves_to_none() {
        assert_ne!(SandboxKind::Auto.resolve_auto(), SandboxKind::None);
        assert_ne!(SandboxKind::Auto.resolve_auto(), SandboxKind::Auto);
        assert_eq!(SandboxKind::None.resolve_auto(), SandboxKind::None);
        assert_eq!(SandboxKind::Docker.resolve_auto(), SandboxKind::Docker);
    }
}
