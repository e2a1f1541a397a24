//! The pod of one runner: made from the template with everything that confines it set by ptc-mcp, and the
//! check that a pod claimed from a warm pool is confined the same way. Plain code, unit-tested without a
//! cluster.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, Pod, PodDNSConfig, PodDNSConfigOption, PodSecurityContext,
    PodSpec, ResourceRequirements, SeccompProfile, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::KubernetesSettings;
use crate::Limits;
use crate::docker::spec::{DEFAULT_IMAGE, SCRATCH, USER, USER_ENV};

/// The runner's container in every runner pod (a claimed pod's, else its first container).
pub const CONTAINER: &str = "runner";
/// Every runner pod (and claim) carries these labels: ptc-mcp manages it, and which server instance made it.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "ptc-mcp");
pub const SERVER_LABEL: &str = "ptc-mcp.server";
/// A claimed pod's claim, so that whoever finds the pod ended removes the claim (and with it the pod).
pub const CLAIM_LABEL: &str = "ptc-mcp.claim";
/// The pod's host name: tells programs nothing.
const HOSTNAME: &str = "sandbox";
/// What /etc/resolv.conf holds: a loopback resolver and no search domains (the cluster's would name its
/// namespaces and services).
const DNS: &str = "127.0.0.1";
/// How long a created pod's first process waits for its runner before it ends the pod.
pub const FIRST_RUNNER_WAIT_SECONDS: u64 = 300;

/// The container's first process (see its docstring).
pub const KEEPER_SOURCE: &str = include_str!("keeper.py");
/// What the exec'd interpreter runs: it writes a newline to its stdout (it runs: the server sends nothing
/// before), then reads the source to run from its stdin (a decimal length, a newline, then the source), so the
/// command line stays small whatever the runner's size (it travels in the exec request's URL, through the API
/// server and its proxies).
pub const BOOTSTRAP_SOURCE: &str = include_str!("bootstrap.py");

/// The first process of a runner container: the keeper, waiting `first_wait` seconds (0: no limit) for a
/// runner.
pub fn keeper_command(first_wait: u64) -> Vec<String> {
    let mut command = vec!["python3".to_string()];
    command.extend(crate::python::isolated_args(KEEPER_SOURCE));
    command.push(first_wait.to_string());
    command
}

/// The command exec'd in the container; the source it runs follows on its stdin, framed by [`framed`].
pub fn exec_command() -> Vec<String> {
    let mut command = vec!["python3".to_string()];
    command.extend(crate::python::isolated_args(BOOTSTRAP_SOURCE));
    command
}

/// `source` as the bootstrap reads it from stdin.
pub fn framed(source: &str) -> Vec<u8> {
    let mut bytes = format!("{}\n", source.len()).into_bytes();
    bytes.extend_from_slice(source.as_bytes());
    bytes
}

/// A template that cannot make runner pods; the message names the file and the key.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("execution.kubernetes.template {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("execution.kubernetes.template {path}: {problem}")]
    Invalid { path: String, problem: String },
}

/// Keys a template may set, by where they are; ptc-mcp sets or refuses everything else (volumes, host
/// namespaces, security contexts, service accounts, commands, more containers).
const METADATA_KEYS: &[&str] = &["labels", "annotations"];
const SPEC_KEYS: &[&str] = &[
    "containers",
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "imagePullSecrets",
    "runtimeClassName",
    "schedulerName",
    "topologySpreadConstraints",
];
const CONTAINER_KEYS: &[&str] = &["name", "image", "imagePullPolicy", "resources"];

/// Reads a Pod manifest (YAML or JSON) and checks that it only sets what a template may.
pub fn load_template(path: &Path) -> Result<Pod, TemplateError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read { path: shown.clone(), source })?;
    let invalid = |problem: String| TemplateError::Invalid { path: shown.clone(), problem };
    let value: Value = serde_yaml_ng::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    check_template(&value).map_err(invalid)?;
    serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
}

