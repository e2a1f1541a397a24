//! What the landlock helper sets up for one runner, computed in the server (plain code, tested everywhere)
//! and handed to the helper as JSON: which host paths the interpreter needs (mirrored read-only into an
//! otherwise empty root), the scratch directory, limits, and the command to exec.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Limits, Mount, Python};

/// The id the program runs as inside its user namespace.
pub const SANDBOX_ID: u32 = 1000;

/// Paths travel in the policy's JSON as text when they are UTF-8 and as their bytes otherwise (a `TMPDIR`
/// or an interpreter anywhere on a Unix file system).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The program's working directory, `HOME` and `TMPDIR`: a sized tmpfs inside the sandbox.
    #[serde(with = "host_path")]
    pub scratch: PathBuf,
    /// Host paths bound read-only at the same path in the new root.
    pub binds: Vec<Bind>,
    /// Symbolic links recreated in the new root (e.g. `/lib -> usr/lib` on merged-/usr systems).
    #[serde(with = "host_path::pairs")]
    pub symlinks: Vec<(PathBuf, PathBuf)>,
    /// Directories hidden under an empty read-only tmpfs (installed packages: standard library only).
    #[serde(with = "host_path::list")]
    pub hidden: Vec<PathBuf>,
    /// The interpreter and its arguments; exec'd last, and the only exec allowed.
    #[serde(with = "host_path")]
    pub program: PathBuf,
    pub args: Vec<String>,
    pub limits: Limits,
    pub cpu_seconds: u64,
    /// Without user namespaces, run degraded (Landlock and seccomp only) instead of refusing.
    pub allow_degraded: bool,
    /// The run's cgroup, which the helper moves itself into first.
    #[serde(default)]
    pub cgroup: Option<Cgroup>,
    /// `execution.mounts`: host folders shown as `scratch/NAME` (binds, or symlinks when degraded).
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Exec the zygote (`args` are its runner options) in place of confining this process and exec'ing a
    /// runner: its forks confine themselves (zygote.py).
    #[serde(default)]
    pub zygote: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroup {
    #[serde(with = "host_path")]
    pub dir: PathBuf,
    /// Its `pids.max` is the run's task limit.
    pub bounds_tasks: bool,
    /// Its `memory.max` is the run's memory limit (no memory rlimits then).
    pub bounds_memory: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    #[serde(with = "host_path")]
    pub path: PathBuf,
    pub access: BindAccess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindAccess {
    /// Read and execute (the interpreter and the libraries it maps).
    Exec,
    /// Read only (data such as time-zone files).
    Read,
    /// A device node (`/dev/null` and the like): opened for reading, and for writing if `write`; bound
    /// read-only like everything else, which leaves the device itself writable but its mode and times not.
    Device { write: bool },
}

/// System directories that may hold the loader and the libraries the interpreter links against.
fn library_candidates(multiarch: &str) -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/lib"), PathBuf::from("/lib64"), PathBuf::from("/usr/lib64")];
    if !multiarch.is_empty() {
        dirs.push(Path::new("/lib").join(multiarch));
        dirs.push(Path::new("/usr/lib").join(multiarch));
    }
    dirs.push(PathBuf::from("/usr/local/lib"));
    dirs
}

const DEVICES: [(&str, BindAccess); 4] = [
    ("/dev/null", BindAccess::Device { write: true }),
    // Read-only: a writable shared mapping of /dev/zero would be shared memory outside RLIMIT_DATA.
    ("/dev/zero", BindAccess::Device { write: false }),
    ("/dev/urandom", BindAccess::Device { write: false }),
    ("/dev/random", BindAccess::Device { write: false }),
];

/// The time-zone database the standard library's `zoneinfo` reads.
const ZONEINFO: &str = "/usr/share/zoneinfo";

/// Prefixes shared with the whole system: binding them whole would expose every installed program.
fn is_system_prefix(prefix: &Path) -> bool {
    ["/", "/usr", "/usr/local"].iter().any(|p| prefix == Path::new(p))
}

/// How a host path looks, as far as the plan cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathKind {
    Missing,
    /// A symlink, with its target as written.
    Symlink(PathBuf),
    /// An existing path whose canonical form is this path itself.
    Canonical,
    /// An existing path reached through a symlinked parent (another entry covers it).
    Aliased,
}

pub fn inspect(path: &Path) -> PathKind {
    match std::fs::symlink_metadata(path) {
        Err(_) => PathKind::Missing,
        Ok(meta) if meta.file_type().is_symlink() => {
            std::fs::read_link(path).map(PathKind::Symlink).unwrap_or(PathKind::Missing)
        }
        Ok(_) if std::fs::canonicalize(path).ok().as_deref() == Some(path) => PathKind::Canonical,
        Ok(_) => PathKind::Aliased,
    }
}

pub struct PlanRequest<'a> {
    pub python: &'a Python,
    pub scratch: PathBuf,
    pub args: Vec<String>,
    pub limits: Limits,
    pub cpu_seconds: u64,
    pub allow_degraded: bool,
    pub mounts: &'a [Mount],
    /// `execution.site_packages`: the interpreter's own package directories are bound read-only, not hidden.
    pub site_packages: bool,
}

