//! The `seatbelt` backend (macOS): the runner under `/usr/bin/sandbox-exec` with the deny-by-default
//! profile in `profiles/seatbelt.sbpl`. Paths are passed as `-D` parameters, never pasted into the profile.
//! Rendering the profile and the command line is plain code, compiled and tested on every OS; elsewhere the
//! backend reports itself unavailable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use crate::python::ResolvedPython;
use crate::{Availability, Python, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest};

/// By absolute path: a `sandbox-exec` earlier on PATH must not be able to stand in for Apple's.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";
const PROFILE_TEMPLATE: &str = include_str!("../../profiles/seatbelt.sbpl");
const ANCESTORS_MARK: &str = "@ANCESTORS@";
const HIDDEN_MARK: &str = "@HIDDEN@";

/// The profile text for `ancestor_count` ancestor parameters (`ANCESTOR_0` …) and `hidden_count` hidden
/// directories (`HIDDEN_0` …: installed packages, denied after the interpreter's prefix is allowed, so that
/// programs get the standard library only, as under landlock).
pub fn render_profile(ancestor_count: usize, hidden_count: usize) -> String {
    let ancestors: Vec<String> = (0..ancestor_count).map(|i| format!("  (literal (param \"ANCESTOR_{i}\"))")).collect();
    let hidden: Vec<String> =
        (0..hidden_count).map(|i| format!("(deny file-read* (subpath (param \"HIDDEN_{i}\")))")).collect();
    PROFILE_TEMPLATE.replace(ANCESTORS_MARK, &ancestors.join("\n")).replace(HIDDEN_MARK, &hidden.join("\n"))
}

