//! The `docker` backend: one fresh container per run through the Docker Engine API (bollard), local or
//! remote. The container runs the image's `python3` with the same embedded runner over attached
//! stdin/stdout; what the container spec holds is in [`spec`], what the interpreter adds to it in
//! `confine.py`, which OCI runtime runs it (e.g. gVisor's `runsc`) in [`runtime`]. The engine removes each container as soon as it exits (also when ptc-mcp dies: the runner
//! exits when its stdin closes); ptc-mcp also force-removes it when a run ends, on drop, and removes its
//! leftovers at shutdown and stale ones at start-up.

pub mod runtime;
pub mod spec;

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, ListContainersOptions,
    RemoveContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use runtime::{RuntimeInForce, UnknownRuntime};
pub use spec::{DockerSettings, DockerSettingsError};
use spec::{LABEL, TaskBound, container_body, runner_command};

use crate::python;
use crate::tail::StderrTail;
use crate::{
    Availability, BackendSettings, ExitInfo, Limits, Mount, Packages, RunnerControl, RunnerProcess, SandboxBackend,
    SandboxKind, SpawnError, SpawnRequest, rlimits,
};

/// How long the engine may take to agree on the API version when first connected.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the availability probe (one confined container) may take; the first start of an image on a
/// busy engine can be slow.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long removing a container may take before we give up on it.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Stale containers (never started, or not removed by the engine) older than this are removed at start-up.
const STALE_AFTER: Duration = Duration::from_secs(120);
/// Printed by the probe: the interpreter the image has, after the confinement prologue ran, and its package
/// directories (what `execution.site_packages` shows); also by the `kubernetes` backend's probe.
pub(crate) const PROBE_SCRIPT: &str = "import json, os, site, sys\nprint(json.dumps({'executable': sys.executable, \
'version': '%d.%d.%d' % sys.version_info[:3], 'machine': os.uname().machine, \
'installed': [d for d in site.getsitepackages() if os.path.isdir(d)]}))";
/// Printed by the check of `execution.preload`, once the packages step passed.
const PACKAGES_PROBE_OUTPUT: &str = "ptc-packages-ready";

pub struct DockerBackend {
    settings: DockerSettings,
    /// `execution.mounts`, bound in each container's scratch.
    mounts: Vec<Mount>,
    packages: Packages,
    /// Labels this server's containers (`ptc-mcp.server=<instance>`), for the clean-up at shutdown.
    instance: String,
    /// Connected once; a failure is not kept, so an engine started later is found by the next probe.
    docker: OnceCell<Docker>,
    /// The runtime and the image's interpreter, found once by the probe (failures are not kept either: a
    /// runtime registered or an image pulled later is found by the next probe).
    prepared: OnceCell<Prepared>,
    /// Containers being created and started. Each start runs to its end even when its caller gives up, so
    /// that shutdown can wait for them and then find every container this server made.
    starts: TaskTracker,
    /// Set at shutdown (under the lock, so no start slips in after shutdown's wait): no new containers.
    closing: Mutex<bool>,
}

/// What runs need to know before the first container: found by the probe.
struct Prepared {
    runtime: RuntimeInForce,
    python: ImagePython,
}

/// What [`PROBE_SCRIPT`] prints.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct ImagePython {
    pub executable: String,
    pub version: String,
    pub machine: String,
    /// The image's package directories.
    #[serde(default)]
    pub installed: Vec<PathBuf>,
    /// Whether runs mask /etc (the interpreter starts without it).
    #[serde(default)]
    hide_etc: bool,
}

