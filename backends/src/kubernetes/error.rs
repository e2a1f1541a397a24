//! Why the `kubernetes` backend cannot run a program: each message names what failed and how to fix it.

use crate::ExitInfo;

/// The manifests of the runners' namespace: its NetworkPolicy and the Role the server needs.
pub const MANIFESTS: &str = "deploy/kubernetes/runners.yaml";

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "cannot load the Kubernetes client configuration ({source_name}): {why}; point \
         execution.kubernetes.kubeconfig (or KUBECONFIG) at a kubeconfig file, or run ptc-mcp in a pod with a \
         service account"
    )]
    Config { source_name: String, why: String },
    #[error(
        "cannot reach the Kubernetes API at {server}: {why}; check that the cluster is up and reachable from here, \
         and execution.kubernetes.kubeconfig (or KUBECONFIG)"
    )]
    Unreachable { server: String, why: String },
    #[error(
        "the Kubernetes API at {server} did not accept this client's credentials ({message}); renew them (a token \
         may have expired) or point execution.kubernetes.kubeconfig at a kubeconfig that works"
    )]
    Unauthorized { server: String, message: String },
    #[error(
        "the Kubernetes API refused to {action}: {message}; bind the server's account to the Role in {MANIFESTS} \
         (kubectl apply -f {MANIFESTS})"
    )]
    Forbidden { action: String, message: String },
    #[error(
        "namespace '{namespace}' does not exist; create it with {MANIFESTS} (kubectl apply -f {MANIFESTS}) or set \
         execution.kubernetes.namespace"
    )]
    NoNamespace { namespace: String },
    #[error("the Kubernetes API could not {action}: {message}")]
    Api { action: String, message: String },
    #[error(
        "the agent-sandbox CRDs (extensions.agents.x-k8s.io/v1beta1) are not installed in the cluster at {server}; \
         install agent-sandbox with its extensions (kubernetes-sigs/agent-sandbox), or leave \
         execution.kubernetes.warm_pool out to create pods from a template"
    )]
    NoCrds { server: String },
    #[error(
        "there is no SandboxWarmPool '{pool}' in namespace '{namespace}' (execution.kubernetes.warm_pool); create \
         it (deploy/kubernetes/warm-pool.yaml) or fix the name"
    )]
    NoPool { pool: String, namespace: String },
    #[error("{0}")]
    Template(#[from] super::pod::TemplateError),
    #[error("runner pod {pod} did not start: {why}")]
    PodFailed { pod: String, why: String },
    #[error("runner pod {pod} did not start within {seconds} s (last seen: {last})")]
    PodSlow { pod: String, seconds: u64, last: String },
    #[error("SandboxClaim {claim} got no ready sandbox within {seconds} s (last seen: {last})")]
    ClaimSlow { claim: String, seconds: u64, last: String },
    #[error(
        "pod {pod} claimed from SandboxWarmPool '{pool}' is not confined as runner pods must be: it lacks {}; make \
         the pool's SandboxTemplate like deploy/kubernetes/warm-pool.yaml",
        .missing.join(", ")
    )]
    Unconfined { pod: String, pool: String, missing: Vec<String> },
    #[error(
        "image '{image}' has no python3 on its PATH; use an image with CPython {} or later",
        crate::python::MIN_VERSION
    )]
    NoPython { image: String },
    #[error("python3 in image '{image}' could not start confined ({exit}): {output}")]
    ProbeFailed { image: String, exit: ExitInfo, output: String },
    #[error("python3 in image '{image}' is {version}, but the runner needs {} or later", crate::python::MIN_VERSION)]
    TooOld { image: String, version: String },
    #[error("could not start the runner in pod {pod}: {why}")]
    Exec { pod: String, why: String },
    #[error("the server is shutting down")]
    Closing,
    #[error("the runner's start was interrupted: {0}")]
    Interrupted(String),
}

/// An API error while doing `action` (e.g. "create pods in namespace 'x'"), as the user needs to read it.
pub fn api_error(error: kube::Error, action: &str, server: &str, namespace: &str) -> KubeError {
    match error {
        kube::Error::Api(status) => {
            let message = status.message.clone();
            match status.code {
                401 => KubeError::Unauthorized { server: server.to_string(), message },
                403 => KubeError::Forbidden { action: action.to_string(), message },
                404 if status.details.as_ref().is_some_and(|d| d.kind == "namespaces") => {
                    KubeError::NoNamespace { namespace: namespace.to_string() }
                }
                code => KubeError::Api { action: action.to_string(), message: format!("{message} (HTTP {code})") },
            }
        }
        kube::Error::HyperError(e) => KubeError::Unreachable { server: server.to_string(), why: source_chain(&e) },
        kube::Error::Service(e) => KubeError::Unreachable { server: server.to_string(), why: source_chain(&*e) },
        other => KubeError::Api { action: action.to_string(), message: source_chain(&other) },
    }
}

/// An error and its causes on one line (a connection refused is only named by the innermost).
pub fn source_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// Whether an API error is a 404 (the object is already gone).
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_names_the_fix() {
        let cases = [
            (
                KubeError::Unreachable { server: "https://k:6443".into(), why: "Connection refused".into() },
                "cannot reach the Kubernetes API at https://k:6443: Connection refused; check that the cluster is up \
                 and reachable from here, and execution.kubernetes.kubeconfig (or KUBECONFIG)",
            ),
            (
                KubeError::Forbidden { action: "create pods in namespace 'ptc'".into(), message: "no".into() },
                "the Kubernetes API refused to create pods in namespace 'ptc': no; bind the server's account to the \
                 Role in deploy/kubernetes/runners.yaml (kubectl apply -f deploy/kubernetes/runners.yaml)",
            ),
            (
                KubeError::NoNamespace { namespace: "ptc".into() },
                "namespace 'ptc' does not exist; create it with deploy/kubernetes/runners.yaml (kubectl apply -f \
                 deploy/kubernetes/runners.yaml) or set execution.kubernetes.namespace",
            ),
            (
                KubeError::Unconfined { pod: "p".into(), pool: "w".into(), missing: vec!["a".into(), "b".into()] },
                "pod p claimed from SandboxWarmPool 'w' is not confined as runner pods must be: it lacks a, b; make the \
                 pool's SandboxTemplate like deploy/kubernetes/warm-pool.yaml",
            ),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
        }
    }
}
