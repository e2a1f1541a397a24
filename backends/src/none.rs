//! The `none` backend: the same runner in a plain child process with an empty environment, rlimits and a
//! process-group kill, but no OS isolation. An explicit opt-in for machines without a real sandbox.

use std::process::Stdio;

use async_trait::async_trait;
use tokio::process::Command;
use tokio::sync::OnceCell;

use crate::process::host_runner;
use crate::protocol::RUNNER_SOURCE;
use crate::python::{Python, PythonError, resolve_python};
use crate::{Availability, Limits, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

pub struct NoneBackend {
    configured_python: String,
    python: OnceCell<Result<Python, PythonError>>,
}

impl NoneBackend {
    pub fn new(configured_python: String) -> Self {
        NoneBackend { configured_python, python: OnceCell::new() }
    }

    async fn python(&self) -> &Result<Python, PythonError> {
        self.python.get_or_init(|| resolve_python(&self.configured_python)).await
    }
}

#[async_trait]
impl SandboxBackend for NoneBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    async fn probe(&self) -> Availability {
        match self.python().await {
            Ok(python) => Availability::Available {
                detail: format!(
                    "NO OS ISOLATION (programs can read and write your files and use the network); empty \
                     environment, rlimits and process-group kill only; python {} at {}",
                    python.version,
                    python.executable.display()
                ),
            },
            Err(e) => Availability::Unavailable { reason: e.to_string() },
        }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = match self.python().await {
            Ok(python) => python,
            Err(e) => return Err(SpawnError::Unavailable { kind: SandboxKind::None, reason: e.to_string() }),
        };
        let scratch = tempfile::Builder::new().prefix("ptc-run-").tempdir().map_err(SpawnError::Scratch)?;
        let mut command = Command::new(&python.executable);
        command
            .args(["-I", "-S", "-c", RUNNER_SOURCE])
            .env_clear()
            .env("HOME", scratch.path())
            .env("TMPDIR", scratch.path())
            .current_dir(scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        let rlimits = rlimits(&request.limits, request.timeout);
        // SAFETY: the closure only makes async-signal-safe syscalls (setrlimit, prctl).
        unsafe {
            command.pre_exec(move || apply_rlimits(&rlimits));
        }
        let child = command.spawn().map_err(|source| SpawnError::Start {
            program: python.executable.display().to_string(),
            source,
        })?;
        host_runner(child, scratch)
    }
}

/// The rlimits of a runner, computed before fork so the child only makes syscalls.
fn rlimits(limits: &Limits, timeout: std::time::Duration) -> Vec<(libc::__rlimit_resource_t, u64)> {
    // CPU time is a backstop behind the wall-clock kill: a second more than the run may take.
    let cpu_seconds = timeout.as_secs() + 1;
    vec![
        (libc::RLIMIT_CPU, cpu_seconds),
        (libc::RLIMIT_AS, limits.memory_bytes()),
        (libc::RLIMIT_FSIZE, limits.file_size_bytes()),
        (libc::RLIMIT_NOFILE, limits.open_files),
        (libc::RLIMIT_CORE, 0),
    ]
}

fn apply_rlimits(rlimits: &[(libc::__rlimit_resource_t, u64)]) -> std::io::Result<()> {
    for &(resource, value) in rlimits {
        let limit = libc::rlimit { rlim_cur: value, rlim_max: value };
        // SAFETY: setrlimit with a valid pointer to a local struct.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // Die with the server even if it is killed without a chance to clean up.
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_limit_is_a_second_over_the_wall_clock_budget() {
        let limits = rlimits(&Limits::default(), std::time::Duration::from_secs(120));
        assert!(limits.contains(&(libc::RLIMIT_CPU, 121)));
        assert!(limits.contains(&(libc::RLIMIT_AS, 1024 * 1024 * 1024)));
        assert!(limits.contains(&(libc::RLIMIT_NOFILE, 256)));
        assert!(limits.contains(&(libc::RLIMIT_CORE, 0)));
    }
}