fn check_template(value: &Value) -> Result<(), String> {
    let top = value.as_object().ok_or("must be a Pod manifest (a mapping with kind: Pod)")?;
    if top.get("kind").and_then(Value::as_str) != Some("Pod") {
        return Err("kind: must be Pod".to_string());
    }
    only_keys(top, &["apiVersion", "kind", "metadata", "spec"], "")?;
    if let Some(metadata) = top.get("metadata") {
        only_keys(metadata.as_object().ok_or("metadata: must be a mapping")?, METADATA_KEYS, "metadata.")?;
    }
    let Some(spec) = top.get("spec") else { return Ok(()) };
    let spec = spec.as_object().ok_or("spec: must be a mapping")?;
    only_keys(spec, SPEC_KEYS, "spec.")?;
    match spec.get("containers").map(|c| c.as_array().map(Vec::as_slice)) {
        None => Ok(()),
        Some(Some([container])) => only_keys(
            container.as_object().ok_or("spec.containers[0]: must be a mapping")?,
            CONTAINER_KEYS,
            "spec.containers[0].",
        ),
        Some(_) => Err("spec.containers: must hold exactly one container (the runner's)".to_string()),
    }
}

fn only_keys(map: &serde_json::Map<String, Value>, allowed: &[&str], prefix: &str) -> Result<(), String> {
    match map.keys().find(|key| !allowed.contains(&key.as_str())) {
        None => Ok(()),
        Some(key) => Err(format!(
            "{prefix}{key}: not for a template (it may set {prefix}{}); ptc-mcp sets or refuses the rest of a \
             runner pod",
            allowed.join(&format!(", {prefix}"))
        )),
    }
}

/// The template used without `execution.kubernetes.template`: one container of the default image.
pub fn default_template() -> Pod {
    Pod {
        spec: Some(PodSpec {
            containers: vec![Container { image: Some(DEFAULT_IMAGE.to_string()), ..Default::default() }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The image runner pods run: the template's.
pub fn image(template: &Pod) -> String {
    template
        .spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|container| container.image.clone())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

/// The pod for one runner, `name`, made by server `instance`: the template's image, resources and scheduling,
/// with ptc-mcp's confinement over it: no service-account token, no host namespaces or service links, non-root,
/// no capabilities or privilege escalation, a read-only root and the RuntimeDefault seccomp profile, an
/// in-memory scratch volume as working directory, a fixed resolver, memory and CPU limits (the template's,
/// else from `limits`), never restarted, and the keeper as its first process.
pub fn runner_pod(template: &Pod, settings: &KubernetesSettings, limits: &Limits, name: &str, instance: &str) -> Pod {
    let template_spec = template.spec.clone().unwrap_or_default();
    let template_container = template_spec.containers.first().cloned().unwrap_or_default();
    let (uid, gid) = user_ids();
    let mut labels: BTreeMap<String, String> = template.metadata.labels.clone().unwrap_or_default();
    labels.insert(MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string());
    labels.insert(SERVER_LABEL.to_string(), instance.to_string());
    let container = Container {
        name: CONTAINER.to_string(),
        image: Some(image(template)),
        image_pull_policy: template_container.image_pull_policy,
        command: Some(keeper_command(FIRST_RUNNER_WAIT_SECONDS)),
        env: Some(
            USER_ENV
                .iter()
                .map(|(name, value)| EnvVar {
                    name: name.to_string(),
                    value: Some(value.to_string()),
                    ..Default::default()
                })
                .collect(),
        ),
        working_dir: Some(SCRATCH.to_string()),
        resources: Some(resources(template_container.resources, limits)),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(uid),
            run_as_group: Some(gid),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_string()]), add: None }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "scratch".to_string(),
            mount_path: SCRATCH.to_string(),
            ..Default::default()
        }]),
        stdin: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            annotations: template.metadata.annotations.clone(),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            restart_policy: Some("Never".to_string()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            share_process_namespace: Some(false),
            hostname: Some(HOSTNAME.to_string()),
            dns_policy: Some("None".to_string()),
            dns_config: Some(PodDNSConfig {
                nameservers: Some(vec![DNS.to_string()]),
                searches: Some(Vec::new()),
                options: Some(vec![PodDNSConfigOption {
                    name: Some("ndots".to_string()),
                    value: Some("1".to_string()),
                }]),
            }),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(uid),
                run_as_group: Some(gid),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".to_string(), localhost_profile: None }),
                ..Default::default()
            }),
            termination_grace_period_seconds: Some(0),
            runtime_class_name: settings.runtime_class.clone().or(template_spec.runtime_class_name),
            volumes: Some(vec![Volume {
                name: "scratch".to_string(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".to_string()),
                    size_limit: Some(Quantity(format!("{}Mi", limits.scratch_mb))),
                }),
                ..Default::default()
            }]),
            node_selector: template_spec.node_selector,
            tolerations: template_spec.tolerations,
            affinity: template_spec.affinity,
            priority_class_name: template_spec.priority_class_name,
            image_pull_secrets: template_spec.image_pull_secrets,
            scheduler_name: template_spec.scheduler_name,
            topology_spread_constraints: template_spec.topology_spread_constraints,
            ..Default::default()
        }),
        status: None,
    }
}

