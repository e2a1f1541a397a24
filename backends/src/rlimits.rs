//! Resource limits of a runner, shared by the host backends. Computed before fork/exec so that the child
//! only makes syscalls.

use crate::Limits;

#[cfg(target_os = "linux")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_os = "linux"))]
type Resource = libc::c_int;

pub type Rlimit = (Resource, u64);

/// What bounds a run's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryBound {
    /// rlimits: private memory (RLIMIT_DATA: heap, anonymous memory, thread stacks) at `memory_mb`, and the
    /// address space (RLIMIT_AS, everything mapped) at `memory_mb` plus reservations.
    Rlimits,
    /// A cgroup counts the memory the run uses (a container's, or the run's own): no memory rlimits.
    Cgroup,
    /// The server watches the runner's footprint and kills it past `memory_mb` (`crate::watch`): no memory
    /// rlimits either.
    Watch,
}

/// The systems whose rules for limits differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Linux,
    Mac,
    Other,
}

impl Os {
    pub const CURRENT: Os = if cfg!(target_os = "linux") {
        Os::Linux
    } else if cfg!(target_os = "macos") {
        Os::Mac
    } else {
        Os::Other
    };
}

impl MemoryBound {
    /// What bounds the memory of a runner on this host, on `os`: its cgroup where one counts it; else
    /// rlimits, except on macOS, which rejects RLIMIT_AS below what a process has mapped (EINVAL since macOS 12;
    /// an interpreter maps more than any sane limit at start) and does not enforce RLIMIT_DATA: there the
    /// server watches.
    pub fn for_host(os: Os, cgroup_bounds_memory: bool) -> MemoryBound {
        match (cgroup_bounds_memory, os) {
            (true, _) => MemoryBound::Cgroup,
            (false, Os::Mac) => MemoryBound::Watch,
            (false, _) => MemoryBound::Rlimits,
        }
    }
}

/// Signals a run may have queued at once. The count is the user's (per user namespace, and charged to every
/// namespace up to the host's), shared with the host user's own processes: without a bound a program that
/// queues blocked real-time signals to itself leaves none for them. Python itself queues none.
#[cfg(target_os = "linux")]
pub const PENDING_SIGNALS: u64 = 64;

/// The limits of one run, each with its name (`RLIMIT_<name>`, for a runner applying them itself inside a
/// container, whose resource numbers may differ from the server's OS). CPU time is a backstop behind the
/// wall-clock kill.
pub fn named_for_run(limits: &Limits, cpu_seconds: u64, memory: MemoryBound) -> Vec<(&'static str, Resource, u64)> {
    let mut named = vec![
        ("CPU", libc::RLIMIT_CPU, cpu_seconds),
        ("FSIZE", libc::RLIMIT_FSIZE, limits.file_size_bytes()),
        ("NOFILE", libc::RLIMIT_NOFILE, limits.open_files),
        ("CORE", libc::RLIMIT_CORE, 0),
        // Docker's containers are Linux too; on a macOS server their VM's user quota is at stake, not the host's.
        #[cfg(target_os = "linux")]
        ("SIGPENDING", libc::RLIMIT_SIGPENDING, PENDING_SIGNALS),
    ];
    if memory == MemoryBound::Rlimits {
        named.push(("DATA", libc::RLIMIT_DATA, limits.memory_bytes()));
        named.push(("AS", libc::RLIMIT_AS, limits.address_space_bytes()));
    }
    named
}

/// The limits of one run, as this OS's resources.
pub fn for_run(limits: &Limits, cpu_seconds: u64, memory: MemoryBound) -> Vec<Rlimit> {
    named_for_run(limits, cpu_seconds, memory).iter().map(|&(_, resource, value)| (resource, value)).collect()
}

/// CPU seconds for a run with this wall-clock budget: one more than it may take.
pub fn cpu_seconds(timeout: std::time::Duration) -> u64 {
    timeout.as_secs() + 1
}

/// Applies the limits to the calling process (async-signal-safe: only setrlimit).
pub fn apply(rlimits: &[Rlimit]) -> std::io::Result<()> {
    for &(resource, value) in rlimits {
        let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
        // SAFETY: setrlimit with a valid pointer to a local struct.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// RLIMIT_NPROC for a process whose user already runs `existing` tasks (the count is per user, in the user's
/// namespace): `tasks` more.
#[cfg(target_os = "linux")]
pub fn nproc(existing: u64, tasks: u64) -> Rlimit {
    (libc::RLIMIT_NPROC, existing.saturating_add(tasks))
}

/// The tasks (threads) of the processes whose real user is `uid`, as far as this process can see: what
/// RLIMIT_NPROC counts for that user outside a user namespace of the run's own. Linux only (`/proc`).
#[cfg(target_os = "linux")]
pub fn tasks_of_user(uid: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut tasks = 0;
    for entry in entries.flatten() {
        if !entry.file_name().as_encoded_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let real_uid = field("Uid:").and_then(|ids| ids.split_whitespace().next()).and_then(|u| u.parse().ok());
        if real_uid == Some(uid) {
            tasks += field("Threads:").and_then(|t| t.parse::<u64>().ok()).unwrap_or(1);
        }
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_a_second_over_the_wall_clock_budget_and_cores_are_off() {
        let limits =
            for_run(&Limits::default(), cpu_seconds(std::time::Duration::from_secs(120)), MemoryBound::Rlimits);
        assert!(limits.contains(&(libc::RLIMIT_CPU, 121)));
        assert!(limits.contains(&(libc::RLIMIT_NOFILE, 256)));
        assert!(limits.contains(&(libc::RLIMIT_CORE, 0)));
        #[cfg(target_os = "linux")]
        assert!(limits.contains(&(libc::RLIMIT_SIGPENDING, PENDING_SIGNALS)));
    }

    #[test]
    fn memory_counts_private_memory_and_leaves_room_for_reserved_address_space() {
        const MIB: u64 = 1024 * 1024;
        let limits = for_run(&Limits::default(), 10, MemoryBound::Rlimits);
        assert!(limits.contains(&(libc::RLIMIT_DATA, 1024 * MIB)));
        // 64 stacks of 8 MiB and 256 MiB for libraries and two malloc arenas.
        assert!(limits.contains(&(libc::RLIMIT_AS, (1024 + 512 + 256) * MIB)));
        let with_cgroup = for_run(&Limits::default(), 10, MemoryBound::Cgroup);
        assert!(with_cgroup.iter().all(|&(resource, _)| resource != libc::RLIMIT_AS && resource != libc::RLIMIT_DATA));
    }

    #[test]
    fn macos_gets_no_memory_rlimit_and_a_watch_instead() {
        assert_eq!(MemoryBound::for_host(Os::Mac, false), MemoryBound::Watch);
        assert_eq!(MemoryBound::for_host(Os::Linux, false), MemoryBound::Rlimits);
        assert_eq!(MemoryBound::for_host(Os::Linux, true), MemoryBound::Cgroup);
        let watched = for_run(&Limits::default(), 10, MemoryBound::Watch);
        assert!(watched.iter().all(|&(resource, _)| resource != libc::RLIMIT_AS && resource != libc::RLIMIT_DATA));
        assert!(watched.contains(&(libc::RLIMIT_NOFILE, 256)) && watched.contains(&(libc::RLIMIT_CORE, 0)));
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_tasks_of_our_own_user_include_this_test() {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        assert!(tasks_of_user(uid) >= 1);
        assert_eq!(nproc(10, 64), (libc::RLIMIT_NPROC, 74));
    }
}
