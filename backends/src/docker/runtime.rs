//! The OCI runtime of run containers: `execution.docker.runtime` checked against the runtimes the engine has
//! registered, and what the one in force adds to the container.

use std::collections::HashMap;

use bollard::models::{Runtime, SystemInfo};

use super::spec::TaskBound;

/// The runtime the engine runs our containers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInForce {
    pub name: String,
    /// Chosen by `execution.docker.runtime` rather than the engine's default.
    pub configured: bool,
    /// gVisor (`runsc`): a user-space kernel between the program and the host's.
    pub gvisor: bool,
}

/// A configured runtime the engine has not registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownRuntime {
    pub wanted: String,
    /// The engine's runtimes, sorted.
    pub known: Vec<String>,
}

/// The runtime runs get with `wanted` (`execution.docker.runtime`) on the engine `info` describes.
pub fn resolve(wanted: Option<&str>, info: &SystemInfo) -> Result<RuntimeInForce, UnknownRuntime> {
    let empty = HashMap::new();
    let runtimes = info.runtimes.as_ref().unwrap_or(&empty);
    let (name, configured) = match wanted {
        Some(wanted) if runtimes.contains_key(wanted) => (wanted.to_string(), true),
        Some(wanted) => {
            let mut known: Vec<String> = runtimes.keys().cloned().collect();
            known.sort();
            return Err(UnknownRuntime { wanted: wanted.to_string(), known });
        }
        // An engine too old to say its default runs runc.
        None => (info.default_runtime.clone().unwrap_or_else(|| "runc".to_string()), false),
    };
    let gvisor = is_gvisor(&name, runtimes.get(&name));
    Ok(RuntimeInForce { name, configured, gvisor })
}

/// Whether a runtime is gVisor's `runsc`: by its name, or by the program it was registered with (a runtime
/// may be registered under any name, e.g. `gvisor`).
fn is_gvisor(name: &str, runtime: Option<&Runtime>) -> bool {
    let program = runtime.and_then(|r| r.path.as_deref()).unwrap_or(name);
    let base = program.rsplit('/').next().unwrap_or(program);
    base == "runsc" || name == "runsc"
}

impl RuntimeInForce {
    /// What the container's pids limit bounds under this runtime.
    pub fn task_bound(&self) -> TaskBound {
        if self.gvisor { TaskBound::Gvisor } else { TaskBound::Cgroup }
    }

    /// The runtime as `check` and `--check-sandbox` describe it.
    pub fn describe(&self) -> String {
        let origin = if self.configured { "execution.docker.runtime" } else { "the engine's default" };
        if self.gvisor {
            format!(
                "runtime {} ({origin}: gVisor, a user-space kernel between the program and the host kernel; the \
                 program's system calls are served by it, not by the host's)",
                self.name
            )
        } else {
            format!("runtime {} ({origin})", self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(default: &str, runtimes: &[(&str, Option<&str>)]) -> SystemInfo {
        let runtimes = runtimes
            .iter()
            .map(|(name, path)| (name.to_string(), Runtime { path: path.map(String::from), ..Default::default() }))
            .collect();
        SystemInfo { default_runtime: Some(default.to_string()), runtimes: Some(runtimes), ..Default::default() }
    }

    #[test]
    fn without_a_runtime_configured_the_engines_default_is_in_force() {
        let info = engine("runc", &[("runc", Some("runc")), ("runsc", Some("/usr/bin/runsc"))]);
        let runtime = resolve(None, &info).unwrap();
        assert_eq!(runtime, RuntimeInForce { name: "runc".into(), configured: false, gvisor: false });
        assert_eq!(runtime.describe(), "runtime runc (the engine's default)");
        let gvisor_default = engine("runsc", &[("runc", None), ("runsc", Some("/usr/bin/runsc"))]);
        assert!(resolve(None, &gvisor_default).unwrap().gvisor, "an engine may run gVisor by default");
        let silent = SystemInfo::default();
        assert_eq!(resolve(None, &silent).unwrap().name, "runc");
    }

    #[test]
    fn a_configured_runtime_the_engine_knows_is_in_force_and_gvisor_is_recognised_by_its_program() {
        let info = engine("runc", &[("runc", None), ("runsc", Some("/usr/bin/runsc")), ("sandboxed", Some("runsc"))]);
        let runtime = resolve(Some("runsc"), &info).unwrap();
        assert_eq!(runtime, RuntimeInForce { name: "runsc".into(), configured: true, gvisor: true });
        assert_eq!(
            runtime.describe(),
            "runtime runsc (execution.docker.runtime: gVisor, a user-space kernel between the program and the host \
             kernel; the program's system calls are served by it, not by the host's)"
        );
        assert!(resolve(Some("sandboxed"), &info).unwrap().gvisor, "registered under another name");
        assert!(!resolve(Some("runc"), &info).unwrap().gvisor);
    }

    #[test]
    fn a_runtime_the_engine_does_not_know_is_refused_with_the_ones_it_knows() {
        let info = engine("runc", &[("runc", None), ("io.containerd.runc.v2", None)]);
        assert_eq!(
            resolve(Some("runsc"), &info),
            Err(UnknownRuntime { wanted: "runsc".into(), known: vec!["io.containerd.runc.v2".into(), "runc".into()] })
        );
    }
}
