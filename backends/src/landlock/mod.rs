//! The `landlock` backend (Linux): each runner is started through a helper — the `ptc-mcp` binary itself,
//! re-executed with a hidden subcommand — that confines itself with namespaces and a minimal root,
//! Landlock, dropped capabilities, rlimits and seccomp-bpf, then execs the interpreter.

#[cfg(target_os = "linux")]
pub mod helper;
pub mod policy;
#[cfg(target_os = "linux")]
mod seccomp;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use tokio::process::Command;

use crate::host::{RunGroup, host_runner, runner_args, runner_command};
use crate::python::ResolvedPython;
use crate::watch::Watched;
use crate::{
    Availability, BackendSettings, Mount, Packages, Python, RunnerProcess, SandboxBackend, SandboxKind, SpawnError,
    SpawnRequest, rlimits,
};
use policy::{PlanRequest, Policy, inspect, plan};

/// How long the availability probe (one sandboxed `print`) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
const PROBE_OUTPUT: &str = "ptc-sandbox-ready";
/// The hidden subcommand of the `ptc-mcp` binary that runs the helper.
pub const HELPER_SUBCOMMAND: &str = "__landlock-helper";
/// Prefix of the helper's one-line report of the layers in force (stderr, just before the exec).
pub const LAYERS_PREFIX: &str = "ptc-landlock: layers: ";
/// The start of the layer the helper reports when it runs without namespaces.
pub const DEGRADED_LAYER: &str = "degraded: no namespaces";

pub struct LandlockBackend {
    python: ResolvedPython,
    /// The `ptc-mcp` binary, re-executed as the helper.
    helper: PathBuf,
    /// `execution.allow_degraded`: run programs without user namespaces.
    allow_degraded: bool,
    mounts: Vec<Mount>,
    packages: Packages,
    /// `execution.zygote` (Linux): runners are forked from it, each in namespaces of its own.
    #[cfg(target_os = "linux")]
    zygote: Option<crate::zygote::Zygote>,
}

/// The zygote's own scratch tmpfs (its forks mount theirs over it), MiB.
#[cfg(target_os = "linux")]
const ZYGOTE_SCRATCH_MB: u64 = 1;

/// What degraded mode lacks.
const DEGRADED_MISSING: &str = "user namespaces: programs can learn which host files and processes exist";
/// How to get full mode back.
const DEGRADED_FIX: &str = "enable unprivileged user namespaces (sysctls user.max_user_namespaces, \
                            kernel.unprivileged_userns_clone, or Ubuntu's kernel.apparmor_restrict_unprivileged_userns)";

impl LandlockBackend {
    pub fn new(settings: &BackendSettings) -> Self {
        LandlockBackend {
            python: ResolvedPython::new(settings.python.clone()),
            helper: settings.helper.clone(),
            allow_degraded: settings.allow_degraded,
            mounts: settings.mounts.clone(),
            packages: settings.packages.clone(),
            #[cfg(target_os = "linux")]
            zygote: settings.zygote.then(Default::default),
        }
    }

    /// Starts the helper for one confined interpreter with `args`, in a fresh run directory; without user
    /// namespaces it runs degraded only if `allow_degraded`.
    async fn start(
        &self,
        python: &Python,
        args: Vec<String>,
        request: &SpawnRequest,
        allow_degraded: bool,
    ) -> Result<RunnerProcess, SpawnError> {
        // The run's directories, its cgroup and the policy's look at the interpreter's paths are file system
        // work: off the runtime's thread.
        let run = Run {
            python: python.clone(),
            args,
            limits: request.limits.clone(),
            timeout: request.timeout,
            allow_degraded,
            mounts: self.mounts.clone(),
            site_packages: self.packages.site_packages,
            zygote: false,
        };
        let prepared = tokio::task::spawn_blocking(move || prepare(run));
        let (run_dir, watched, group, policy) =
            prepared.await.map_err(|e| SpawnError::Scratch(std::io::Error::other(e)))??;
        let child = crate::spawner::spawn(helper_command(&self.helper, &policy)?)
            .await
            .map_err(|source| SpawnError::Start { program: self.helper.display().to_string(), source })?;
        host_runner(child, run_dir, group, watched)
    }