impl DockerBackend {
    pub fn new(settings: &BackendSettings) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let instance = format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff);
        DockerBackend {
            settings: settings.docker.clone(),
            mounts: settings.mounts.clone(),
            packages: settings.packages.clone(),
            instance,
            docker: OnceCell::new(),
            prepared: OnceCell::new(),
            starts: TaskTracker::new(),
            closing: Mutex::new(false),
        }
    }

    fn engine_name(&self) -> String {
        self.settings
            .host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok())
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_string())
    }

    /// The engine client, connected and with the API version agreed once.
    async fn docker(&self) -> Result<&Docker, DockerError> {
        self.docker
            .get_or_try_init(|| async {
                let unreachable = |fault| DockerError::Unreachable { engine: self.engine_name(), fault };
                let client = match &self.settings.host {
                    Some(host) => Docker::connect_with_host(host),
                    None => Docker::connect_with_defaults(),
                }
                .map_err(|e| unreachable(EngineFault::Client(e)))?;
                let client = tokio::time::timeout(CONNECT_TIMEOUT, client.negotiate_version())
                    .await
                    .map_err(|_| unreachable(EngineFault::Silent))?
                    .map_err(|e| unreachable(EngineFault::Client(e)))?;
                remove_stale(&client).await;
                Ok(client)
            })
            .await
    }

    fn unavailable(error: DockerError) -> SpawnError {
        SpawnError::Unavailable { kind: SandboxKind::Docker, reason: error.to_string() }
    }

    /// The runtime runs get: `execution.docker.runtime` if the engine has it, else the engine's default.
    async fn runtime(&self, docker: &Docker) -> Result<RuntimeInForce, DockerError> {
        let info = docker.info().await.map_err(|source| DockerError::Info { engine: self.engine_name(), source })?;
        runtime::resolve(self.settings.runtime.as_deref(), &info)
            .map_err(|unknown| DockerError::UnknownRuntime { engine: self.engine_name(), unknown })
    }

    /// The runtime, then the image's `python3` (the probe's container needs that runtime), then the packages
    /// step if one is asked. Mounts need a local engine: a bind names a path on the engine's machine.
    async fn prepare(&self) -> Result<Prepared, DockerError> {
        let engine = self.engine_name();
        if !self.mounts.is_empty() && !engine.starts_with("unix://") {
            return Err(DockerError::RemoteMounts { engine });
        }
        let docker = self.docker().await?;
        let runtime = self.runtime(docker).await?;
        let python = self.find_python(docker, runtime.task_bound()).await?;
        if !self.packages.is_empty() {
            self.check_packages(docker, &python, runtime.task_bound()).await?;
        }
        Ok(Prepared { runtime, python })
    }

    /// Runs the packages step alone in a container built like a run's: a preload that fails makes the backend
    /// unavailable with its reason.
    async fn check_packages(&self, docker: &Docker, python: &ImagePython, tasks: TaskBound) -> Result<(), DockerError> {
        let image = &self.settings.image;
        let failed = |output: String| DockerError::Packages { image: image.clone(), output };
        let args = self
            .packages
            .probe_args(&python.installed, &format!("print('{PACKAGES_PROBE_OUTPUT}')"))
            .map_err(failed)?;
        let limits = Limits::default();
        let nproc = tasks.nproc(&self.settings, &limits);
        // The probe's arguments are the interpreter's: the prologue goes before its source.
        let [_, _, _, source, options @ ..] = args.as_slice() else {
            return Err(failed("the check of execution.preload has no source".into()));
        };
        let mut command =
            spec::confined_command(&python.executable, &limits, rlimits::cpu_seconds(PROBE_TIMEOUT), nproc, source);
        command.extend(options.iter().cloned());
        let runner = self.start(docker, &limits, command, python.hide_etc, tasks).await.map_err(DockerError::Start)?;
        let probe = runner.finish_probe(PROBE_TIMEOUT).await;
        match crate::packages::probe_failure(&probe.stderr) {
            Some(failure) => Err(failed(failure)),
            None if probe.completed && probe.stdout.trim() == PACKAGES_PROBE_OUTPUT => Ok(()),
            None => {
                Err(failed(format!("the check of execution.preload failed ({}): {}", probe.exit, probe.stderr.trim())))
            }
        }
    }

    /// Finds the image's `python3` by running the probe script in a container built like a run's.
    async fn find_python(&self, docker: &Docker, tasks: TaskBound) -> Result<ImagePython, DockerError> {
        let image = &self.settings.image;
        match docker.inspect_image(image).await {
            Ok(_) => {}
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return Err(DockerError::MissingImage { image: image.clone(), engine: self.engine_name() });
            }
            Err(source) => return Err(DockerError::Inspect { image: image.clone(), source }),
        }
        // Without /etc if the interpreter starts that way; an image whose interpreter needs it (its loader
        // reading /etc/ld.so.cache) keeps it and runs degraded.
        let hidden = self.run_probe(docker, true, tasks).await;
        let (found, hide_etc) = match hidden {
            Ok(found) => (found, true),
            Err(hidden_error) => match self.run_probe(docker, false, tasks).await {
                Ok(found) => {
                    tracing::info!("python3 in image '{image}' needs /etc: {hidden_error}");
                    (found, false)
                }
                Err(e) => return Err(e),
            },
        };
        if !python::is_supported(&found.version) {
            return Err(DockerError::TooOld { image: image.clone(), version: found.version });
        }
        Ok(ImagePython { hide_etc, ..found })
    }

    /// Runs the probe script, confined, in a container built like a run's.
    async fn run_probe(&self, docker: &Docker, hide_etc: bool, tasks: TaskBound) -> Result<ImagePython, DockerError> {
        let image = &self.settings.image;
        let limits = Limits::default();
        let nproc = tasks.nproc(&self.settings, &limits);
        let command =
            spec::confined_command("python3", &limits, rlimits::cpu_seconds(PROBE_TIMEOUT), nproc, PROBE_SCRIPT);
        let runner = self.start(docker, &limits, command, hide_etc, tasks).await.map_err(|e| match e {
            StartError::Start(e) if names_a_missing_command(&e) => DockerError::NoPython { image: image.clone() },
            other => DockerError::Start(other),
        })?;
        let probe = runner.finish_probe(PROBE_TIMEOUT).await;
        match serde_json::from_str(probe.stdout.trim()) {
            Ok(found) if probe.completed => Ok(found),
            _ => {
                let output = if probe.stderr.trim().is_empty() { &probe.stdout } else { &probe.stderr };
                Err(DockerError::ProbeFailed {
                    image: image.clone(),
                    exit: probe.exit,
                    output: output.trim().to_string(),
                })
            }
        }
    }

    async fn prepared(&self) -> Result<&Prepared, DockerError> {
        self.prepared.get_or_try_init(|| self.prepare()).await
    }

    /// Creates, attaches and starts one container running `command`.
    async fn start(
        &self,
        docker: &Docker,
        limits: &Limits,
        command: Vec<String>,
        hide_etc: bool,
        tasks: TaskBound,
    ) -> Result<RunnerProcess, StartError> {
        let body = container_body(&self.settings, limits, command, &self.instance, hide_etc, tasks, &self.mounts);
        let task = {
            let closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
            if *closing {
                return Err(StartError::Closing);
            }
            self.starts.spawn(create_and_start(docker.clone(), body))
        };
        task.await.unwrap_or_else(|e| Err(StartError::Interrupted(e)))
    }
}

