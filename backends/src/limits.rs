use serde::Deserialize;

/// `execution.limits`: resource limits of one run. Conservative defaults; every value must be positive.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory of the runner, in MiB: what it uses where a cgroup counts it, else its private memory
    /// (RLIMIT_DATA) with room for reserved address space (see [`Limits::address_space_bytes`]).
    pub memory_mb: u64,
    /// Total size of the scratch directory, in MiB (enforced by backends that mount a sized tmpfs).
    pub scratch_mb: u64,
    /// Maximum number of open files.
    pub open_files: u64,
    /// Largest file the program may write, in MiB.
    pub file_size_mb: u64,
    /// Most tasks (threads and processes) of one run.
    pub tasks: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_mb: 1024, scratch_mb: 256, open_files: 256, file_size_mb: 64, tasks: 64 }
    }
}

const MIB: u64 = 1024 * 1024;
/// The stack glibc reserves for each thread (the default RLIMIT_STACK), counted in its address space.
pub const THREAD_STACK_BYTES: u64 = 8 * MIB;
/// Address space for the interpreter's own mappings (libraries, two malloc arenas: `MALLOC_ARENA_MAX=2`).
pub const BASE_ADDRESS_SPACE_BYTES: u64 = 256 * MIB;
/// The glibc setting that keeps malloc to two arenas (each reserves 64 MiB of address space), set in the
/// runner's environment by the host backends.
pub const MALLOC_ARENA_MAX: (&str, &str) = ("MALLOC_ARENA_MAX", "2");

impl Limits {
    pub fn memory_bytes(&self) -> u64 {
        self.memory_mb.saturating_mul(MIB)
    }

    /// The address-space limit where no cgroup counts memory: `memory_mb` plus what is reserved without being
    /// used (a stack per task, libraries and malloc arenas), so that it bounds mappings outside RLIMIT_DATA
    /// without counting reservations against the memory a program can use.
    pub fn address_space_bytes(&self) -> u64 {
        self.memory_bytes()
            .saturating_add(self.tasks.saturating_mul(THREAD_STACK_BYTES))
            .saturating_add(BASE_ADDRESS_SPACE_BYTES)
    }

    pub fn file_size_bytes(&self) -> u64 {
        self.file_size_mb.saturating_mul(MIB)
    }
}