fn user_ids() -> (i64, i64) {
    let (uid, gid) = USER.split_once(':').expect("USER is uid:gid");
    (uid.parse().expect("numeric uid"), gid.parse().expect("numeric gid"))
}

/// The template's resources, with a memory limit (the runner's and its in-memory scratch) and a CPU limit (1)
/// where it sets none, and requests equal to the limits where it sets none.
fn resources(template: Option<ResourceRequirements>, limits: &Limits) -> ResourceRequirements {
    let mut resources = template.unwrap_or_default();
    let mut bounds = resources.limits.take().unwrap_or_default();
    let memory = limits.memory_mb.saturating_add(limits.scratch_mb);
    bounds.entry("memory".to_string()).or_insert_with(|| Quantity(format!("{memory}Mi")));
    bounds.entry("cpu".to_string()).or_insert_with(|| Quantity("1".to_string()));
    let mut requests = resources.requests.take().unwrap_or_default();
    for (name, value) in &bounds {
        requests.entry(name.clone()).or_insert_with(|| value.clone());
    }
    ResourceRequirements { limits: Some(bounds), requests: Some(requests), ..resources }
}

/// The runner's container in a pod: the one named [`CONTAINER`], else the first.
pub fn runner_container(pod: &Pod) -> Option<&Container> {
    let containers = &pod.spec.as_ref()?.containers;
    containers.iter().find(|c| c.name == CONTAINER).or_else(|| containers.first())
}

