//! The backend: connects once, removes what dead servers left, checks the template or warm pool and the image's
//! interpreter (the probe starts one runner pod), then gives each runner a pod of its own.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tokio::sync::OnceCell;
use tokio_util::task::TaskTracker;

use super::KubernetesSettings;
use super::claim::Claims;
use super::error::{KubeError, api_error, source_chain};
use super::pod::{self, CLAIM_LABEL, MANAGED_BY, SERVER_LABEL};
use super::runner::{Owner, exec};
use crate::docker::spec::confined_source;
use crate::docker::{ImagePython, PROBE_SCRIPT, says_a_command_is_missing};
use crate::protocol::RUNNER_SOURCE;
use crate::rlimits;
use crate::{Availability, Limits, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

/// How long connecting to the API may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a pod may take to be scheduled and started (the first pull of an image can be slow).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the probe's runner may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// A pod still pending this long after its creation was abandoned (its start gave up at [`START_TIMEOUT`]).
const STALE_AFTER: Duration = Duration::from_secs(180);
/// Container states that will not turn into a running container by waiting.
const HOPELESS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

pub struct KubernetesBackend {
    settings: KubernetesSettings,
    limits: Limits,
    /// Labels this server's pods and claims (`ptc-mcp.server=<instance>`), for the clean-up at shutdown.
    instance: String,
    next: AtomicU64,
    /// Connected once; a failure is not kept, so a cluster reachable later is found by the next probe.
    connected: OnceCell<Connected>,
    /// The template (or warm pool) and the image's interpreter, found once by the probe.
    prepared: OnceCell<Prepared>,
    /// Pods being started: each start runs to its end even when its caller gives up, so that shutdown can
    /// wait for them and then find every pod this server made.
    starts: TaskTracker,
    closing: Mutex<bool>,
}

#[derive(Clone)]
struct Connected {
    client: Client,
    namespace: String,
    /// The API server's URL, for messages.
    server: String,
}

/// Where runner pods come from.
#[derive(Clone)]
enum Source {
    Template(Box<Pod>),
    WarmPool(String),
}

struct Prepared {
    source: Source,
    python: ImagePython,
}

impl KubernetesBackend {
    pub fn new(settings: KubernetesSettings, limits: Limits) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let instance = format!("{}-{:x}", std::process::id(), nanos & 0xffff_ffff_ffff);
        KubernetesBackend {
            settings,
            limits,
            instance,
            next: AtomicU64::new(1),
            connected: OnceCell::new(),
            prepared: OnceCell::new(),
            starts: TaskTracker::new(),
            closing: Mutex::new(false),
        }
    }

    async fn connected(&self) -> Result<&Connected, KubeError> {
        self.connected
            .get_or_try_init(|| async {
                let connected = connect(&self.settings).await?;
                sweep(&connected).await?;
                Ok(connected)
            })
            .await
    }

    async fn prepared(&self) -> Result<&Prepared, KubeError> {
        self.prepared.get_or_try_init(|| self.prepare()).await
    }

    async fn prepare(&self) -> Result<Prepared, KubeError> {
        let connected = self.connected().await?;
        let source = match (&self.settings.warm_pool, &self.settings.template) {
            (Some(pool), _) => {
                Claims::new(&connected.client, &connected.namespace, &connected.server).check_pool(pool).await?;
                Source::WarmPool(pool.clone())
            }
            (None, Some(path)) => Source::Template(Box::new(pod::load_template(path)?)),
            (None, None) => Source::Template(Box::new(pod::default_template())),
        };
        let python = self.find_python(connected, &source).await?;
        Ok(Prepared { source, python })
    }

    fn image(&self, source: &Source) -> String {
        match source {
            Source::Template(template) => pod::image(template),
            Source::WarmPool(pool) => format!("the SandboxTemplate of warm pool '{pool}'"),
        }
    }

    /// Runs the probe script, confined as a runner is, in a runner pod.
    async fn find_python(&self, connected: &Connected, source: &Source) -> Result<ImagePython, KubeError> {
        let image = self.image(source);
        let limits = Limits::default();
        let script = confined_source(&limits, rlimits::cpu_seconds(PROBE_TIMEOUT), None, PROBE_SCRIPT);
        // The runtime could not start the interpreter: the exec's status says so before the source is sent.
        let runner = self.start(connected, source, &limits, script).await.map_err(|e| match e {
            KubeError::Exec { why, .. } if says_a_command_is_missing(&why) => {
                KubeError::NoPython { image: image.clone() }
            }
            other => other,
        })?;
        let probe = runner.finish_probe(PROBE_TIMEOUT).await;
        let found: ImagePython = match serde_json::from_str(probe.stdout.trim()) {
            Ok(found) if probe.completed => found,
            _ => {
                let output = if probe.stderr.trim().is_empty() { &probe.stdout } else { &probe.stderr };
                return Err(KubeError::ProbeFailed { image, exit: probe.exit, output: output.trim().to_string() });
            }
        };
        if !crate::python::is_supported(&found.version) {
            return Err(KubeError::TooOld { image, version: found.version });
        }
        Ok(found)
    }

    /// Starts one runner pod (or claims one) running `source`; the start runs to its end in the tracker.
    async fn start(
        &self,
        connected: &Connected,
        source: &Source,
        limits: &Limits,
        runner_source: String,
    ) -> Result<RunnerProcess, KubeError> {
        let name = format!("ptc-runner-{}-{}", self.instance, self.next.fetch_add(1, Ordering::Relaxed));
        let start = Start {
            connected: connected.clone(),
            source: source.clone(),
            settings: self.settings.clone(),
            limits: limits.clone(),
            instance: self.instance.clone(),
            name,
        };
        let task = {
            let closing = self.closing.lock().unwrap_or_else(|e| e.into_inner());
            if *closing {
                return Err(KubeError::Closing);
            }
            self.starts.spawn(start.run(runner_source))
        };
        task.await.unwrap_or_else(|e| Err(KubeError::Interrupted(e.to_string())))
    }
}