/// Every proper ancestor of `paths` except `/`, deduplicated, in a stable order.
fn ancestors(paths: &[&Path]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        for ancestor in path.ancestors().skip(1) {
            if ancestor != Path::new("/") && !out.iter().any(|a| a == ancestor) {
                out.push(ancestor.to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The full command line: `sandbox-exec -p <profile> -D NAME=value … <python> <args>`. Paths go as they are
/// (any bytes), never through a lossy conversion.
pub fn command_line(python: &Python, scratch: &Path, args: &[String]) -> Vec<OsString> {
    let ancestors = ancestors(&[&python.executable, &python.base_prefix, scratch]);
    let mut hidden: Vec<&PathBuf> =
        python.site_packages.iter().filter(|dir| dir.starts_with(&python.base_prefix)).collect();
    hidden.dedup();
    let profile = render_profile(ancestors.len(), hidden.len());
    let mut line: Vec<OsString> = vec![SANDBOX_EXEC.into(), "-p".into(), profile.into()];
    let mut define = |name: String, value: &Path| {
        line.push("-D".into());
        let mut definition = OsString::from(format!("{name}="));
        definition.push(value);
        line.push(definition);
    };
    define("PYTHON".into(), &python.executable);
    define("PYTHON_PREFIX".into(), &python.base_prefix);
    define("SCRATCH".into(), scratch);
    for (i, ancestor) in ancestors.iter().enumerate() {
        define(format!("ANCESTOR_{i}"), ancestor);
    }
    for (i, dir) in hidden.iter().enumerate() {
        define(format!("HIDDEN_{i}"), dir);
    }
    line.push(python.executable.clone().into_os_string());
    line.extend(args.iter().map(OsString::from));
    line
}

pub struct SeatbeltBackend {
    python: ResolvedPython,
}

impl SeatbeltBackend {
    pub fn new(configured_python: String) -> Self {
        SeatbeltBackend { python: ResolvedPython::new(configured_python) }
    }

    fn unavailable_reason() -> Option<String> {
        if !cfg!(target_os = "macos") {
            return Some(
                "seatbelt needs macOS (/usr/bin/sandbox-exec); on this OS set execution.sandbox to landlock, \
                 docker or none"
                    .to_string(),
            );
        }
        if !Path::new(SANDBOX_EXEC).exists() {
            return Some(format!("{SANDBOX_EXEC} is missing; it ships with macOS, so this system is unusual"));
        }
        None
    }
}

#[async_trait]
impl SandboxBackend for SeatbeltBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Seatbelt
    }

    async fn probe(&self) -> Availability {
        if let Some(reason) = Self::unavailable_reason() {
            return Availability::Unavailable { reason };
        }
        match self.python.get().await {
            Ok(python) => Availability::Available {
                detail: format!(
                    "sandbox-exec deny-by-default profile: no network, no fork, reads of the interpreter and \
                     system libraries (installed packages hidden), writes only in scratch; inherited files \
                     closed; no parent-death signal on macOS (the runner ends when its channel closes); python \
                     {} at {}",
                    python.version,
                    python.executable.display()
                ),
            },
            Err(e) => Availability::Unavailable { reason: e.to_string() },
        }
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        if let Some(reason) = Self::unavailable_reason() {
            return Err(SpawnError::Unavailable { kind: SandboxKind::Seatbelt, reason });
        }
        let python = self.python.for_spawn(SandboxKind::Seatbelt).await?;
        let args = crate::host::runner_args();
        crate::host::spawn_confined(request, |scratch| command_line(python, scratch, &args)).await
    }

    async fn shutdown(&self) {
        crate::scratch::release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn python() -> Python {
        Python {
            executable: "/opt/py/bin/python3.11".into(),
            version: "3.11".into(),
            base_prefix: "/opt/py".into(),
            stdlib: vec![],
            site_packages: vec!["/opt/py/lib/python3.11/site-packages".into(), "/elsewhere/site-packages".into()],
            multiarch: String::new(),
        }
    }

    #[test]
    fn the_profile_denies_by_default_and_names_no_path_of_ours() {
        let profile = render_profile(2, 1);
        assert!(profile.contains("(deny default)") && profile.contains("(deny network*)"));
        assert!(profile.contains("(literal (param \"ANCESTOR_1\"))") && !profile.contains(ANCESTORS_MARK));
        // Installed packages: denied after the prefix that holds them is allowed (the last matching rule wins).
        let hidden = profile.find("(deny file-read* (subpath (param \"HIDDEN_0\")))").unwrap();
        assert!(
            hidden > profile.find("(subpath (param \"PYTHON_PREFIX\"))").unwrap() && !profile.contains(HIDDEN_MARK)
        );
        assert!(!profile.contains("/opt/py") && !profile.contains("/tmp"));
        assert!(!profile.contains("(allow process-fork)"));
    }

    #[test]
    fn paths_travel_as_parameters_with_their_ancestors() {
        let line = command_line(&python(), Path::new("/tmp/run/scratch"), &["-I".into()]);
        let line: Vec<&str> = line.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(line[0], SANDBOX_EXEC);
        assert_eq!(line[1], "-p");
        let defines: Vec<&str> =
            line.iter().zip(line.iter().skip(1)).filter(|(flag, _)| **flag == "-D").map(|(_, v)| *v).collect();
        assert_eq!(
            defines,
            [
                "PYTHON=/opt/py/bin/python3.11",
                "PYTHON_PREFIX=/opt/py",
                "SCRATCH=/tmp/run/scratch",
                "ANCESTOR_0=/opt",
                "ANCESTOR_1=/opt/py",
                "ANCESTOR_2=/opt/py/bin",
                "ANCESTOR_3=/tmp",
                "ANCESTOR_4=/tmp/run",
                // Only packages inside the prefix need hiding: nothing else outside it is readable.
                "HIDDEN_0=/opt/py/lib/python3.11/site-packages",
            ]
        );
        assert_eq!(&line[line.len() - 2..], ["/opt/py/bin/python3.11", "-I"]);
    }

    #[test]
    fn paths_that_are_not_utf8_reach_the_command_line_unchanged() {
        use std::os::unix::ffi::OsStrExt;
        let scratch = Path::new(std::ffi::OsStr::from_bytes(b"/tmp/\xff/scratch"));
        let line = command_line(&python(), scratch, &[]);
        assert!(line.iter().any(|a| a.as_bytes() == b"SCRATCH=/tmp/\xff/scratch"));
    }
}
