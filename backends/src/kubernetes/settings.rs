//! `execution.kubernetes`: where runner pods go and what they are made from. Plain values, checked without a
//! cluster (and without the `kubernetes` feature, so a config stays valid or invalid in every build).

use std::path::PathBuf;

use serde::Deserialize;

/// `execution.kubernetes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesSettings {
    /// The namespace of runner pods (and claims); unset: the kubeconfig context's namespace, else `default`.
    pub namespace: Option<String>,
    /// The pods' RuntimeClass (e.g. `gvisor`); unset: the template's, else the cluster's default runtime. With
    /// `warm_pool`, a claimed pod must have it.
    pub runtime_class: Option<String>,
    /// A Pod manifest (YAML) the runner pods start from: image, resources, scheduling. ptc-mcp sets (or
    /// refuses) everything that confines the pod.
    pub template: Option<PathBuf>,
    /// A `SandboxWarmPool` (agent-sandbox) to claim runner pods from instead of creating them.
    pub warm_pool: Option<String>,
    /// The kubeconfig file; unset: `KUBECONFIG`, else `~/.kube/config`, else the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
}

/// A value under `execution.kubernetes` that cannot be used; the message starts with its key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KubernetesSettingsError {
    #[error("{key}: '{value}' is not a Kubernetes name (lower-case letters, digits and '-', at most {max} characters{dots})", dots = if *.max == 63 { "" } else { ", '.' between parts" })]
    Name { key: &'static str, value: String, max: usize },
    #[error("{0}: must be a file path")]
    NoPath(&'static str),
    #[error("template: not used with warm_pool (the pool's SandboxTemplate makes its pods); leave one of them out")]
    TemplateWithPool,
}

impl KubernetesSettings {
    pub fn validate(&self) -> Result<(), KubernetesSettingsError> {
        if let Some(namespace) = &self.namespace {
            check_name("namespace", namespace, 63)?;
        }
        if let Some(class) = &self.runtime_class {
            check_name("runtime_class", class, 253)?;
        }
        if let Some(pool) = &self.warm_pool {
            check_name("warm_pool", pool, 253)?;
        }
        for (key, path) in [("template", &self.template), ("kubeconfig", &self.kubeconfig)] {
            if path.as_ref().is_some_and(|path| path.as_os_str().is_empty()) {
                return Err(KubernetesSettingsError::NoPath(key));
            }
        }
        if self.template.is_some() && self.warm_pool.is_some() {
            return Err(KubernetesSettingsError::TemplateWithPool);
        }
        Ok(())
    }
}

/// A DNS-1123 label (`max` 63: namespaces) or subdomain (`max` 253: labels joined by '.').
fn check_name(key: &'static str, value: &str, max: usize) -> Result<(), KubernetesSettingsError> {
    let label = |part: &str| {
        !part.is_empty()
            && part.len() <= 63
            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    };
    let valid = value.len() <= max && if max == 63 { label(value) } else { value.split('.').all(label) };
    if valid { Ok(()) } else { Err(KubernetesSettingsError::Name { key, value: value.to_string(), max }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_validated_with_the_key_named() {
        assert_eq!(KubernetesSettings::default().validate(), Ok(()));
        let good = KubernetesSettings {
            namespace: Some("ptc-runners".into()),
            runtime_class: Some("gvisor.example.io".into()),
            warm_pool: Some("python-pool".into()),
            kubeconfig: Some("/etc/ptc/kubeconfig".into()),
            ..Default::default()
        };
        assert_eq!(good.validate(), Ok(()));
        let cases = [
            (
                KubernetesSettings { namespace: Some("Ptc".into()), ..Default::default() },
                "namespace: 'Ptc' is not a Kubernetes name (lower-case letters, digits and '-', at most 63 characters)",
            ),
            (
                KubernetesSettings { namespace: Some("a.b".into()), ..Default::default() },
                "namespace: 'a.b' is not a Kubernetes name (lower-case letters, digits and '-', at most 63 characters)",
            ),
            (
                KubernetesSettings { runtime_class: Some("-gvisor".into()), ..Default::default() },
                "runtime_class: '-gvisor' is not a Kubernetes name (lower-case letters, digits and '-', at most 253 \
                 characters, '.' between parts)",
            ),
            (
                KubernetesSettings { warm_pool: Some(String::new()), ..Default::default() },
                "warm_pool: '' is not a Kubernetes name (lower-case letters, digits and '-', at most 253 characters, \
                 '.' between parts)",
            ),
            (
                KubernetesSettings { kubeconfig: Some("".into()), ..Default::default() },
                "kubeconfig: must be a file path",
            ),
            (
                KubernetesSettings {
                    template: Some("pod.yaml".into()),
                    warm_pool: Some("p".into()),
                    ..Default::default()
                },
                "template: not used with warm_pool (the pool's SandboxTemplate makes its pods); leave one of them out",
            ),
        ];
        for (settings, message) in cases {
            assert_eq!(settings.validate().map_err(|e| e.to_string()), Err(message.to_string()));
        }
        let long = "a".repeat(64);
        assert!(KubernetesSettings { namespace: Some(long), ..Default::default() }.validate().is_err());
    }
}
