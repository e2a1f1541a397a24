//! Finding the interpreter the host backends run: `execution.python`, resolved once to the real executable
//! (PATH entries can be shell shims, e.g. pyenv's, that would otherwise run with the server's environment).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

use crate::{SandboxKind, SpawnError};

/// The oldest Python the runner supports (it needs top-level await and modern asyncio), as written to users.
pub(crate) const MIN_VERSION: &str = "3.9";
const MIN_VERSION_PARTS: (u32, u32) = (3, 9);
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
/// Printed by the probed interpreter: where it and its files live, as one JSON object. `installed` are the
/// package directories `site` would put on its path (a virtualenv's, found by its `pyvenv.cfg` as `site` finds
/// it: `-S` leaves `sys.prefix` at the base interpreter's), `site_packages` every package directory of the
/// interpreter and its base, to hide.
const PROBE_SCRIPT: &str = r#"import json, os, site, sys, sysconfig
bin_dir = os.path.dirname(os.path.abspath(sys.executable))
prefix = os.path.dirname(bin_dir)
cfg = [p for p in (os.path.join(bin_dir, "pyvenv.cfg"), os.path.join(prefix, "pyvenv.cfg")) if os.path.isfile(p)]
base = site.getsitepackages()
installed = base
if cfg:
    keys = dict((k.strip().lower(), v.strip().lower()) for k, _, v in (l.partition("=") for l in open(cfg[0])))
    sys.prefix = sys.exec_prefix = prefix  # as site.venv() sets them; Debian's site then names site-packages
    installed = site.getsitepackages([prefix]) + (base if keys.get("include-system-site-packages") == "true" else [])
installed = [d for d in installed if os.path.isdir(d)]
print(json.dumps({"executable": sys.executable, "version": "%d.%d" % sys.version_info[:2],
    "base_prefix": sys.base_prefix, "stdlib": [sysconfig.get_path(n) for n in ("stdlib", "platstdlib")],
    "site_packages": [sysconfig.get_path(n) for n in ("purelib", "platlib")] + base + installed,
    "installed": installed, "multiarch": getattr(sys.implementation, "_multiarch", "")}))"#;

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PythonError {
    #[error("python interpreter '{0}' not found on PATH; install Python 3 or set execution.python to its path")]
    NotFound(String),
    #[error("python interpreter '{program}' could not be run: {why}; set execution.python to a working Python 3")]
    Broken { program: String, why: String },
    #[error("python interpreter '{program}' is {found}, but the runner needs {needed} or later")]
    TooOld { program: String, found: String, needed: String },
}

/// A resolved interpreter: the real executable, its `major.minor` version, and where its files are (what a
/// sandbox must let it read).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Python {
    pub executable: PathBuf,
    pub version: String,
    pub base_prefix: PathBuf,
    /// The standard library directories (pure and platform-specific; often the same).
    pub stdlib: Vec<PathBuf>,
    /// Where installed packages live, the base interpreter's too; sandboxes hide these (programs get the
    /// standard library only), except `installed` with `execution.site_packages`.
    pub site_packages: Vec<PathBuf>,
    /// The package directories this interpreter itself puts on its path (a virtualenv's own): what
    /// `execution.site_packages` shows programs, read-only.
    #[serde(default)]
    pub installed: Vec<PathBuf>,
    /// The multiarch triplet (e.g. `x86_64-linux-gnu`) naming the system library directory, if any.
    pub multiarch: String,
}

impl Python {
    /// The package directories a sandbox shows programs (none without `site_packages`), and those it hides.
    pub fn package_dirs(&self, site_packages: bool) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let shown: Vec<PathBuf> = if site_packages { self.installed.clone() } else { Vec::new() };
        let mut hidden: Vec<PathBuf> = Vec::new();
        for dir in &self.site_packages {
            if !shown.contains(dir) && !hidden.contains(dir) {
                hidden.push(dir.clone());
            }
        }
        (shown, hidden)
    }
}

/// Interpreter arguments that run `source` the way ptc-mcp runs every interpreter: isolated mode (no
/// environment variables, user site or script directory) and no `site` (standard library only).
pub(crate) fn isolated_args(source: &str) -> Vec<String> {
    ["-I", "-S", "-c", source].map(String::from).to_vec()
}