/// Loads the client configuration and checks that the API answers.
async fn connect(settings: &KubernetesSettings) -> Result<Connected, KubeError> {
    let (mut config, source_name) = match &settings.kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let failed = |why: String| KubeError::Config { source_name: shown.clone(), why };
            let file = Kubeconfig::read_from(path).map_err(|e| failed(source_chain(&e)))?;
            let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(|e| failed(source_chain(&e)))?;
            (config, shown)
        }
        None => {
            let config = Config::infer().await.map_err(|e| KubeError::Config {
                source_name: "KUBECONFIG, ~/.kube/config or the in-cluster service account".to_string(),
                why: source_chain(&e),
            })?;
            (config, "the inferred configuration".to_string())
        }
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    let server = config.cluster_url.to_string();
    let namespace = settings.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)
        .map_err(|e| KubeError::Config { source_name: source_name.clone(), why: source_chain(&e) })?;
    Ok(Connected { client, namespace, server })
}

/// The label selector of every runner pod and claim (of any server), or of one server's.
fn selector(instance: Option<&str>) -> String {
    match instance {
        Some(instance) => format!("{}={},{SERVER_LABEL}={instance}", MANAGED_BY.0, MANAGED_BY.1),
        None => format!("{}={},{SERVER_LABEL}", MANAGED_BY.0, MANAGED_BY.1),
    }
}

/// Removes what servers that died left: runner pods that ended (their runner exited when its exec stream
/// closed, and then the keeper ended the pod) and pods still pending long after their start gave up. A pod
/// from a claim goes with its claim. Running pods are left alone: they may be another live server's.
async fn sweep(connected: &Connected) -> Result<(), KubeError> {
    let pods: Api<Pod> = Api::namespaced(connected.client.clone(), &connected.namespace);
    let listed = pods.list(&ListParams::default().labels(&selector(None))).await.map_err(|e| {
        api_error(
            e,
            &format!("list pods in namespace '{}'", connected.namespace),
            &connected.server,
            &connected.namespace,
        )
    })?;
    let now = std::time::SystemTime::now();
    let claims = Claims::new(&connected.client, &connected.namespace, &connected.server);
    let removals = listed.items.into_iter().filter(|pod| is_left_over(pod, now)).filter_map(|pod| {
        let name = pod.metadata.name.clone()?;
        let claim = pod.metadata.labels.as_ref().and_then(|labels| labels.get(CLAIM_LABEL)).cloned();
        Some(match claim {
            Some(claim) => Owner::new_claim(&claims, &claim),
            None => Owner::new_pod(&connected.client, &connected.namespace, &name),
        })
    });
    let removals: Vec<Owner> = removals.collect();
    if !removals.is_empty() {
        tracing::info!("removing {} runner pods left by servers that ended", removals.len());
    }
    futures_util::future::join_all(removals.iter().map(Owner::delete)).await;
    Ok(())
}

fn is_left_over(pod: &Pod, now: std::time::SystemTime) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let age = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| now.duration_since(std::time::SystemTime::from(t.0)).ok())
        .unwrap_or_default();
    match phase {
        "Succeeded" | "Failed" => true,
        "Pending" | "Unknown" => age > STALE_AFTER,
        _ => false,
    }
}