/// Plans the sandbox for `request`, looking at host paths with `inspect_path`.
pub fn plan(request: PlanRequest, inspect_path: &dyn Fn(&Path) -> PathKind) -> Policy {
    let python = request.python;
    let mut binds: Vec<Bind> = Vec::new();
    let mut symlinks = Vec::new();
    let add = |path: PathBuf, access: BindAccess, binds: &mut Vec<Bind>| {
        let covered = binds.iter().any(|b| path.starts_with(&b.path));
        if !covered && inspect_path(&path) == PathKind::Canonical {
            binds.retain(|b| !b.path.starts_with(&path));
            binds.push(Bind { path, access });
        }
    };
    if is_system_prefix(&python.base_prefix) {
        add(python.executable.clone(), BindAccess::Exec, &mut binds);
        for dir in &python.stdlib {
            add(dir.clone(), BindAccess::Exec, &mut binds);
        }
    } else {
        add(python.base_prefix.clone(), BindAccess::Exec, &mut binds);
        add(python.executable.clone(), BindAccess::Exec, &mut binds);
    }
    for dir in library_candidates(&python.multiarch) {
        match inspect_path(&dir) {
            PathKind::Symlink(target) => symlinks.push((dir, target)),
            PathKind::Canonical => add(dir, BindAccess::Exec, &mut binds),
            PathKind::Missing | PathKind::Aliased => {}
        }
    }
    add(PathBuf::from(ZONEINFO), BindAccess::Read, &mut binds);
    for (device, access) in DEVICES {
        add(PathBuf::from(device), access, &mut binds);
    }
    let (shown, hidden_packages) = python.package_dirs(request.site_packages);
    for dir in shown {
        // Their extension modules and the libraries beside them (numpy.libs) are mapped executable.
        add(dir, BindAccess::Exec, &mut binds);
    }
    let mut hidden: Vec<PathBuf> = Vec::new();
    for dir in &hidden_packages {
        let visible = binds.iter().any(|b| dir.starts_with(&b.path)) && inspect_path(dir) == PathKind::Canonical;
        if visible && !hidden.contains(dir) {
            hidden.push(dir.clone());
        }
    }
    Policy {
        scratch: request.scratch,
        binds,
        symlinks,
        hidden,
        program: python.executable.clone(),
        args: request.args,
        limits: request.limits,
        cpu_seconds: request.cpu_seconds,
        allow_degraded: request.allow_degraded,
        cgroup: None,
        mounts: request.mounts.to_vec(),
        zygote: false,
    }
}

/// Serde for paths: a JSON string when UTF-8, else an array of the path's bytes.
mod host_path {
    use std::ffi::OsString;
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// One path in either form.
    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr<'a> {
        Text(std::borrow::Cow<'a, str>),
        Bytes(Vec<u8>),
    }

    impl<'a> Repr<'a> {
        fn of(path: &'a Path) -> Repr<'a> {
            match path.to_str() {
                Some(text) => Repr::Text(text.into()),
                None => Repr::Bytes(path.as_os_str().as_bytes().to_vec()),
            }
        }

        fn path(self) -> PathBuf {
            match self {
                Repr::Text(text) => PathBuf::from(text.into_owned()),
                Repr::Bytes(bytes) => PathBuf::from(OsString::from_vec(bytes)),
            }
        }
    }

    pub fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        Repr::of(path).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
        Repr::deserialize(deserializer).map(Repr::path)
    }

    pub mod list {
        use super::*;

        pub fn serialize<S: Serializer>(paths: &[PathBuf], serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(paths.iter().map(|p| Repr::of(p)))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<PathBuf>, D::Error> {
            Ok(Vec::<Repr>::deserialize(deserializer)?.into_iter().map(Repr::path).collect())
        }
    }

    pub mod pairs {
        use super::*;

