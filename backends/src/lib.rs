//! Sandbox backends of ptc-mcp and the runner protocol they share.
//!
//! A backend only decides how the runner child is started and contained; the runner itself (stdlib-only
//! Python, embedded in the binary) and its line protocol are the same everywhere. The server picks one
//! backend from `execution.sandbox` with [`select`] and refuses runs while it is unavailable.

#[cfg(target_os = "linux")]
mod cgroup;
mod docker;
pub mod guarantees;
mod host;
mod kind;
mod kubernetes;
mod landlock;
pub mod lifecycle;
mod limits;
mod mounts;
mod none;
mod packages;
pub mod protocol;
mod python;
mod rlimits;
mod scratch;
mod seatbelt;
mod spawner;
mod tail;
mod watch;
#[cfg(target_os = "linux")]
mod zygote;

use std::ffi::OsString;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};

pub use docker::{DockerBackend, DockerSettings, DockerSettingsError};
pub use kind::SandboxKind;
pub use kubernetes::{KubernetesSettings, KubernetesSettingsError};
pub use landlock::LandlockBackend;
pub use limits::Limits;
pub use mounts::{BadName as BadMountName, MAX_NAME as MAX_MOUNT_NAME, Mount, check_name as check_mount_name};
pub use none::NoneBackend;
pub use packages::Packages;
pub use python::{Python, PythonError, resolve_python};
pub use rlimits::cpu_seconds;
pub use seatbelt::{LayoutError as SeatbeltLayoutError, SeatbeltBackend, printable_profile as seatbelt_profile};

/// What a backend can do on this machine right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    /// Fully working; `detail` says what is in force.
    Available { detail: String },
    /// Working with some protection missing; `missing` names it.
    Degraded { detail: String, missing: String },
    /// Cannot run programs; `reason` says why and how to fix it.
    Unavailable { reason: String },
}

impl Availability {
    pub fn is_usable(&self) -> bool {
        !matches!(self, Availability::Unavailable { .. })
    }

    /// The same, with `more` after the detail of a usable one (what a backend shows beyond its own layers).
    pub(crate) fn with_more_detail(self, more: &str) -> Availability {
        match self {
            Availability::Available { detail } => Availability::Available { detail: detail + more },
            Availability::Degraded { detail, missing } => Availability::Degraded { detail: detail + more, missing },
            unavailable => unavailable,
        }
    }

    /// One line for logs and `server_status`.
    pub fn describe(&self) -> String {
        match self {
            Availability::Available { detail } => format!("available: {detail}"),
            Availability::Degraded { detail, missing } => format!("degraded: {detail}; missing: {missing}"),
            Availability::Unavailable { reason } => format!("unavailable: {reason}"),
        }
    }
}

/// Everything a backend needs to start one runner. The program itself is not here: it arrives later in the
/// runner's first message, so runners can be started before their program is known.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Resource limits of the runner and its scratch directory.
    pub limits: Limits,
    /// Wall-clock budget of the whole run; the CPU-time limit is derived from it.
    pub timeout: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("sandbox '{kind}' is unavailable: {reason}")]
    Unavailable { kind: SandboxKind, reason: String },
    #[error("could not create the scratch directory: {0}")]
    Scratch(#[source] std::io::Error),
    #[error("could not start the runner ({program}): {source}")]
    Start {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

/// How a runner ended, as far as the backend can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitInfo {
    Code(i32),
    Signal(i32),
    /// Killed by the server for passing a limit it watches (`watch`): which one, and where it is set.
    PastLimit(String),
    Unknown(String),
}

impl std::fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitInfo::Code(code) => write!(f, "exit status {code}"),
            ExitInfo::Signal(libc::SIGKILL) => write!(f, "killed (SIGKILL, often the memory limit)"),
            ExitInfo::Signal(libc::SIGXCPU) => write!(f, "killed (SIGXCPU: CPU-time limit)"),
            ExitInfo::Signal(libc::SIGXFSZ) => write!(f, "killed (SIGXFSZ: file-size limit)"),
            ExitInfo::Signal(sig) => write!(f, "killed by signal {sig}"),
            ExitInfo::PastLimit(why) => write!(f, "killed (SIGKILL: {why})"),
            ExitInfo::Unknown(why) => write!(f, "{why}"),
        }
    }
}

/// Control over one started runner: waiting for it and killing everything it started.
#[async_trait]
pub trait RunnerControl: Send {
    /// Resolves when the runner's main process has exited. Must not wait for its pipes to close.
    /// Cancellation-safe.
    async fn wait(&mut self) -> ExitInfo;
    /// Whether the runner's main process is known to have exited, without waiting (and without reaping it).
    fn has_exited(&mut self) -> bool;
    /// Kills the runner and everything it started, and waits until they are gone. Idempotent; also done on drop.
    async fn kill(&mut self);
    /// Sends the kill without waiting for it to take effect (a run's result need not wait for the reaping);
    /// `kill` still follows. Backends whose kill is only asynchronous leave it to `kill`.
    fn start_kill(&mut self) {}
    /// The last few KiB the runner wrote to stderr (diagnostics, never shown as program output); complete
    /// once `kill` has returned.
    fn stderr_tail(&self) -> String;
}

