//! The `none` backend: the same runner in a plain child process with an empty environment, rlimits and a
//! process-group kill, but no OS isolation. An explicit opt-in for machines without a real sandbox.

use std::process::Stdio;

use async_trait::async_trait;
use tokio::process::Command;

use crate::process::host_runner;
use crate::protocol::RUNNER_SOURCE;
use crate::python::ResolvedPython;
use crate::{Availability, RunnerProcess, rlimits, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

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
                     environment, rlimits and process-group kill only; python {} at {}",
                    python.version,
                    python.executable.display()
                ),
            },
            Err(e) => Availability::Unavailable { reason: e.to_string() },
        }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = match self.python.get().await {
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
        let rlimits = rlimits::for_run(&request.limits, rlimits::cpu_seconds(request.timeout));
        // SAFETY: the closure only makes async-signal-safe syscalls (setrlimit, prctl).
        unsafe {
            command.pre_exec(move || confine(&rlimits));
        }
        let child = command.spawn().map_err(|source| SpawnError::Start {
            program: python.executable.display().to_string(),
            source,
        })?;
        host_runner(child, scratch)
    }
}

/// In the child before exec: the run's limits, and death with the server.
fn confine(rlimits: &[rlimits::Rlimit]) -> std::io::Result<()> {
    rlimits::apply(rlimits)?;
    // Die with the server even if it is killed without a chance to clean up.
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
