//! Finding the interpreter the host backends run: `execution.python`, resolved once to the real executable
//! (PATH entries can be shell shims, e.g. pyenv's, that would otherwise run with the server's environment).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// The oldest Python the runner supports (it needs top-level await and modern asyncio).
const MIN_VERSION: (u32, u32) = (3, 9);
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
/// Printed by the probed interpreter: its real executable and its version.
const PROBE_SCRIPT: &str = "import sys; print(sys.executable); print('%d.%d' % sys.version_info[:2])";

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PythonError {
    #[error("python interpreter '{0}' not found on PATH; install Python 3 or set execution.python to its path")]
    NotFound(String),
    #[error("python interpreter '{program}' could not be run: {why}; set execution.python to a working Python 3")]
    Broken { program: String, why: String },
    #[error("python interpreter '{program}' is {found}, but the runner needs {needed} or later")]
    TooOld { program: String, found: String, needed: String },
}

/// A resolved interpreter: the real executable and its `major.minor` version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Python {
    pub executable: PathBuf,
    pub version: String,
}

/// Resolves `configured` (a name looked up on PATH, or a path) to the real interpreter executable.
pub async fn resolve_python(configured: &str) -> Result<Python, PythonError> {
    let candidate = find_on_path(configured, std::env::var_os("PATH").as_deref())
        .ok_or_else(|| PythonError::NotFound(configured.to_string()))?;
    let broken = |why: String| PythonError::Broken { program: configured.to_string(), why };
    let run = Command::new(&candidate)
        .args(["-I", "-S", "-c", PROBE_SCRIPT])
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
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    let (Some(executable), Some(version)) = (lines.next(), lines.next()) else {
        return Err(broken("it printed no executable path".to_string()));
    };
    check_version(configured, version)?;
    let executable = std::fs::canonicalize(executable).map_err(|e| broken(format!("{executable}: {e}")))?;
    Ok(Python { executable, version: version.to_string() })
}

fn check_version(program: &str, version: &str) -> Result<(), PythonError> {
    let parsed = version.split_once('.').and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
    match parsed {
        Some(found) if found >= MIN_VERSION => Ok(()),
        _ => Err(PythonError::TooOld {
            program: program.to_string(),
            found: version.to_string(),
            needed: format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1),
        }),
    }
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
    }

    #[tokio::test]
    async fn a_missing_interpreter_names_the_fix() {
        let err = resolve_python("/nonexistent/python3").await.unwrap_err();
        assert_eq!(err, PythonError::NotFound("/nonexistent/python3".into()));
        assert!(err.to_string().contains("execution.python"));
    }
}
