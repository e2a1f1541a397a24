//! The `none` backend: the same runner in a plain child process with an empty environment, rlimits and a
//! process-group kill, but no OS isolation. An explicit opt-in for machines without a real sandbox.
//! `execution.mounts` are symlinks in the working directory (nothing stops a program from following them
//! anywhere, or from going anywhere else).

use std::time::Duration;

use async_trait::async_trait;

use crate::host::{RunGroup, runner_args, spawn_confined};
use crate::python::ResolvedPython;
use crate::{
    Availability, BackendSettings, Mount, Packages, Python, RunnerProcess, SandboxBackend, SandboxKind, SpawnError,
    SpawnRequest,
};

/// How long the check of `execution.preload` (one interpreter importing them) may take.
const PACKAGES_PROBE_TIMEOUT: Duration = Duration::from_secs(60);

pub struct NoneBackend {
    python: ResolvedPython,
    mounts: Vec<Mount>,
    packages: Packages,
    /// `execution.zygote` (Linux): runners are forked from it.
    #[cfg(target_os = "linux")]
    zygote: Option<crate::zygote::Zygote>,
}

impl NoneBackend {
    pub fn new(settings: &BackendSettings) -> Self {
        NoneBackend {
            python: ResolvedPython::new(settings.python.clone()),
            mounts: settings.mounts.clone(),
            packages: settings.packages.clone(),
            #[cfg(target_os = "linux")]
            zygote: settings.zygote.then(Default::default),
        }
    }

    /// Runs the packages step alone, when one is asked: a preload that fails makes the backend unavailable
    /// with its reason.
    async fn check_packages(&self, python: &Python) -> Result<(), String> {
        if self.packages.is_empty() {
            return Ok(());
        }
        let args = self.packages.probe_args(&python.installed, "")?;
        let request = SpawnRequest { limits: crate::Limits::default(), timeout: PACKAGES_PROBE_TIMEOUT };
        let mut argv = vec![python.executable.clone().into_os_string()];
        argv.extend(args.into_iter().map(Into::into));
        let probe = spawn_confined(&request, &[], |_| argv).await.map_err(|e| e.to_string())?;
        let probe = probe.finish_probe(PACKAGES_PROBE_TIMEOUT).await;
        match crate::packages::probe_failure(&probe.stderr) {
            Some(failure) => Err(failure),
            None if probe.completed && probe.exit == crate::ExitInfo::Code(0) => Ok(()),
            None => Err(format!("the check of execution.preload failed ({}): {}", probe.exit, probe.stderr.trim())),
        }
    }
}

#[async_trait]
impl SandboxBackend for NoneBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::None
    }

    async fn probe(&self) -> Availability {
        let python = match self.python.get().await {
            Ok(python) => python,
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        if let Err(reason) = self.check_packages(python).await {
            return Availability::Unavailable { reason };
        }
        Availability::Available {
            detail: format!(
                "NO OS ISOLATION (programs can read and write your files and use the network); empty \
                 environment, rlimits and process-group kill only; {}; python {} at {}",
                RunGroup::describe(),
                python.version,
                python.executable.display()
            ),
        }
        .with_more_detail(&crate::shown_detail(&self.mounts, &self.packages, &python.installed))
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = self.python.for_spawn(SandboxKind::None).await?;
        let options = self
            .packages
            .runner_argument(&python.installed, &self.mounts)
            .map_err(|reason| SpawnError::Unavailable { kind: SandboxKind::None, reason })?;
        #[cfg(target_os = "linux")]
        if let Some(zygote) = &self.zygote {
            let start = || start_zygote(python.executable.clone(), options.clone());
            match crate::host::fork_confined(zygote, request, &self.mounts, start).await {
                Ok(runner) => return Ok(runner),
                Err(crate::host::ForkError::Spawn(e)) => return Err(e),
                Err(crate::host::ForkError::Zygote(e)) => tracing::debug!("starting a fresh runner: {e}"),
            }
        }
        let mut argv = vec![python.executable.clone().into_os_string()];
        argv.extend(runner_args(options).into_iter().map(Into::into));
        spawn_confined(request, &self.mounts, |_| argv).await
    }

    async fn shutdown(&self) {
        #[cfg(target_os = "linux")]
        if let Some(zygote) = &self.zygote {
            zygote.shutdown().await;
        }
        crate::scratch::release();
    }
}

/// The `none` zygote: the interpreter with the zygote source, its socket as stdin, the server's death its own.
#[cfg(target_os = "linux")]
async fn start_zygote(
    python: std::path::PathBuf,
    options: Option<String>,
) -> Result<crate::zygote::ZygoteProcess, String> {
    let (socket, theirs) = crate::zygote::socket_pair().map_err(|e| e.to_string())?;
    let mut command = crate::host::runner_command(&python);
    command.args(crate::python::isolated_args(crate::protocol::ZYGOTE_SOURCE));
    command.arg(options.unwrap_or_else(|| "{}".to_string())).arg(r#"{"backend": "none"}"#);
    command.stdin(std::process::Stdio::from(theirs)).stdout(std::process::Stdio::null()).current_dir("/");
    command.envs(crate::host::runner_env(None));
    // SAFETY: the closure only makes async-signal-safe syscalls (close_range, prctl).
    unsafe {
        command.pre_exec(crate::host::zygote_pre_exec);
    }
    let child = crate::spawner::spawn(command).await.map_err(|e| format!("{}: {e}", python.display()))?;
    Ok(crate::zygote::ZygoteProcess { child, socket })
}