/// One runner's start, owned by the start task.
struct Start {
    connected: Connected,
    source: Source,
    settings: KubernetesSettings,
    limits: Limits,
    instance: String,
    name: String,
}

impl Start {
    async fn run(self, runner_source: String) -> Result<RunnerProcess, KubeError> {
        let Connected { client, namespace, server } = &self.connected;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let error = |e, action: &str| api_error(e, action, server, namespace);
        match &self.source {
            Source::Template(template) => {
                let spec = pod::runner_pod(template, &self.settings, &self.limits, &self.name, &self.instance);
                pods.create(&PostParams::default(), &spec)
                    .await
                    .map_err(|e| error(e, &format!("create pods in namespace '{namespace}'")))?;
                let owner = Owner::new_pod(client, namespace, &self.name);
                let guard = DeleteUnlessDisarmed(Some(owner.clone()));
                wait_running(&pods, &self.name, server, namespace).await?;
                let refused = |e| error(e, &format!("create pods/exec in namespace '{namespace}'"));
                let runner = exec(&pods, &self.name, None, &runner_source, owner, refused).await?;
                guard.disarm();
                Ok(runner)
            }
            Source::WarmPool(pool) => {
                let claims = Claims::new(client, namespace, server);
                claims.create(&self.name, pool, &self.instance).await?;
                let owner = Owner::new_claim(&claims, &self.name);
                let guard = DeleteUnlessDisarmed(Some(owner.clone()));
                let pod_name = claims.pod_of(&self.name, START_TIMEOUT).await?;
                let claimed = pods.get(&pod_name).await.map_err(|e| error(e, &format!("get pods/{pod_name}")))?;
                let missing = pod::unconfined(&claimed, &self.settings);
                if !missing.is_empty() {
                    return Err(KubeError::Unconfined { pod: pod_name, pool: pool.clone(), missing });
                }
                let container = pod::runner_container(&claimed).map(|c| c.name.clone());
                let refused = |e| error(e, &format!("create pods/exec in namespace '{namespace}'"));
                let runner = exec(&pods, &pod_name, container.as_deref(), &runner_source, owner, refused).await?;
                guard.disarm();
                Ok(runner)
            }
        }
    }
}

/// Deletes a pod (or claim) that never became a runner.
struct DeleteUnlessDisarmed(Option<Owner>);