/// Whether the engine's refusal to start a container says its command is not in the image.
fn names_a_missing_command(error: &bollard::errors::Error) -> bool {
    says_a_command_is_missing(&error.to_string())
}

/// Whether a container runtime's refusal to start a command says the command is not in the image.
pub(crate) fn says_a_command_is_missing(message: &str) -> bool {
    message.contains("executable file not found") || message.contains("no such file")
}

/// Creates, attaches and starts one container; on any failure after creation, the container is removed.
async fn create_and_start(docker: Docker, body: ContainerCreateBody) -> Result<RunnerProcess, StartError> {
    let created = docker.create_container(None::<CreateContainerOptions>, body).await.map_err(StartError::Create)?;
    let id = created.id;
    // From here on the guard removes the container if anything below fails.
    let mut guard = Cleanup { docker: docker.clone(), id: id.clone(), armed: true };
    let attach = AttachContainerOptions { stream: true, stdin: true, stdout: true, stderr: true, ..Default::default() };
    // The engine answers a wait as soon as the waiter is registered; start it before the container.
    let waiter = tokio::spawn(wait_removed(docker.clone(), id.clone()));
    let attached = docker.attach_container(&id, Some(attach)).await.map_err(StartError::Attach)?;
    docker.start_container(&id, None).await.map_err(StartError::Start)?;
    guard.armed = false;
    let stderr_tail = StderrTail::default();
    let (pipe_in, pipe_out) = tokio::io::duplex(64 * 1024);
    tokio::spawn(demultiplex(attached.output, pipe_in, stderr_tail.clone()));
    let control = DockerControl { docker, id, waiter, exited: None, stderr_tail, removed: false };
    let from_runner: Pin<Box<dyn AsyncRead + Send>> = Box::pin(pipe_out);
    Ok(RunnerProcess { to_runner: attached.input, from_runner, control: Box::new(control) })
}

