//! Runner pods from an agent-sandbox warm pool (kubernetes-sigs/agent-sandbox, API v1beta1): a `SandboxClaim`
//! against the `SandboxWarmPool` adopts one of its ready sandboxes; the claim's status names the sandbox, the
//! sandbox's `agents.x-k8s.io/pod-name` annotation (else its own name) the pod. Deleting the claim deletes the
//! sandbox and its pod.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::error::{KubeError, api_error, is_not_found};
use super::pod::{CLAIM_LABEL, MANAGED_BY, SERVER_LABEL};

pub const EXTENSIONS_API: &str = "extensions.agents.x-k8s.io/v1beta1";
const SANDBOX_POD_ANNOTATION: &str = "agents.x-k8s.io/pod-name";
/// A claim expires (and its sandbox is deleted) this long after it was made, should its server die before
/// its runner started: a runner kept ready in the pool for longer is replaced.
const CLAIM_LIFETIME: Duration = Duration::from_secs(24 * 3600);

fn claims() -> ApiResource {
    resource("extensions.agents.x-k8s.io", "SandboxClaim", "sandboxclaims")
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: "v1beta1".to_string(),
        api_version: format!("{group}/v1beta1"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// The claim, sandbox and warm-pool APIs of one namespace.
#[derive(Clone)]
pub struct Claims {
    client: Client,
    namespace: String,
    server: String,
}

impl Claims {
    pub fn new(client: &Client, namespace: &str, server: &str) -> Claims {
        Claims { client: client.clone(), namespace: namespace.to_string(), server: server.to_string() }
    }

    pub fn api(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), &self.namespace, &claims())
    }

    fn sandboxes(&self) -> Api<DynamicObject> {
        let sandboxes = resource("agents.x-k8s.io", "Sandbox", "sandboxes");
        Api::namespaced_with(self.client.clone(), &self.namespace, &sandboxes)
    }

    fn error(&self, e: kube::Error, action: &str) -> KubeError {
        api_error(e, action, &self.server, &self.namespace)
    }

    /// Checks that the CRDs are installed and the pool exists.
    pub async fn check_pool(&self, pool: &str) -> Result<(), KubeError> {
        match self.client.list_api_group_resources(EXTENSIONS_API).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Err(KubeError::NoCrds { server: self.server.clone() }),
            Err(e) => return Err(self.error(e, &format!("list the resources of {EXTENSIONS_API}"))),
        }
        let pools = resource("extensions.agents.x-k8s.io", "SandboxWarmPool", "sandboxwarmpools");
        let pools: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &self.namespace, &pools);
        match pools.get(pool).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => {
                Err(KubeError::NoPool { pool: pool.to_string(), namespace: self.namespace.clone() })
            }
            Err(e) => Err(self.error(e, &format!("get sandboxwarmpools in namespace '{}'", self.namespace))),
        }
    }

    /// Creates claim `name` against `pool`, labelled (and its pod labelled) as server `instance`'s.
    pub async fn create(&self, name: &str, pool: &str, instance: &str) -> Result<(), KubeError> {
        let labels = BTreeMap::from([
            (MANAGED_BY.0.to_string(), MANAGED_BY.1.to_string()),
            (SERVER_LABEL.to_string(), instance.to_string()),
        ]);
        let mut pod_labels = labels.clone();
        pod_labels.insert(CLAIM_LABEL.to_string(), name.to_string());
        let expires = std::time::SystemTime::now() + CLAIM_LIFETIME;
        let mut claim = DynamicObject::new(name, &claims()).data(json!({
            "spec": {
                "warmPoolRef": {"name": pool},
                "additionalPodMetadata": {"labels": pod_labels},
                "lifecycle": {"shutdownTime": rfc3339(expires), "shutdownPolicy": "Delete"},
            }
        }));
        claim.metadata.labels = Some(labels);
        self.api()
            .create(&PostParams::default(), &claim)
            .await
            .map_err(|e| self.error(e, &format!("create sandboxclaims in namespace '{}'", self.namespace)))?;
        Ok(())
    }

    /// Waits (up to `limit`) until the claim has a ready sandbox; returns its pod's name.
    pub async fn pod_of(&self, claim: &str, limit: Duration) -> Result<String, KubeError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut last = "no status yet".to_string();
        let mut pause = Duration::from_millis(50);
        loop {
            let object =
                self.api().get(claim).await.map_err(|e| self.error(e, &format!("get sandboxclaims/{claim}")))?;
            last = describe_conditions(&object.data["status"]).unwrap_or(last);
            if let Some(sandbox) = object.data["status"]["sandbox"]["name"].as_str().filter(|s| !s.is_empty()) {
                match self.sandboxes().get(sandbox).await {
                    Ok(sandbox_object) if is_ready(&sandbox_object.data["status"]) => {
                        let annotations = sandbox_object.metadata.annotations.unwrap_or_default();
                        return Ok(annotations
                            .get(SANDBOX_POD_ANNOTATION)
                            .cloned()
                            .unwrap_or_else(|| sandbox.to_string()));
                    }
                    Ok(sandbox_object) => {
                        last = describe_conditions(&sandbox_object.data["status"]).unwrap_or(last);
                    }
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(self.error(e, &format!("get sandboxes/{sandbox}"))),
                }
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(KubeError::ClaimSlow { claim: claim.to_string(), seconds: limit.as_secs(), last });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// Whether a status has the condition `Ready` at `True`.
fn is_ready(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// `Type=Status (reason: message)` of each condition, for a claim that takes too long.
fn describe_conditions(status: &Value) -> Option<String> {
    let conditions = status["conditions"].as_array().filter(|c| !c.is_empty())?;
    let shown: Vec<String> = conditions
        .iter()
        .map(|c| {
            let (kind, state) = (c["type"].as_str().unwrap_or("?"), c["status"].as_str().unwrap_or("?"));
            match (c["reason"].as_str(), c["message"].as_str()) {
                (Some(reason), Some(message)) => format!("{kind}={state} ({reason}: {message})"),
                (Some(reason), None) => format!("{kind}={state} ({reason})"),
                _ => format!("{kind}={state}"),
            }
        })
        .collect();
    Some(shown.join(", "))
}

/// A time as RFC 3339 in UTC, to the second.
fn rfc3339(time: std::time::SystemTime) -> String {
    let seconds = time.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
    k8s_openapi::jiff::Timestamp::from_second(seconds).map(|t| t.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_rfc3339() {
        let at = |seconds| rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(seconds));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_796_601_599), "2026-12-06T23:59:59Z");
    }

    #[test]
    fn readiness_and_conditions_are_read_from_the_status() {
        let status =
            json!({"conditions": [{"type": "Ready", "status": "False", "reason": "Pending", "message": "no pod"}]});
        assert!(!is_ready(&status));
        assert_eq!(describe_conditions(&status).as_deref(), Some("Ready=False (Pending: no pod)"));
        assert!(is_ready(&json!({"conditions": [{"type": "Ready", "status": "True"}]})));
        assert_eq!(describe_conditions(&json!({})), None);
    }
}