impl DeleteUnlessDisarmed {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for DeleteUnlessDisarmed {
    fn drop(&mut self) {
        if let Some(owner) = self.0.take() {
            owner.delete_in_background();
        }
    }
}

/// Waits until the pod's runner container runs; a pod that ended, or a container that cannot start (a
/// missing image), fails at once with the reason.
async fn wait_running(pods: &Api<Pod>, name: &str, server: &str, namespace: &str) -> Result<(), KubeError> {
    let deadline = tokio::time::Instant::now() + START_TIMEOUT;
    let mut pause = Duration::from_millis(50);
    loop {
        let pod = pods.get(name).await.map_err(|e| api_error(e, &format!("get pods/{name}"), server, namespace))?;
        let status = pod.status.unwrap_or_default();
        let phase = status.phase.clone().unwrap_or_else(|| "Pending".to_string());
        let container = status.container_statuses.unwrap_or_default().into_iter().find(|c| c.name == pod::CONTAINER);
        let state = container.and_then(|c| c.state).unwrap_or_default();
        if phase == "Running" && state.running.is_some() {
            return Ok(());
        }
        let last = if let Some(waiting) = &state.waiting {
            let reason = waiting.reason.clone().unwrap_or_default();
            let message = waiting.message.clone().unwrap_or_default();
            if HOPELESS.contains(&reason.as_str()) {
                return Err(KubeError::PodFailed { pod: name.to_string(), why: format!("{reason}: {message}") });
            }
            format!("{phase}, {reason} {message}").trim().to_string()
        } else {
            let scheduling = status.conditions.unwrap_or_default().into_iter().find(|c| c.status == "False");
            match scheduling {
                Some(c) => {
                    format!("{phase}, {}={} {}", c.type_, c.status, c.message.unwrap_or_default()).trim().to_string()
                }
                None => phase.clone(),
            }
        };
        if phase == "Succeeded" || phase == "Failed" {
            return Err(KubeError::PodFailed { pod: name.to_string(), why: format!("it ended ({last})") });
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Err(KubeError::PodSlow { pod: name.to_string(), seconds: START_TIMEOUT.as_secs(), last });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

fn unavailable(error: KubeError) -> SpawnError {
    SpawnError::Unavailable { kind: SandboxKind::Kubernetes, reason: error.to_string() }
}

#[async_trait]
impl SandboxBackend for KubernetesBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Kubernetes
    }

    async fn probe(&self) -> Availability {
        let (connected, prepared) =
            match async { Ok::<_, KubeError>((self.connected().await?, self.prepared().await?)) }.await {
                Ok(both) => both,
                Err(e) => return Availability::Unavailable { reason: e.to_string() },
            };
        let Prepared { source, python } = prepared;
        let runtime = match &self.settings.runtime_class {
            Some(class) => format!("runtime class '{class}'"),
            None => "the cluster's default runtime (no execution.kubernetes.runtime_class)".to_string(),
        };
        let from = match source {
            Source::Template(template) => format!("one pod per run from image '{}'", pod::image(template)),
            Source::WarmPool(pool) => format!("one SandboxClaim per run against warm pool '{pool}'"),
        };
        let detail = format!(
            "{from} in namespace '{}' on {} with {runtime} (python {} at {}, {}): no service-account token, uid {}, \
             no capabilities, no privilege escalation, read-only root, RuntimeDefault seccomp plus the runner's own \
             filter (no sockets, processes, exec, ptrace, namespaces) and rlimits, {} MiB in-memory scratch, memory \
             and CPU limits; the network is what the namespace's NetworkPolicy allows ({} denies all)",
            connected.namespace,
            connected.server,
            python.version,
            python.executable,
            python.machine,
            crate::docker::spec::USER.split(':').next().unwrap_or_default(),
            self.limits.scratch_mb,
            super::error::MANIFESTS,
        );
        Availability::Available { detail }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let prepared = self.prepared().await.map_err(unavailable)?;
        let connected = self.connected().await.map_err(unavailable)?;
        let source = confined_source(&request.limits, rlimits::cpu_seconds(request.timeout), None, RUNNER_SOURCE);
        self.start(connected, &prepared.source, &request.limits, source).await.map_err(|e| SpawnError::Start {
            program: format!("a runner pod in namespace '{}'", connected.namespace),
            source: std::io::Error::other(e),
        })
    }

    async fn shutdown(&self) {
        *self.closing.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.starts.close();
        self.starts.wait().await;
        let Some(connected) = self.connected.get() else { return };
        let own = ListParams::default().labels(&selector(Some(&self.instance)));
        let pods: Api<Pod> = Api::namespaced(connected.client.clone(), &connected.namespace);
        let mut owners: Vec<Owner> = match pods.list(&own).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .map(|name| Owner::new_pod(&connected.client, &connected.namespace, name))
                .collect(),
            Err(e) => {
                tracing::warn!("could not list this server's runner pods to remove them: {}", source_chain(&e));
                Vec::new()
            }
        };
        if self.settings.warm_pool.is_some() {
            let claims = Claims::new(&connected.client, &connected.namespace, &connected.server);
            match claims.api().list(&own).await {
                Ok(list) => owners.extend(
                    list.items
                        .iter()
                        .filter_map(|c| c.metadata.name.as_deref())
                        .map(|name| Owner::new_claim(&claims, name)),
                ),
                Err(e) => {
                    tracing::warn!("could not list this server's sandbox claims to remove them: {}", source_chain(&e))
                }
            }
        }
        futures_util::future::join_all(owners.iter().map(Owner::delete)).await;
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    use super::*;

    fn pod(phase: &str, age: Duration) -> Pod {
        let created = std::time::SystemTime::now() - age;
        Pod {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(k8s_openapi::jiff::Timestamp::try_from(created).unwrap())),
                ..Default::default()
            },
            status: Some(PodStatus { phase: Some(phase.to_string()), ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn ended_pods_and_long_pending_ones_are_left_over_running_ones_never() {
        let now = std::time::SystemTime::now();
        assert!(is_left_over(&pod("Succeeded", Duration::from_secs(1)), now));
        assert!(is_left_over(&pod("Failed", Duration::from_secs(1)), now));
        assert!(!is_left_over(&pod("Pending", Duration::from_secs(10)), now), "it may be starting right now");
        assert!(is_left_over(&pod("Pending", Duration::from_secs(600)), now));
        assert!(!is_left_over(&pod("Running", Duration::from_secs(86_400)), now), "it may be a live server's");
    }

    #[test]
    fn selectors_pick_every_runner_pod_or_one_servers() {
        assert_eq!(selector(None), "app.kubernetes.io/managed-by=ptc-mcp,ptc-mcp.server");
        assert_eq!(selector(Some("12-ab")), "app.kubernetes.io/managed-by=ptc-mcp,ptc-mcp.server=12-ab");
    }
}