/// Why the backend cannot run programs: the reason of [`Availability::Unavailable`] and
/// [`SpawnError::Unavailable`].
#[derive(Debug, thiserror::Error)]
enum DockerError {
    #[error(
        "cannot reach the Docker engine at {engine}: {fault}; start Docker there, or point execution.docker.host \
         (or DOCKER_HOST) at a running engine (unix:///path/docker.sock, tcp://host:2375, https://host:2376 with \
         DOCKER_CERT_PATH)"
    )]
    Unreachable {
        engine: String,
        #[source]
        fault: EngineFault,
    },
    #[error(
        "image '{image}' is not on the Docker engine at {engine}; pull it with `docker pull {image}` (no registry: \
         build a runner image from this machine's Python with ci/docker-setup.sh and set execution.docker.image to \
         ptc-mcp-runner:local)"
    )]
    MissingImage { image: String, engine: String },
    #[error("cannot ask the Docker engine at {engine} which runtimes it has: {source}")]
    Info {
        engine: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "the Docker engine at {engine} has no OCI runtime '{wanted}' (execution.docker.runtime); it has {known}; \
         register it under \"runtimes\" in the engine's daemon.json (gVisor: \"runsc\": {{\"path\": \"/usr/bin/runsc\", \
         \"runtimeArgs\": [\"--network=none\"]}}) and send dockerd SIGHUP, or leave execution.docker.runtime out for \
         the engine's default",
        wanted = .unknown.wanted,
        known = .unknown.known.join(", ")
    )]
    UnknownRuntime { engine: String, unknown: UnknownRuntime },
    #[error("cannot inspect image '{image}': {source}")]
    Inspect {
        image: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error(
        "image '{image}' has no python3 on its PATH; use an image with CPython {} or later, such as {}",
        python::MIN_VERSION,
        spec::DEFAULT_IMAGE
    )]
    NoPython { image: String },
    #[error("python3 in image '{image}' could not start confined ({exit}): {output}")]
    ProbeFailed { image: String, exit: ExitInfo, output: String },
    #[error("python3 in image '{image}' is {version}, but the runner needs {} or later", python::MIN_VERSION)]
    TooOld { image: String, version: String },
    #[error("in image '{image}': {output}")]
    Packages { image: String, output: String },
    #[error(
        "execution.mounts need the Docker engine on this machine (execution.docker.host or DOCKER_HOST a unix:// \
         socket): a bind names a folder of the engine's machine, and {engine} may be another one; remove the \
         mounts, or use a local engine"
    )]
    RemoteMounts { engine: String },
    /// The probe's container did not start.
    #[error(transparent)]
    Start(StartError),
}