/// One started runner: its channel (the runner's stdin/stdout) and its control. Dropping it kills the runner
/// and removes its scratch directory.
pub struct RunnerProcess {
    pub to_runner: Pin<Box<dyn AsyncWrite + Send>>,
    pub from_runner: Pin<Box<dyn AsyncRead + Send>>,
    pub control: Box<dyn RunnerControl>,
}

/// What a probe's interpreter printed and how it ended.
pub(crate) struct ProbeOutput {
    pub stdout: String,
    /// The probe closed its stdout within the time limit.
    pub completed: bool,
    pub exit: ExitInfo,
    pub stderr: String,
}

impl RunnerProcess {
    /// Reads all a probe prints (for up to `limit`), then ends it; a probe still running then is killed, not
    /// waited for.
    pub(crate) async fn finish_probe(mut self, limit: Duration) -> ProbeOutput {
        use tokio::io::AsyncReadExt;
        let mut stdout = String::new();
        let read = tokio::time::timeout(limit, self.from_runner.read_to_string(&mut stdout)).await;
        let completed = matches!(read, Ok(Ok(_)));
        if !completed {
            self.control.kill().await;
        }
        let exit = self.control.wait().await;
        self.control.kill().await;
        ProbeOutput { stdout, completed, exit, stderr: self.control.stderr_tail() }
    }
}

/// A way to start and contain runners. Object-safe so the server can hold `Arc<dyn SandboxBackend>`.
#[async_trait]
pub trait SandboxBackend: Send + Sync {
    fn kind(&self) -> SandboxKind;
    /// Checks what this backend can do here. Cheap enough to call at start-up; the server keeps a usable answer
    /// and asks again (now and then) while the answer is unavailable.
    async fn probe(&self) -> Availability;
    /// Starts one runner for one run.
    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError>;
    /// Releases what outlives single runs (the `docker` backend removes its containers, the others their
    /// scratch directory). Called once when the server stops; runners still running are killed.
    async fn shutdown(&self) {}
}

/// Settings every backend may need, from `execution` in the config.
#[derive(Debug, Clone)]
pub struct BackendSettings {
    /// `execution.python` as configured (a name looked up on PATH, or a path).
    pub python: String,
    /// The `ptc-mcp` binary, which backends re-execute as their confining helper.
    pub helper: PathBuf,
    /// `execution.docker`.
    pub docker: DockerSettings,
    /// `execution.kubernetes`.
    pub kubernetes: KubernetesSettings,
    /// `execution.limits`: the `kubernetes` backend sizes its probe's pod with them.
    pub limits: Limits,
    /// `execution.allow_degraded`: run programs in a sandbox that works here only with protection missing
    /// (landlock without user namespaces); otherwise such a sandbox reports itself unavailable.
    pub allow_degraded: bool,
    /// `execution.zygote`: the `none` and `landlock` backends fork runners from a warm interpreter.
    pub zygote: bool,
    /// `execution.mounts`: host folders programs see in their working directory.
    pub mounts: Vec<Mount>,
    /// `execution.site_packages` and `execution.preload`.
    pub packages: Packages,
}

/// What a probe's detail adds for what runs see beyond the standard library and scratch: the mounts, the
/// package directories shown (`site`) and the preloads; nothing when none is configured.
pub(crate) fn shown_detail(mounts: &[Mount], packages: &Packages, site: &[PathBuf]) -> String {
    format!("{}{}", mounts::describe(mounts), packages.describe(site))
}

/// Builds the backend for a configured kind. `auto` resolves to the OS's real sandbox, never to `none`.
pub fn select(kind: SandboxKind, settings: &BackendSettings) -> Arc<dyn SandboxBackend> {
    lifecycle::use_reaper(settings.helper.clone());
    match kind.resolve_auto() {
        SandboxKind::None => Arc::new(NoneBackend::new(settings)),
        SandboxKind::Landlock => Arc::new(LandlockBackend::new(settings)),
        SandboxKind::Seatbelt => Arc::new(SeatbeltBackend::new(settings)),
        SandboxKind::Docker => Arc::new(DockerBackend::new(settings)),
        #[cfg(feature = "kubernetes")]
        SandboxKind::Kubernetes => {
            Arc::new(kubernetes::KubernetesBackend::new(settings.kubernetes.clone(), settings.limits.clone()))
        }
        #[cfg(not(feature = "kubernetes"))]
        SandboxKind::Kubernetes => Arc::new(kubernetes::Unbuilt),
        SandboxKind::Auto => unreachable!("resolve_auto never returns auto"),
    }
}

/// Runs a backend's confining helper, or the reaper, if this process was started as one (`ptc-mcp <hidden
/// subcommand> …`); returns otherwise. Call first thing in `main`, before any thread exists.
pub fn run_helper_if_requested(args: &[OsString]) {
    if let [_, subcommand] = args
        && subcommand == lifecycle::reaper::REAPER_SUBCOMMAND
    {
        lifecycle::reaper::main()
    }
    #[cfg(target_os = "linux")]
    if let [_, subcommand, policy] = args
        && subcommand == landlock::HELPER_SUBCOMMAND
    {
        landlock::helper::main(&policy.to_string_lossy())
    }
}
