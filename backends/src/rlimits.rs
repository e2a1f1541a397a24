//! Resource limits of a runner, shared by the host backends. Computed before fork/exec so that the child
//! only makes syscalls.

use crate::Limits;

#[cfg(target_os = "linux")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_os = "linux"))]
type Resource = libc::c_int;

pub type Rlimit = (Resource, u64);

/// The limits of one run, each with its name (`RLIMIT_<name>`, for a runner applying them itself inside a
/// container, whose resource numbers may differ from the server's OS). CPU time is a backstop behind the
/// wall-clock kill.
pub fn named_for_run(limits: &Limits, cpu_seconds: u64) -> [(&'static str, Resource, u64); 5] {
    [
        ("CPU", libc::RLIMIT_CPU, cpu_seconds),
        ("AS", libc::RLIMIT_AS, limits.memory_bytes()),
        ("FSIZE", libc::RLIMIT_FSIZE, limits.file_size_bytes()),
        ("NOFILE", libc::RLIMIT_NOFILE, limits.open_files),
        ("CORE", libc::RLIMIT_CORE, 0),
    ]
}

/// The limits of one run, as this OS's resources.
pub fn for_run(limits: &Limits, cpu_seconds: u64) -> Vec<Rlimit> {
    named_for_run(limits, cpu_seconds).iter().map(|&(_, resource, value)| (resource, value)).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_a_second_over_the_wall_clock_budget_and_cores_are_off() {
        let limits = for_run(&Limits::default(), cpu_seconds(std::time::Duration::from_secs(120)));
        assert!(limits.contains(&(libc::RLIMIT_CPU, 121)));
        assert!(limits.contains(&(libc::RLIMIT_AS, 1024 * 1024 * 1024)));
        assert!(limits.contains(&(libc::RLIMIT_NOFILE, 256)));
        assert!(limits.contains(&(libc::RLIMIT_CORE, 0)));
    }
}