        pub fn serialize<S: Serializer>(pairs: &[(PathBuf, PathBuf)], serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_seq(pairs.iter().map(|(a, b)| (Repr::of(a), Repr::of(b))))
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<(PathBuf, PathBuf)>, D::Error> {
            let pairs = Vec::<(Repr, Repr)>::deserialize(deserializer)?;
            Ok(pairs.into_iter().map(|(a, b)| (a.path(), b.path())).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn python(prefix: &str, executable: &str) -> Python {
        Python {
            executable: executable.into(),
            version: "3.11".into(),
            base_prefix: prefix.into(),
            stdlib: vec![format!("{prefix}/lib/python3.11").into(), format!("{prefix}/lib/python3.11").into()],
            site_packages: vec![format!("{prefix}/lib/python3.11/site-packages").into()],
            installed: vec![format!("{prefix}/lib/python3.11/site-packages").into()],
            multiarch: "x86_64-linux-gnu".into(),
        }
    }

    /// A merged-/usr Debian host: /lib and /lib64 are symlinks into /usr.
    fn debian(path: &Path) -> PathKind {
        let links: BTreeMap<&str, &str> = [("/lib", "usr/lib"), ("/lib64", "usr/lib64")].into();
        if let Some(target) = links.get(path.to_str().unwrap()) {
            return PathKind::Symlink(target.into());
        }
        if path.starts_with("/lib/") {
            return PathKind::Aliased;
        }
        match path.to_str().unwrap() {
            "/usr/local/lib" | "/dev/random" => PathKind::Missing,
            _ => PathKind::Canonical,
        }
    }

    fn request(python: &Python) -> PlanRequest<'_> {
        PlanRequest {
            python,
            scratch: "/tmp/run/scratch".into(),
            args: vec!["-I".into()],
            limits: Limits::default(),
            cpu_seconds: 121,
            allow_degraded: false,
            mounts: &[],
            site_packages: false,
        }
    }

    fn bound(policy: &Policy) -> Vec<(&str, BindAccess)> {
        policy.binds.iter().map(|b| (b.path.to_str().unwrap(), b.access)).collect()
    }

    #[test]
    fn a_private_prefix_is_bound_whole_with_the_system_libraries() {
        let py = python("/opt/py", "/opt/py/bin/python3.11");
        let policy = plan(request(&py), &debian);
        assert_eq!(
            bound(&policy),
            [
                ("/opt/py", BindAccess::Exec),
                ("/usr/lib64", BindAccess::Exec),
                ("/usr/lib/x86_64-linux-gnu", BindAccess::Exec),
                ("/usr/share/zoneinfo", BindAccess::Read),
                ("/dev/null", BindAccess::Device { write: true }),
                ("/dev/zero", BindAccess::Device { write: false }),
                ("/dev/urandom", BindAccess::Device { write: false }),
            ]
        );
        assert_eq!(policy.symlinks, [("/lib".into(), "usr/lib".into()), ("/lib64".into(), "usr/lib64".into())]);
        assert_eq!(policy.hidden, [PathBuf::from("/opt/py/lib/python3.11/site-packages")]);
        assert_eq!(policy.program, PathBuf::from("/opt/py/bin/python3.11"));
    }

    #[test]
    fn a_system_python_gets_only_its_executable_and_standard_library() {
        let py = python("/usr", "/usr/bin/python3.11");
        let policy = plan(request(&py), &debian);
        let paths: Vec<&str> = bound(&policy).into_iter().map(|(p, _)| p).collect();
        assert!(paths.contains(&"/usr/bin/python3.11") && paths.contains(&"/usr/lib/python3.11"), "{paths:?}");
        assert!(!paths.contains(&"/usr") && !paths.contains(&"/usr/bin"), "never the whole system prefix: {paths:?}");
    }

    #[test]
    fn shown_packages_are_bound_read_only_and_no_longer_hidden_and_mounts_travel_in_the_policy() {
        let mut py = python("/opt/py", "/opt/py/bin/python3.11");
        py.installed = vec!["/work/venv/lib/python3.11/site-packages".into()];
        py.site_packages.push("/work/venv/lib/python3.11/site-packages".into());
        let hidden = plan(request(&py), &debian);
        assert_eq!(hidden.hidden, [PathBuf::from("/opt/py/lib/python3.11/site-packages")]);
        assert!(!bound(&hidden).iter().any(|(path, _)| path.starts_with("/work")), "the venv stays out");
        let mounts = [Mount { name: "data".into(), path: "/home/me/data".into(), writable: true }];
        let shown = plan(PlanRequest { site_packages: true, mounts: &mounts, ..request(&py) }, &debian);
        assert!(bound(&shown).contains(&("/work/venv/lib/python3.11/site-packages", BindAccess::Exec)));
        assert_eq!(shown.hidden, [PathBuf::from("/opt/py/lib/python3.11/site-packages")], "the base's stay hidden");
        assert_eq!(shown.mounts, mounts);
        let json = serde_json::to_string(&shown).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), shown);
    }

    #[test]
    fn the_policy_round_trips_through_json() {
        let py = python("/opt/py", "/opt/py/bin/python3.11");
        let policy = plan(request(&py), &debian);
        let json = serde_json::to_string(&policy).unwrap();
        assert!(json.contains("\"scratch\":\"/tmp/run/scratch\""), "UTF-8 paths stay readable: {json}");
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), policy);
    }

    /// A `TMPDIR` (or any host path) need not be UTF-8; it used to panic the request.
    #[test]
    fn paths_that_are_not_utf8_round_trip_too() {
        use std::os::unix::ffi::OsStrExt;
        let odd = |path: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(path));
        let py = python("/opt/py", "/opt/py/bin/python3.11");
        let mut policy = plan(PlanRequest { scratch: odd(b"/tmp/\xff\xfe/run/scratch"), ..request(&py) }, &debian);
        policy.hidden.push(odd(b"/opt/\xe9"));
        policy.symlinks.push((odd(b"/l\xff"), odd(b"t\xff")));
        let json = serde_json::to_string(&policy).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), policy);
    }
}
