//! `execution.mounts`, `execution.site_packages` and `execution.preload`: host folders programs see in their
//! working directory, the interpreter's installed packages, and modules imported before a program arrives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::expand::{self, ExpandError};

/// One entry of `execution.mounts`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountConfig {
    /// The host folder: absolute once `${VAR}` is expanded; made canonical when the config is read.
    pub path: PathBuf,
    #[serde(default)]
    pub writable: bool,
}

/// A value under `execution.mounts` or `execution.preload` that cannot be used; the message starts with its key.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("execution.mounts.{0}")]
    Name(#[source] ptc_backends::BadMountName),
    #[error("execution.mounts: '{0}' and '{1}' differ only in case: they are one name on macOS; rename one")]
    SameName(String, String),
    #[error("execution.mounts.{name}.path: {source}")]
    Variable {
        name: String,
        #[source]
        source: ExpandError,
    },
    #[error("execution.mounts.{name}.path: must be an absolute path (after ${{VAR}} expansion), got '{path}'")]
    Relative { name: String, path: String },
    #[error("execution.mounts.{name}.path: cannot use '{path}': {source}")]
    Unusable {
        name: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("execution.mounts.{name}.path: '{path}' is not a directory (a mount shows a folder)")]
    NotADirectory { name: String, path: String },
    #[error(
        "execution.preload[{index}]: '{name}' is not a module name (Python identifiers joined by '.', e.g. pandas \
         or numpy.linalg)"
    )]
    Module { index: usize, name: String },
}

/// Checks the names of the mounts and the preloaded modules (the paths are checked once expanded).
pub(super) fn check_names(mounts: &BTreeMap<String, MountConfig>, preload: &[String]) -> Result<(), MountError> {
    let mut folded: BTreeMap<String, &str> = BTreeMap::new();
    for name in mounts.keys() {
        ptc_backends::check_mount_name(name).map_err(MountError::Name)?;
        if let Some(other) = folded.insert(name.to_ascii_lowercase(), name) {
            return Err(MountError::SameName(other.to_string(), name.clone()));
        }
    }
    for (index, name) in preload.iter().enumerate() {
        if !is_module_name(name) {
            return Err(MountError::Module { index, name: name.clone() });
        }
    }
    Ok(())
}

fn is_module_name(name: &str) -> bool {
    name.split('.').all(|part| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Expands `${VAR}` in each mount's path, then checks that it is an absolute path to a directory and makes it
/// canonical (sandboxes bind and name real paths).
pub(super) fn resolve_paths(
    mounts: &mut BTreeMap<String, MountConfig>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), MountError> {
    for (name, mount) in mounts.iter_mut() {
        let written = mount.path.to_string_lossy().into_owned();
        let expanded =
            expand::expand(&written, lookup).map_err(|source| MountError::Variable { name: name.clone(), source })?;
        mount.path = canonical_folder(name, Path::new(&expanded))?;
    }
    Ok(())
}

fn canonical_folder(name: &str, path: &Path) -> Result<PathBuf, MountError> {
    // Escaped: a path may hold a line break, and a config error is one line.
    let shown = || path.display().to_string().escape_debug().to_string();
    if !path.is_absolute() {
        return Err(MountError::Relative { name: name.to_string(), path: shown() });
    }
    let canonical = std::fs::canonicalize(path).map_err(|source| MountError::Unusable {
        name: name.to_string(),
        path: shown(),
        source,
    })?;
    if !canonical.is_dir() {
        return Err(MountError::NotADirectory { name: name.to_string(), path: shown() });
    }
    Ok(canonical)
}