/// `execution.python`, resolved on first use and remembered (by each backend that runs it on the host). A
/// failure is not remembered: the next probe looks again, so installing or fixing the interpreter needs no
/// restart.
pub struct ResolvedPython {
    configured: String,
    resolved: tokio::sync::OnceCell<Python>,
}

impl ResolvedPython {
    pub fn new(configured: String) -> Self {
        ResolvedPython { configured, resolved: tokio::sync::OnceCell::new() }
    }

    pub async fn get(&self) -> Result<&Python, PythonError> {
        self.resolved.get_or_try_init(|| resolve_python(&self.configured)).await
    }

    /// The interpreter for a run of the `kind` backend, or the error its spawn reports without one.
    pub async fn for_spawn(&self, kind: SandboxKind) -> Result<&Python, SpawnError> {
        self.get().await.map_err(|e| SpawnError::Unavailable { kind, reason: e.to_string() })
    }
}

/// Resolves `configured` (a name looked up on PATH, or a path) to the real interpreter executable.
pub async fn resolve_python(configured: &str) -> Result<Python, PythonError> {
    let candidate = find_on_path(configured, std::env::var_os("PATH").as_deref())
        .ok_or_else(|| PythonError::NotFound(configured.to_string()))?;
    let broken = |why: String| PythonError::Broken { program: configured.to_string(), why };
    let run = Command::new(&candidate)
        .args(isolated_args(PROBE_SCRIPT))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(PROBE_TIMEOUT, run)
        .await
        .map_err(|_| broken(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())))?
        .map_err(|e| broken(e.to_string()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(broken(format!("{}: {}", output.status, stderr.trim())));
    }
    let mut python: Python = serde_json::from_slice(&output.stdout)
        .map_err(|e| broken(format!("unexpected answer to the start-up probe: {e}")))?;
    check_version(configured, &python.version)?;
    python.executable = std::fs::canonicalize(&python.executable)
        .map_err(|e| broken(format!("{}: {e}", python.executable.display())))?;
    // Sandboxes bind and name real paths (one gone since the probe stays as it was: nothing to show).
    for dir in &mut python.installed {
        if let Ok(real) = std::fs::canonicalize(&*dir) {
            *dir = real;
        }
    }
    Ok(python)
}

fn check_version(program: &str, version: &str) -> Result<(), PythonError> {
    if is_supported(version) {
        return Ok(());
    }
    Err(PythonError::TooOld { program: program.to_string(), found: version.to_string(), needed: MIN_VERSION.into() })
}

/// Whether `version` ("3.11" or "3.11.4") is one the runner supports; anything unreadable is not.
pub(crate) fn is_supported(version: &str) -> bool {
    let mut parts = version.split('.').map(str::parse::<u32>);
    matches!((parts.next(), parts.next()), (Some(Ok(major)), Some(Ok(minor))) if (major, minor) >= MIN_VERSION_PARTS)
}

/// A name containing a slash is a path; anything else is looked up in `path` like a shell would.
fn find_on_path(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program)).filter(|p| is_executable(p));
    }
    std::env::split_paths(path?).map(|dir| dir.join(program)).find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_looked_up_on_path_and_paths_are_taken_as_given() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("py");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = std::env::join_paths(["/nonexistent", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(find_on_path("py", Some(&path)), Some(exe.clone()));
        assert_eq!(find_on_path("missing", Some(&path)), None);
        assert_eq!(find_on_path(exe.to_str().unwrap(), None), Some(exe));
    }

    #[test]
    fn versions_below_the_minimum_are_refused() {
        assert!(check_version("p", "3.11").is_ok());
        assert!(check_version("p", "3.9").is_ok());
        assert!(matches!(check_version("p", "3.8"), Err(PythonError::TooOld { .. })));
        assert!(matches!(check_version("p", "2.7"), Err(PythonError::TooOld { .. })));
        assert!(matches!(check_version("p", "garbage"), Err(PythonError::TooOld { .. })));
        // Images report the full version.
        assert!(is_supported("3.12.1") && !is_supported("3.8.18") && !is_supported("3") && !is_supported("3.x"));
    }

    #[tokio::test]
    async fn a_missing_interpreter_names_the_fix() {
        let err = resolve_python("/nonexistent/python3").await.unwrap_err();
        assert_eq!(err, PythonError::NotFound("/nonexistent/python3".into()));
        assert!(err.to_string().contains("execution.python"));
    }
}