/// Why the engine gave no usable answer.
#[derive(Debug, thiserror::Error)]
enum EngineFault {
    #[error(transparent)]
    Client(bollard::errors::Error),
    #[error("no answer within {} s", CONNECT_TIMEOUT.as_secs())]
    Silent,
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error("could not create the container: {0}")]
    Create(#[source] bollard::errors::Error),
    #[error("could not attach to the container: {0}")]
    Attach(#[source] bollard::errors::Error),
    #[error("could not start the container: {0}")]
    Start(#[source] bollard::errors::Error),
    #[error("could not start the container: the start was interrupted: {0}")]
    Interrupted(#[source] tokio::task::JoinError),
    #[error("the server is shutting down")]
    Closing,
}

#[async_trait]
impl SandboxBackend for DockerBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Docker
    }

    async fn probe(&self) -> Availability {
        let Prepared { runtime, python } = match self.prepared().await {
            Ok(prepared) => prepared,
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        let limits = Limits::default();
        let runtime = runtime.describe();
        let detail = format!(
            "one container per run from image '{}' on {} with {runtime} (python {} at {}, {}): no network, read-only root{}, \
             {} MiB tmpfs scratch, no capabilities, no-new-privileges, uid {}, memory {} MiB, pids {}, cpus {}, \
             seccomp (no sockets, processes, exec, ptrace, namespaces) and rlimits; the runner is the container's \
             only process",
            self.settings.image,
            self.engine_name(),
            python.version,
            python.executable,
            python.machine,
            if python.hide_etc { ", /etc and /sys hidden" } else { ", /sys hidden" },
            self.settings.scratch_mb(&limits),
            spec::USER.split(':').next().unwrap_or_default(),
            self.settings.memory_mb(&limits),
            self.settings.pids(&limits),
            self.settings.cpus,
        );
        let detail = detail + &crate::shown_detail(&self.mounts, &self.packages, &python.installed);
        if python.hide_etc {
            Availability::Available { detail }
        } else {
            Availability::Degraded {
                detail,
                missing: "a hidden /etc: the image's python3 does not start without it (e.g. its libraries are \
                          found through /etc/ld.so.cache), so programs can read the image's /etc and the \
                          /etc/hostname Docker adds; use an image whose interpreter finds its libraries without \
                          /etc, e.g. one built by ci/docker-setup.sh"
                    .to_string(),
            }
        }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let Prepared { runtime, python } = self.prepared().await.map_err(Self::unavailable)?;
        let docker = self.docker().await.map_err(Self::unavailable)?;
        let tasks = runtime.task_bound();
        let options = self
            .packages
            .runner_argument(&python.installed, &self.mounts)
            .map_err(|reason| SpawnError::Unavailable { kind: SandboxKind::Docker, reason })?;
        let command =
            runner_command(&python.executable, request, tasks.nproc(&self.settings, &request.limits), options);
        self.start(docker, &request.limits, command, python.hide_etc, tasks).await.map_err(|e| SpawnError::Start {
            program: format!("a container of {}", self.settings.image),
            source: std::io::Error::other(e),
        })
    }

    async fn shutdown(&self) {
        *self.closing.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.starts.close();
        self.starts.wait().await;
        if let Some(docker) = self.docker.get() {
            let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL}={}", self.instance)])]);
            remove_listed(docker, filters, |_| true).await;
        }
    }
}

/// Waits until the container is gone (the engine removes it when it exits) and says how it ended.
async fn wait_removed(docker: Docker, id: String) -> ExitInfo {
    let options = WaitContainerOptions { condition: "removed".to_string() };
    match docker.wait_container(&id, Some(options)).next().await {
        Some(Ok(response)) => exit_info(response.status_code),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => exit_info(code),
        Some(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })) => {
            ExitInfo::Unknown("the container ended before its exit status could be read".to_string())
        }
        Some(Err(e)) => ExitInfo::Unknown(format!("lost track of the container: {e}")),
        None => ExitInfo::Unknown("the engine did not report how the container ended".to_string()),
    }
}

/// A container's exit status: the engine reports a process killed by signal N as 128 + N.
fn exit_info(code: i64) -> ExitInfo {
    match code {
        129..=159 => ExitInfo::Signal((code - 128) as i32),
        code => ExitInfo::Code(i32::try_from(code).unwrap_or(i32::MAX)),
    }
}

/// Splits the attach stream: stdout into the runner's channel, stderr into the diagnostics tail.
async fn demultiplex(
    mut output: Pin<
        Box<dyn futures_util::Stream<Item = Result<bollard::container::LogOutput, bollard::errors::Error>> + Send>,
    >,
    mut channel: tokio::io::DuplexStream,
    tail: StderrTail,
) {
    use bollard::container::LogOutput;
    let mut channel_open = true;
    while let Some(Ok(frame)) = output.next().await {
        match frame {
            LogOutput::StdOut { message } | LogOutput::Console { message } if channel_open => {
                // The reader went away: keep draining (stderr may still come) without forwarding.
                channel_open = channel.write_all(&message).await.is_ok();
            }
            LogOutput::StdErr { message } => tail.push(&message),
            _ => {}
        }
    }
    let _ = channel.shutdown().await;
}

/// Removes a container that never became a runner (creation succeeded, attach or start failed).
struct Cleanup {
    docker: Docker,
    id: String,
    armed: bool,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.armed {
            remove_in_background(&self.docker, &self.id);
        }
    }
}

fn remove_in_background(docker: &Docker, id: &str) {
    let (docker, id) = (docker.clone(), id.to_string());
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { force_remove(&docker, &id).await });
    }
}

async fn force_remove(docker: &Docker, id: &str) {
    let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    match tokio::time::timeout(REMOVE_TIMEOUT, docker.remove_container(id, Some(options))).await {
        Ok(Ok(())) => {}
        // Already gone, or its removal (by the engine) is under way.
        Ok(Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. })) => {}
        Ok(Err(e)) => tracing::warn!("could not remove container {id}: {e}"),
        Err(_) => tracing::warn!("could not remove container {id}: no answer within {}s", REMOVE_TIMEOUT.as_secs()),
    }
}