    /// A runner forked from the zygote (started now if none runs), or why there is none. Its rlimits are a
    /// fresh start's, and its cgroup where that bounds tasks or memory; its namespaces, scratch tmpfs,
    /// Landlock and seccomp it applies itself.
    #[cfg(target_os = "linux")]
    async fn fork(
        &self,
        zygote: &crate::zygote::Zygote,
        python: &Python,
        options: Option<String>,
        request: &SpawnRequest,
    ) -> Result<RunnerProcess, crate::host::ForkError> {
        use crate::host::ForkError;
        let limits = request.limits.clone();
        let cpu_seconds = rlimits::cpu_seconds(request.timeout);
        let prepared = tokio::task::spawn_blocking(move || {
            // The scratch tmpfs is memory too, charged to the run's cgroup. A cgroup that bounds neither
            // tasks nor memory would add nothing to a fork (its pid namespace already ends it whole, and it
            // cannot leave its process group), while taking one on can cost a kernel RCU wait of milliseconds.
            let memory_bytes = limits.memory_bytes().saturating_add(limits.scratch_mb << 20);
            let group = RunGroup::bounding_for_run(&limits, memory_bytes);
            let memory = rlimits::MemoryBound::for_host(rlimits::Os::CURRENT, group.bounds_memory());
            let mut rlimits = rlimits::for_run(&limits, cpu_seconds, memory);
            // Counted in the fork's own user namespace, as a fresh start's.
            rlimits.push(rlimits::nproc(0, limits.tasks));
            let cgroup = group.joiner().and_then(|join| group.fork_handles(join))?;
            Ok::<_, std::io::Error>((group, rlimits, cgroup))
        });
        let failed = |source| ForkError::Spawn(SpawnError::Start { program: "runner".into(), source });
        let (group, rlimits, cgroup) = prepared.await.map_err(|e| failed(std::io::Error::other(e)))?.map_err(failed)?;
        let mut env = crate::host::runner_env(None);
        env.extend(["LOGNAME", "USER"].map(|name| (name.to_string(), helper::SANDBOX_USER.to_string())));
        let fork =
            crate::zygote::ForkRequest { rlimits, env, scratch: None, scratch_mb: request.limits.scratch_mb, cgroup };
        let start = || self.start_zygote(python.clone(), options);
        let forked = zygote.fork(fork, start).await.map_err(ForkError::Zygote)?;
        crate::host::forked_runner(forked, None, group, Watched::default()).map_err(ForkError::Spawn)
    }

    /// The zygote: the helper in zygote mode, with a policy for no run (a tiny scratch of its own, no cgroup).
    #[cfg(target_os = "linux")]
    async fn start_zygote(
        &self,
        python: Python,
        options: Option<String>,
    ) -> Result<crate::zygote::ZygoteProcess, String> {
        let run = Run {
            python,
            args: vec![options.unwrap_or_else(|| "{}".to_string())],
            limits: crate::Limits { scratch_mb: ZYGOTE_SCRATCH_MB, ..Default::default() },
            timeout: PROBE_TIMEOUT,
            allow_degraded: false,
            mounts: Vec::new(),
            site_packages: self.packages.site_packages,
            zygote: true,
        };
        let prepared = tokio::task::spawn_blocking(move || prepare(run)).await.map_err(|e| e.to_string())?;
        // The helper builds scratch in its new root: the host directory prepared for it is not needed.
        let (_, _, _, policy) = prepared.map_err(|e| e.to_string())?;
        let (socket, theirs) = crate::zygote::socket_pair().map_err(|e| e.to_string())?;
        let mut command = helper_command(&self.helper, &policy).map_err(|e| e.to_string())?;
        command.stdin(std::process::Stdio::from(theirs)).stdout(std::process::Stdio::null());
        let child = crate::spawner::spawn(command).await.map_err(|e| format!("{}: {e}", self.helper.display()))?;
        Ok(crate::zygote::ZygoteProcess { child, socket })
    }
}

/// What one confined interpreter is started with.
struct Run {
    python: Python,
    args: Vec<String>,
    limits: crate::Limits,
    timeout: Duration,
    allow_degraded: bool,
    mounts: Vec<Mount>,
    site_packages: bool,
    /// The zygote's policy: no cgroup of its own (each fork joins its run's).
    zygote: bool,
}

/// A run's directories, what the server watches, its cgroup and the helper's policy.
fn prepare(run: Run) -> Result<(tempfile::TempDir, Watched, RunGroup, Policy), SpawnError> {
    let Run { python, args, limits, timeout, allow_degraded, mounts, site_packages, zygote } = run;
    let run_dir = crate::scratch::run_dir().map_err(SpawnError::Scratch)?;
    let scratch = run_dir.path().join("scratch");
    std::fs::create_dir(&scratch).map_err(SpawnError::Scratch)?;
    // Without namespaces scratch is a plain directory (with them, a size-limited tmpfs the server never sees,
    // and this watch measures an empty directory).
    let watched = Watched { memory_bytes: None, scratch: Some((scratch.clone(), limits.scratch_mb << 20)) };
    // The scratch tmpfs is memory too, charged to the run's cgroup.
    let cgroup_memory = limits.memory_bytes().saturating_add(limits.scratch_mb << 20);
    let group = if zygote { RunGroup::none() } else { RunGroup::for_run(&limits, cgroup_memory) };
    let cpu_seconds = rlimits::cpu_seconds(timeout);
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let request = PlanRequest {
        python: &python,
        scratch,
        args,
        limits,
        cpu_seconds,
        allow_degraded,
        mounts: &mounts,
        site_packages,
    };
    let mut policy = plan(request, &inspect);
    policy.zygote = zygote;
    #[cfg(target_os = "linux")]
    {
        policy.cgroup = group.cgroup().map(|c| policy::Cgroup {
            dir: c.dir().to_path_buf(),
            bounds_tasks: c.bounds_tasks,
            bounds_memory: c.bounds_memory,
        });
    }
    Ok((run_dir, watched, group, policy))
}

