use serde::Deserialize;

/// `execution.limits`: resource limits of one run. Conservative defaults; every value must be positive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Address-space (memory) limit of the runner, in MiB.
    pub memory_mb: u64,
    /// Total size of the scratch directory, in MiB (enforced by backends that mount a sized tmpfs).
    pub scratch_mb: u64,
    /// Maximum number of open files.
    pub open_files: u64,
    /// Largest file the program may write, in MiB.
    pub file_size_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_mb: 1024, scratch_mb: 256, open_files: 256, file_size_mb: 64 }
    }
}

const MIB: u64 = 1024 * 1024;

impl Limits {
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mb.saturating_mul(MIB)
    }

    pub fn file_size_bytes(&self) -> u64 {
        self.file_size_mb.saturating_mul(MIB)
    }
}