/// Removes the containers matching `filters` (all states) for which `pick` holds.
async fn remove_listed(
    docker: &Docker,
    filters: HashMap<String, Vec<String>>,
    pick: impl Fn(&bollard::models::ContainerSummary) -> bool,
) {
    let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
    let containers = match docker.list_containers(Some(options)).await {
        Ok(containers) => containers,
        Err(e) => return tracing::warn!("could not list this server's containers to remove them: {e}"),
    };
    let removals =
        containers.iter().filter(|c| pick(c)).filter_map(|c| c.id.as_deref()).map(|id| force_remove(docker, id));
    futures_util::future::join_all(removals).await;
}

/// Containers of any ptc-mcp server that never started or that the engine did not remove, older than
/// [`STALE_AFTER`] (younger ones may belong to a server starting a run right now).
async fn remove_stale(docker: &Docker) {
    use bollard::models::ContainerSummaryStateEnum as State;
    let filters = HashMap::from([("label".to_string(), vec![LABEL.to_string()])]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    remove_listed(docker, filters, |c| {
        let stopped = matches!(c.state, Some(State::CREATED | State::EXITED | State::DEAD));
        stopped && c.created.is_some_and(|created| now - created > STALE_AFTER.as_secs() as i64)
    })
    .await;
}

struct DockerControl {
    docker: Docker,
    id: String,
    /// Resolves when the container is gone, with how it ended.
    waiter: JoinHandle<ExitInfo>,
    exited: Option<ExitInfo>,
    stderr_tail: StderrTail,
    /// The container is gone (or its removal was attempted after a kill).
    removed: bool,
}

#[async_trait]
impl RunnerControl for DockerControl {
    async fn wait(&mut self) -> ExitInfo {
        if let Some(info) = &self.exited {
            return info.clone();
        }
        let info =
            (&mut self.waiter).await.unwrap_or_else(|e| ExitInfo::Unknown(format!("lost track of the container: {e}")));
        // The waiter returns once the engine removed the container, unless it lost track of it.
        self.removed = !matches!(info, ExitInfo::Unknown(_));
        self.exited = Some(info.clone());
        info
    }

    async fn kill(&mut self) {
        if self.exited.is_none() {
            let options = KillContainerOptions { signal: "SIGKILL".to_string() };
            let _ = self.docker.kill_container(&self.id, Some(options)).await;
            let _ = tokio::time::timeout(REMOVE_TIMEOUT, self.wait()).await;
        }
        if !self.removed {
            force_remove(&self.docker, &self.id).await;
            self.removed = true;
        }
    }

    fn has_exited(&mut self) -> bool {
        self.exited.is_some() || self.waiter.is_finished()
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail.text()
    }
}

impl Drop for DockerControl {
    fn drop(&mut self) {
        if !self.removed {
            remove_in_background(&self.docker, &self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KubernetesSettings;

    #[test]
    fn exit_statuses_over_128_are_signals() {
        assert_eq!(exit_info(0), ExitInfo::Code(0));
        assert_eq!(exit_info(70), ExitInfo::Code(70));
        assert_eq!(exit_info(137), ExitInfo::Signal(9));
        assert_eq!(exit_info(139), ExitInfo::Signal(11));
        assert_eq!(exit_info(255), ExitInfo::Code(255));
    }

    const FIX_THE_ENGINE: &str = "start Docker there, or point execution.docker.host (or DOCKER_HOST) at a running \
                                  engine (unix:///path/docker.sock, tcp://host:2375, https://host:2376 with \
                                  DOCKER_CERT_PATH)";

    /// The settings of a docker backend on the engine at `host`, with `mounts`.
    fn settings(host: &str, mounts: Vec<Mount>) -> BackendSettings {
        BackendSettings {
            python: "python3".into(),
            helper: PathBuf::new(),
            docker: DockerSettings { host: Some(host.into()), ..Default::default() },
            kubernetes: KubernetesSettings::default(),
            limits: Limits::default(),
            allow_degraded: false,
            zygote: false,
            mounts,
            packages: Packages::default(),
        }
    }

    #[tokio::test]
    async fn an_engine_that_cannot_be_reached_makes_the_backend_unavailable_saying_how_to_fix_it() {
        let backend = DockerBackend::new(&settings("unix:///nonexistent/docker.sock", vec![]));
        let reason = format!(
            "cannot reach the Docker engine at unix:///nonexistent/docker.sock: Socket not found: \
             /nonexistent/docker.sock; {FIX_THE_ENGINE}"
        );
        assert_eq!(backend.probe().await, Availability::Unavailable { reason: reason.clone() });
        let request = SpawnRequest { limits: Limits::default(), timeout: Duration::from_secs(1) };
        match backend.spawn(&request).await.err() {
            Some(SpawnError::Unavailable { kind: SandboxKind::Docker, reason: said }) => assert_eq!(said, reason),
            other => panic!("expected the docker backend to be unavailable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn mounts_on_an_engine_elsewhere_are_refused_before_it_is_asked_anything() {
        let settings = settings(
            "tcp://192.0.2.1:2375",
            vec![Mount { name: "data".into(), path: "/data".into(), writable: false }],
        );
        let reason = "execution.mounts need the Docker engine on this machine (execution.docker.host or DOCKER_HOST \
                      a unix:// socket): a bind names a folder of the engine's machine, and tcp://192.0.2.1:2375 may \
                      be another one; remove the mounts, or use a local engine";
        assert_eq!(DockerBackend::new(&settings).probe().await, Availability::Unavailable { reason: reason.into() });
    }

    #[test]
    fn each_reason_an_image_cannot_run_programs_names_the_image_and_the_fix() {
        let image = || "img:1".to_string();
        let refused = |message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: message.to_string(),
        };
        let cases = [
            (
                DockerError::Unreachable { engine: "tcp://box:2375".into(), fault: EngineFault::Silent },
                format!("cannot reach the Docker engine at tcp://box:2375: no answer within 15 s; {FIX_THE_ENGINE}"),
            ),
            (
                DockerError::MissingImage { image: image(), engine: "tcp://box:2375".into() },
                "image 'img:1' is not on the Docker engine at tcp://box:2375; pull it with `docker pull img:1` (no \
                 registry: build a runner image from this machine's Python with ci/docker-setup.sh and set \
                 execution.docker.image to ptc-mcp-runner:local)"
                    .to_string(),
            ),
            (
                DockerError::UnknownRuntime {
                    engine: "tcp://box:2375".into(),
                    unknown: UnknownRuntime { wanted: "gvisor".into(), known: vec!["runc".into(), "runsc".into()] },
                },
                "the Docker engine at tcp://box:2375 has no OCI runtime 'gvisor' (execution.docker.runtime); it has \
                 runc, runsc; register it under \"runtimes\" in the engine's daemon.json (gVisor: \"runsc\": {\"path\": \
                 \"/usr/bin/runsc\", \"runtimeArgs\": [\"--network=none\"]}) and send dockerd SIGHUP, or leave \
                 execution.docker.runtime out for the engine's default"
                    .to_string(),
            ),
            (
                DockerError::Inspect { image: image(), source: refused("boom") },
                "cannot inspect image 'img:1': Docker responded with status code 500: boom".to_string(),
            ),
            (
                DockerError::NoPython { image: image() },
                "image 'img:1' has no python3 on its PATH; use an image with CPython 3.9 or later, such as \
                 python:3.12-slim"
                    .to_string(),
            ),
            (
                DockerError::ProbeFailed { image: image(), exit: ExitInfo::Code(127), output: "no libc".into() },
                "python3 in image 'img:1' could not start confined (exit status 127): no libc".to_string(),
            ),
            (
                DockerError::TooOld { image: image(), version: "3.8.10".into() },
                "python3 in image 'img:1' is 3.8.10, but the runner needs 3.9 or later".to_string(),
            ),
            (
                DockerError::Start(StartError::Attach(refused("gone"))),
                "could not attach to the container: Docker responded with status code 500: gone".to_string(),
            ),
            (DockerError::Start(StartError::Closing), "the server is shutting down".to_string()),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }

    #[test]
    fn a_start_refused_for_a_missing_command_means_the_image_has_no_python3() {
        let refused = |message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code: 400,
            message: message.to_string(),
        };
        let missing = "failed to create task: exec: \"python3\": executable file not found in $PATH: unknown";
        assert!(names_a_missing_command(&refused(missing)));
        assert!(names_a_missing_command(&refused("exec /usr/bin/python3: no such file or directory")));
        assert!(!names_a_missing_command(&refused("cannot allocate memory")));
    }
}