fn helper_command(helper: &Path, policy: &Policy) -> Result<Command, SpawnError> {
    let policy = serde_json::to_string(policy).map_err(|e| SpawnError::Start {
        program: helper.display().to_string(),
        source: std::io::Error::other(format!("the sandbox policy cannot be written: {e}")),
    })?;
    let mut command = runner_command(helper);
    command.arg(HELPER_SUBCOMMAND).arg(policy);
    Ok(command)
}

#[async_trait]
impl SandboxBackend for LandlockBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Landlock
    }

    async fn probe(&self) -> Availability {
        if !cfg!(target_os = "linux") {
            return Availability::Unavailable {
                reason: "landlock needs Linux; on macOS use seatbelt, elsewhere docker".to_string(),
            };
        }
        let python = match self.python.get().await {
            Ok(python) => python,
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        let request = SpawnRequest { limits: crate::Limits::default(), timeout: PROBE_TIMEOUT };
        let args = match self.packages.probe_args(&python.installed, &format!("print('{PROBE_OUTPUT}')")) {
            Ok(args) => args,
            Err(reason) => return Availability::Unavailable { reason },
        };
        // The probe may run degraded, to find out which mode this machine gives.
        let runner = match self.start(python, args, &request, true).await {
            Ok(runner) => runner,
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        let shown = crate::shown_detail(&self.mounts, &self.packages, &python.installed);
        let outcome = match probe_outcome(runner).await {
            Availability::Degraded { detail, .. } if !self.allow_degraded => {
                let why = detail.split("; ").find(|layer| layer.starts_with(DEGRADED_LAYER)).unwrap_or(&detail);
                Availability::Unavailable {
                    reason: format!(
                        "only its degraded mode works here ({why}), without {DEGRADED_MISSING}; {DEGRADED_FIX}, or \
                         set execution.allow_degraded: true to run programs degraded"
                    ),
                }
            }
            availability => availability,
        };
        outcome.with_more_detail(&shown)
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = self.python.for_spawn(SandboxKind::Landlock).await?;
        let options = self
            .packages
            .runner_argument(&python.installed, &self.mounts)
            .map_err(|reason| SpawnError::Unavailable { kind: SandboxKind::Landlock, reason })?;
        // A zygote's forks cannot show execution.mounts (their binds are not in its root): those start fresh.
        #[cfg(target_os = "linux")]
        if let Some(zygote) = self.zygote.as_ref().filter(|_| self.mounts.is_empty()) {
            match self.fork(zygote, python, options.clone(), request).await {
                Ok(runner) => return Ok(runner),
                Err(crate::host::ForkError::Spawn(e)) => return Err(e),
                Err(crate::host::ForkError::Zygote(e)) => tracing::debug!("starting a fresh runner: {e}"),
            }
        }
        self.start(python, runner_args(options), request, self.allow_degraded).await
    }

    async fn shutdown(&self) {
        #[cfg(target_os = "linux")]
        if let Some(zygote) = &self.zygote {
            zygote.shutdown().await;
        }
        crate::scratch::release();
    }
}

/// Reads what the probe's confined interpreter printed and the helper's report of the layers in force.
async fn probe_outcome(runner: RunnerProcess) -> Availability {
    let probe = runner.finish_probe(PROBE_TIMEOUT).await;
    let stderr = probe.stderr;
    if let Some(failure) = crate::packages::probe_failure(&stderr) {
        return Availability::Unavailable { reason: failure };
    }
    let layers = stderr.lines().find_map(|l| l.strip_prefix(LAYERS_PREFIX)).map(str::to_string);
    match layers {
        Some(layers) if probe.completed && probe.stdout.trim() == PROBE_OUTPUT => {
            if layers.contains(DEGRADED_LAYER) {
                Availability::Degraded { detail: layers, missing: format!("{DEGRADED_MISSING} ({DEGRADED_FIX})") }
            } else {
                Availability::Available { detail: layers }
            }
        }
        _ => {
            let why = stderr.lines().rev().find(|l| l.starts_with("ptc-landlock: ")).unwrap_or(stderr.trim());
            Availability::Unavailable {
                reason: format!("the sandbox could not start a confined interpreter ({}): {why}", probe.exit),
            }
        }
    }
}
