//! `execution.mounts`: host folders a program sees as `./NAME` in its working directory, read-only unless
//! writable. Each backend shows them its own way (a bind under `landlock` and `docker`, a symlink and a profile
//! rule under `seatbelt`, a symlink under `none`); what they share is here.

use std::path::{Path, PathBuf};

/// One host folder shown to programs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    /// Its name in the working directory: a plain name (see [`check_name`]).
    pub name: String,
    /// The folder: absolute, canonical, a directory (checked when the config is read).
    pub path: PathBuf,
    pub writable: bool,
}

/// The longest mount name.
pub const MAX_NAME: usize = 64;

/// Why a mount name is not a plain one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a plain name: use 1 to {MAX_NAME} letters, digits, '_', '-' and '.', starting with a letter, a \
     digit or '_' (no '/', no '..', nothing hidden)"
)]
pub struct BadName(pub String);

/// A mount's name is one plain path component of ASCII letters, digits, `_`, `-` and `.`, not starting with
/// `.` (hidden, `.`, `..`) or `-` (read as an option by tools): it can name nothing but an entry of the working
/// directory, and nothing the runner or the interpreter keeps there.
pub fn check_name(name: &str) -> Result<(), BadName> {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let first_ok = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && name.len() <= MAX_NAME && name.chars().all(plain) {
        Ok(())
    } else {
        Err(BadName(name.escape_debug().to_string()))
    }
}

/// Makes each mount `./NAME` in `scratch` as a symlink to its folder (where no bind is made: `none`, `seatbelt`,
/// landlock without namespaces). What the link may reach is the sandbox's business.
pub(crate) fn link_into(scratch: &Path, mounts: &[Mount]) -> std::io::Result<()> {
    for mount in mounts {
        std::os::unix::fs::symlink(&mount.path, scratch.join(&mount.name)).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("linking execution.mounts.{} into the scratch directory: {e}", mount.name),
            )
        })?;
    }
    Ok(())
}

/// What a probe's detail adds for `mounts` (nothing without any): `; mounts ./data read-only, ./out writable`.
pub(crate) fn describe(mounts: &[Mount]) -> String {
    if mounts.is_empty() {
        return String::new();
    }
    let each: Vec<String> =
        mounts.iter().map(|m| format!("./{} {}", m.name, if m.writable { "writable" } else { "read-only" })).collect();
    format!("; mounts {}", each.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_are_mount_names() {
        for good in ["data", "Data_2", "_x", "reports-2026", "a.b", "9"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        let long = "x".repeat(MAX_NAME + 1);
        for bad in ["", ".", "..", ".hidden", "a/b", "/abs", "../up", "-rf", "sp ace", "é", "a\0b", long.as_str()] {
            assert_eq!(check_name(bad), Err(BadName(bad.escape_debug().to_string())), "{bad:?}");
        }
    }

    #[test]
    fn a_probe_names_each_mount_and_how_it_is_shown() {
        let mount = |name: &str, writable| Mount { name: name.into(), path: "/x".into(), writable };
        assert_eq!(describe(&[]), "");
        assert_eq!(describe(&[mount("data", false), mount("out", true)]), "; mounts ./data read-only, ./out writable");
    }

    #[test]
    fn mounts_are_linked_into_scratch_by_name() {
        let scratch = tempfile::tempdir().unwrap();
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("f.txt"), "hi").unwrap();
        let mount = Mount { name: "data".into(), path: folder.path().to_path_buf(), writable: false };
        link_into(scratch.path(), std::slice::from_ref(&mount)).unwrap();
        assert_eq!(std::fs::read_link(scratch.path().join("data")).unwrap(), folder.path());
        assert_eq!(std::fs::read_to_string(scratch.path().join("data/f.txt")).unwrap(), "hi");
        let again = link_into(scratch.path(), &[mount]).unwrap_err();
        assert!(again.to_string().contains("execution.mounts.data"), "{again}");
    }
}