/// What a claimed pod lacks of the confinement ptc-mcp gives the pods it makes (empty: it has it all).
pub fn unconfined(pod: &Pod, settings: &KubernetesSettings) -> Vec<String> {
    let mut missing = Vec::new();
    let Some(spec) = &pod.spec else { return vec!["a pod spec".to_string()] };
    let mut need = |ok: bool, what: &str| {
        if !ok {
            missing.push(what.to_string());
        }
    };
    need(spec.automount_service_account_token == Some(false), "automountServiceAccountToken: false");
    need(
        spec.host_network != Some(true) && spec.host_pid != Some(true) && spec.host_ipc != Some(true),
        "no host namespaces",
    );
    need(spec.restart_policy.as_deref() == Some("Never"), "restartPolicy: Never");
    // Nothing of the node's or the cluster's: no host paths, secrets or projected tokens.
    need(spec.volumes.iter().flatten().all(|v| v.empty_dir.is_some()), "no volumes but emptyDir");
    if let Some(class) = &settings.runtime_class {
        need(spec.runtime_class_name.as_ref() == Some(class), &format!("runtimeClassName: {class}"));
    }
    let pod_context = spec.security_context.clone().unwrap_or_default();
    let Some(container) = runner_container(pod) else {
        missing.push("a container".to_string());
        return missing;
    };
    let context = container.security_context.clone().unwrap_or_default();
    need(context.allow_privilege_escalation == Some(false), "allowPrivilegeEscalation: false");
    need(context.privileged != Some(true), "no privileged container");
    need(context.read_only_root_filesystem == Some(true), "readOnlyRootFilesystem: true");
    let drops_all =
        context.capabilities.as_ref().and_then(|c| c.drop.as_ref()).is_some_and(|d| d.iter().any(|c| c == "ALL"));
    let adds = context.capabilities.as_ref().and_then(|c| c.add.as_ref()).is_some_and(|a| !a.is_empty());
    need(drops_all && !adds, "capabilities: drop ALL, add none");
    let non_root = context.run_as_non_root.or(pod_context.run_as_non_root) == Some(true)
        && context.run_as_user.or(pod_context.run_as_user) != Some(0);
    need(non_root, "runAsNonRoot: true");
    let memory_limited =
        container.resources.as_ref().and_then(|r| r.limits.as_ref()).is_some_and(|l| l.contains_key("memory"));
    need(memory_limited, "a memory limit");
    missing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        runner_pod(&default_template(), &KubernetesSettings::default(), &Limits::default(), "ptc-runner-1", "inst-1")
    }

    #[test]
    fn the_pod_is_locked_down() {
        let pod = pod();
        let spec = spec_of(&pod);
        assert_eq!(spec.automount_service_account_token, Some(false), "no service-account token");
        assert_eq!(spec.enable_service_links, Some(false));
        assert_eq!((spec.host_network, spec.host_pid, spec.host_ipc), (Some(false), Some(false), Some(false)));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.dns_policy.as_deref(), Some("None"));
        assert_eq!(spec.dns_config.unwrap().nameservers, Some(vec!["127.0.0.1".to_string()]));
        let pod_context = spec.security_context.unwrap();
        assert_eq!(pod_context.seccomp_profile.unwrap().type_, "RuntimeDefault");
        assert_eq!((pod_context.run_as_non_root, pod_context.run_as_user), (Some(true), Some(65534)));
        let [container] = spec.containers.as_slice() else { panic!("one container") };
        let context = container.security_context.clone().unwrap();
        assert_eq!(context.allow_privilege_escalation, Some(false));
        assert_eq!(context.read_only_root_filesystem, Some(true));
        assert_eq!(context.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!(container.name, CONTAINER);
        assert_eq!(container.image.as_deref(), Some(DEFAULT_IMAGE));
        assert_eq!(container.working_dir.as_deref(), Some(SCRATCH));
        assert_eq!(container.command.as_ref().unwrap()[..4], ["python3", "-I", "-S", "-c"]);
        assert_eq!(container.command.as_ref().unwrap()[5], "300");
        let volumes = spec.volumes.unwrap();
        let scratch = volumes[0].empty_dir.clone().unwrap();
        assert_eq!((scratch.medium.as_deref(), scratch.size_limit), (Some("Memory"), Some(Quantity("256Mi".into()))));
        assert!(volumes.iter().all(|v| v.host_path.is_none() && v.projected.is_none() && v.secret.is_none()));
        let labels = pod.metadata.labels.clone().unwrap();
        assert_eq!(labels[MANAGED_BY.0], "ptc-mcp");
        assert_eq!(labels[SERVER_LABEL], "inst-1");
        assert!(unconfined(&pod_with_spec(spec_of(&pod)), &KubernetesSettings::default()).is_empty());
    }

    fn spec_of(pod: &Pod) -> PodSpec {
        pod.spec.clone().unwrap()
    }

    fn pod_with_spec(spec: PodSpec) -> Pod {
        Pod { spec: Some(spec), ..Default::default() }
    }

    #[test]
    fn limits_come_from_the_template_else_from_execution_limits() {
        let limits = Limits { memory_mb: 512, scratch_mb: 100, ..Limits::default() };
        let pod = runner_pod(&default_template(), &KubernetesSettings::default(), &limits, "p", "i");
        let resources = spec_of(&pod).containers[0].resources.clone().unwrap();
        let bounds = resources.limits.unwrap();
        assert_eq!(bounds["memory"], Quantity("612Mi".into()), "memory holds the in-memory scratch too");
        assert_eq!(bounds["cpu"], Quantity("1".into()));
        assert_eq!(resources.requests.unwrap(), bounds, "requests equal limits (Guaranteed)");
        let template: Pod = serde_json::from_value(serde_json::json!({
            "kind": "Pod",
            "metadata": {"labels": {"team": "ml"}},
            "spec": {"runtimeClassName": "kata", "nodeSelector": {"pool": "sandbox"},
                     "containers": [{"image": "reg/py:3.12", "resources": {"limits": {"cpu": "250m"}, "requests": {"memory": "100Mi"}}}]}
        }))
        .unwrap();
        let pod = runner_pod(&template, &KubernetesSettings::default(), &limits, "p", "i");
        let spec = spec_of(&pod);
        assert_eq!(spec.runtime_class_name.as_deref(), Some("kata"));
        assert_eq!(spec.node_selector.unwrap()["pool"], "sandbox");
        let resources = spec.containers[0].resources.clone().unwrap();
        assert_eq!(resources.limits.unwrap()["cpu"], Quantity("250m".into()));
        assert_eq!(resources.requests.unwrap()["memory"], Quantity("100Mi".into()));
        assert_eq!(spec.containers[0].image.as_deref(), Some("reg/py:3.12"));
        assert_eq!(pod.metadata.labels.unwrap()["team"], "ml");
        let gvisor = KubernetesSettings { runtime_class: Some("gvisor".into()), ..Default::default() };
        let pod = runner_pod(&template, &gvisor, &limits, "p", "i");
        assert_eq!(spec_of(&pod).runtime_class_name.as_deref(), Some("gvisor"), "runtime_class wins");
    }

    #[test]
    fn a_template_may_set_only_what_does_not_confine_the_pod() {
        let check = |yaml: &str| check_template(&serde_yaml_ng::from_str(yaml).unwrap());
        assert_eq!(
            check("kind: Pod\nspec:\n  containers:\n  - image: x\n    resources: {}\n  tolerations: []\n"),
            Ok(())
        );
        assert_eq!(check("kind: Deployment\n"), Err("kind: must be Pod".to_string()));
        let refused = check("kind: Pod\nspec:\n  hostNetwork: true\n").unwrap_err();
        assert!(
            refused.starts_with("spec.hostNetwork: not for a template (it may set spec.containers, spec.nodeSelector"),
            "{refused}"
        );
        let refused = check("kind: Pod\nspec:\n  containers:\n  - image: x\n    securityContext: {privileged: true}\n")
            .unwrap_err();
        assert!(refused.starts_with("spec.containers[0].securityContext: not for a template"), "{refused}");
        assert_eq!(
            check("kind: Pod\nspec:\n  containers: [{image: a}, {image: b}]\n"),
            Err("spec.containers: must hold exactly one container (the runner's)".to_string())
        );
        assert!(
            check("kind: Pod\nmetadata:\n  name: fixed\n")
                .unwrap_err()
                .starts_with("metadata.name: not for a template")
        );
    }

    #[test]
    fn a_claimed_pod_must_be_confined_like_the_pods_ptc_mcp_makes() {
        let gvisor = KubernetesSettings { runtime_class: Some("gvisor".into()), ..Default::default() };
        let mut spec = spec_of(&pod());
        spec.runtime_class_name = Some("gvisor".into());
        assert!(unconfined(&pod_with_spec(spec.clone()), &gvisor).is_empty());
        spec.runtime_class_name = None;
        spec.automount_service_account_token = None;
        spec.volumes.as_mut().unwrap().push(Volume {
            name: "host".into(),
            host_path: Some(k8s_openapi::api::core::v1::HostPathVolumeSource { path: "/".into(), type_: None }),
            ..Default::default()
        });
        spec.containers[0].security_context.as_mut().unwrap().read_only_root_filesystem = None;
        spec.containers[0].security_context.as_mut().unwrap().capabilities = None;
        assert_eq!(
            unconfined(&pod_with_spec(spec), &gvisor),
            [
                "automountServiceAccountToken: false",
                "no volumes but emptyDir",
                "runtimeClassName: gvisor",
                "readOnlyRootFilesystem: true",
                "capabilities: drop ALL, add none"
            ]
        );
    }

    #[test]
    fn the_source_reaches_the_bootstrap_framed_by_its_length() {
        assert_eq!(framed("print(1)\n"), b"9\nprint(1)\n");
        assert_eq!(framed("é"), "2\né".as_bytes(), "the length counts bytes");
        assert_eq!(exec_command()[..4], ["python3", "-I", "-S", "-c"]);
        assert!(exec_command()[4].len() < 1024, "the exec command line stays small");
    }
}

#[cfg(test)]
mod deploy_tests {
    use super::*;

    /// The pod spec of the SandboxTemplate in `deploy/kubernetes/warm-pool.yaml`.
    fn shipped_warm_pod() -> Pod {
        let text = include_str!("../../../deploy/kubernetes/warm-pool.yaml");
        let template = serde_yaml_ng::Deserializer::from_str(text)
            .map(|document| Value::deserialize(document).unwrap())
            .find(|document| document["kind"] == "SandboxTemplate")
            .expect("warm-pool.yaml has a SandboxTemplate");
        let spec = template["spec"]["podTemplate"]["spec"].clone();
        Pod { spec: Some(serde_json::from_value(spec).unwrap()), ..Default::default() }
    }

    use serde::Deserialize;

    #[test]
    fn the_shipped_warm_pool_makes_the_pods_ptc_mcp_makes_with_a_keeper_that_waits_to_be_claimed() {
        let shipped = shipped_warm_pod();
        assert!(
            unconfined(&shipped, &KubernetesSettings::default()).is_empty(),
            "{:?}",
            unconfined(&shipped, &KubernetesSettings::default())
        );
        let mut made =
            runner_pod(&default_template(), &KubernetesSettings::default(), &Limits::default(), "p", "i").spec.unwrap();
        made.containers[0].command = Some(keeper_command(0));
        assert_eq!(serde_json::to_value(shipped.spec.unwrap()).unwrap(), serde_json::to_value(made).unwrap());
    }
}
