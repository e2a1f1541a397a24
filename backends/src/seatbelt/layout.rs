//! Where an interpreter's files really are, as the seatbelt profile must name them. Seatbelt matches the
//! resolved path of every file, so each path is made canonical (`/var/folders` is `/private/var/folders`,
//! Homebrew's `opt/python@3.12` leads into its `Cellar`); the original forms still matter, because the loader
//! and the interpreter walk them (each symlink on the way is read). Plain code over the file system, tested on
//! fake layouts of every common macOS Python.

use std::path::{Component, Path, PathBuf};

use crate::Python;

/// From a framework build's prefix (`…/Python.framework/Versions/3.12`) to its real interpreter. Its
/// `bin/python3.x` is a small launcher that re-executes this binary, which the profile would then have to
/// allow as a second program; ptc-mcp starts the real one directly.
const FRAMEWORK_INTERPRETER: &str = "Resources/Python.app/Contents/MacOS/Python";

/// Prefixes shared with much more than Python (relative to the file system's root): a prefix like these is
/// not readable as a whole, only the standard library in it.
const SHARED_PREFIXES: &[&str] = &["", "usr", "usr/local", "opt", "opt/homebrew", "opt/local", "Library", "private"];

/// The system's library trees, readable as a whole by every profile (`profiles/seatbelt.sbpl` names them;
/// a test checks): a library in one of them needs no rule of its own.
pub(crate) const SYSTEM_TREES: &[&str] = &["usr/lib", "System/Library", "System/Cryptexes/OS"];

/// Directories a conda installation keeps its metadata in: such a prefix holds every package of the
/// environment, not just Python.
const CONDA_MARKER: &str = "conda-meta";

/// The file system paths of one interpreter that a profile names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The binary to execute (canonical): the interpreter itself, never a framework's launcher.
    pub interpreter: PathBuf,
    /// Directories readable as a whole (canonical): the interpreter's prefix, or its standard library
    /// directories when the prefix is shared.
    pub trees: Vec<PathBuf>,
    /// Shared libraries the interpreter loads from outside `trees` (canonical).
    pub libraries: Vec<PathBuf>,
    /// Installed-package directories inside `trees` (canonical), denied after the trees are allowed.
    pub hidden: Vec<PathBuf>,
    /// Paths the loader and interpreter walk, in their original and canonical forms: each one and its
    /// ancestors need their metadata readable.
    pub walked: Vec<PathBuf>,
}

impl Layout {
    /// The layout of `python`, which loads `libraries` (as the loader reported them), on the file system whose
    /// root is `root` (`/`, or a test's fake root).
    pub fn of(python: &Python, libraries: &[PathBuf], root: &Path) -> Layout {
        let prefix = canonical(&python.base_prefix);
        let executable = canonical(&python.executable);
        let interpreter = interpreter_of(python);
        let trees = if is_shared(&prefix, root) {
            dedup(python.stdlib.iter().map(|dir| canonical(dir)).collect())
        } else {
            vec![prefix.clone()]
        };
        let inside_trees = |path: &Path| trees.iter().any(|tree| path.starts_with(tree));
        let system = |path: &Path| SYSTEM_TREES.iter().any(|tree| path.starts_with(root.join(tree)));
        let libraries_outside: Vec<PathBuf> = dedup(
            libraries
                .iter()
                .map(|library| canonical(library))
                .filter(|library| library.is_file() && library != &interpreter)
                .filter(|library| !inside_trees(library) && !system(library))
                .collect(),
        );
        let readable = |dir: &Path| inside_trees(dir) || system(dir);
        let hidden = dedup(python.site_packages.iter().map(|dir| canonical(dir)).filter(|dir| readable(dir)).collect());
        // A library inside the trees is read through the tree's rule; only a different original form (a
        // symlink on the way in) still has to be walked.
        let library_forms = libraries.iter().filter(|library| library.exists()).flat_map(|original| {
            let resolved = canonical(original);
            let outside = !inside_trees(&resolved) && !system(&resolved);
            [(outside || *original != resolved).then(|| original.clone()), outside.then_some(resolved)]
        });
        let originals = [&python.executable, &python.base_prefix].into_iter().chain(&python.stdlib);
        let mut walked: Vec<PathBuf> = originals.flat_map(|path| [path.clone(), canonical(path)]).collect();
        walked.extend(library_forms.flatten());
        walked.extend([executable, interpreter.clone()]);
        Layout { interpreter, trees, libraries: libraries_outside, hidden, walked: dedup(walked) }
    }
}

/// The binary that runs `python` (canonical): the interpreter a framework build's launcher would execute,
/// else the executable itself.
pub fn interpreter_of(python: &Python) -> PathBuf {
    let (executable, prefix) = (canonical(&python.executable), canonical(&python.base_prefix));
    let real = prefix.join(FRAMEWORK_INTERPRETER);
    let is_launcher = executable.parent() == Some(prefix.join("bin").as_path());
    if is_launcher && real.is_file() { canonical(&real) } else { executable }
}

/// Whether `prefix` holds more than Python: one of the well-known shared trees, a home directory, or a conda
/// installation.
fn is_shared(prefix: &Path, root: &Path) -> bool {
    let Ok(relative) = prefix.strip_prefix(canonical(root)) else { return false };
    let home = matches!(relative.parent(), Some(parent) if parent == Path::new("Users") || parent == Path::new("home"));
    SHARED_PREFIXES.iter().any(|shared| relative == Path::new(shared)) || home || prefix.join(CONDA_MARKER).is_dir()
}

/// `path` with every symlink resolved and `.`/`..` gone, as seatbelt sees it. The part that does not exist
/// (yet) is kept as written after the canonical form of the part that does.
pub fn canonical(path: &Path) -> PathBuf {
    if let Ok(resolved) = std::fs::canonicalize(path) {
        return resolved;
    }
    let normal = lexically_normal(path);
    let mut existing = normal.as_path();
    let mut missing = Vec::new();
    while let Some(parent) = existing.parent() {
        missing.push(existing.file_name().unwrap_or_default().to_os_string());
        existing = parent;
        if let Ok(resolved) = std::fs::canonicalize(existing) {
            return missing.iter().rev().fold(resolved, |path, name| path.join(name));
        }
    }
    normal
}

/// `path` without `.` components and with each `..` taking away the component before it.
fn lexically_normal(path: &Path) -> PathBuf {
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// Every proper ancestor of `paths` except the root, and the paths themselves, deduplicated and sorted.
pub fn with_ancestors(paths: &[PathBuf]) -> Vec<PathBuf> {
    let all = paths.iter().flat_map(|path| path.ancestors()).filter(|path| path.parent().is_some());
    dedup(all.map(Path::to_path_buf).collect())
}

fn dedup(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake file system root with the files and symlinks of one Python installation.
    struct Fake {
        root: tempfile::TempDir,
    }

    impl Fake {
        fn new() -> Fake {
            Fake { root: tempfile::tempdir().unwrap() }
        }

        /// The real root's path for `relative` (the tempdir's, canonical: macOS's temp dir is behind a symlink).
        fn path(&self, relative: &str) -> PathBuf {
            canonical(self.root.path()).join(relative)
        }

        fn file(&self, relative: &str) -> PathBuf {
            let path = self.path(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "").unwrap();
            path
        }

        fn dir(&self, relative: &str) -> PathBuf {
            let path = self.path(relative);
            std::fs::create_dir_all(&path).unwrap();
            path
        }

        fn link(&self, relative: &str, target: &str) -> PathBuf {
            let path = self.path(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            symlink(target, &path).unwrap();
            path
        }

        /// A framework build's version directory at `versions/X.Y` with its launcher, real interpreter,
        /// standard library and site-packages.
        fn framework(&self, version_dir: &str, version: &str) {
            self.file(&format!("{version_dir}/bin/python{version}"));
            self.file(&format!("{version_dir}/{FRAMEWORK_INTERPRETER}"));
            self.file(&format!("{version_dir}/Python"));
            self.file(&format!("{version_dir}/lib/python{version}/os.py"));
            self.dir(&format!("{version_dir}/lib/python{version}/lib-dynload"));
        }

        fn python(&self, executable: &str, prefix: &str, version: &str, site_packages: &str) -> Python {
            Python {
                executable: canonical(&self.path(executable)),
                version: version.into(),
                base_prefix: self.path(prefix),
                stdlib: vec![self.path(&format!("{prefix}/lib/python{version}"))],
                site_packages: vec![self.path(site_packages)],
                installed: vec![self.path(site_packages)],
                multiarch: String::new(),
            }
        }

        fn layout(&self, python: &Python, libraries: &[&str]) -> Layout {
            let libraries: Vec<PathBuf> = libraries.iter().map(|l| self.path(l)).collect();
            Layout::of(python, &libraries, &self.path(""))
        }
    }

    fn contains_ancestors_of(walked: &[PathBuf], path: &Path, root: &Path) -> bool {
        let needed = with_ancestors(walked);
        path.ancestors().filter(|a| a.starts_with(root)).all(|a| needed.iter().any(|n| n == a))
    }

    #[test]
    fn a_python_org_framework_runs_its_real_interpreter_with_the_prefix_readable_and_packages_hidden() {
        let fake = Fake::new();
        let prefix = "Library/Frameworks/Python.framework/Versions/3.12";
        fake.framework(prefix, "3.12");
        fake.dir(&format!("{prefix}/lib/python3.12/site-packages"));
        fake.link("usr/local/bin/python3.12", &fake.path(&format!("{prefix}/bin/python3.12")).to_string_lossy());
        let python = fake.python(
            &format!("{prefix}/bin/python3.12"),
            prefix,
            "3.12",
            &format!("{prefix}/lib/python3.12/site-packages"),
        );
        let layout = fake.layout(&python, &[&format!("{prefix}/Python")]);
        assert_eq!(layout.interpreter, fake.path(&format!("{prefix}/{FRAMEWORK_INTERPRETER}")));
        assert_eq!(layout.trees, [fake.path(prefix)]);
        // The framework's own library lies in the prefix: nothing to add.
        assert_eq!(layout.libraries, Vec::<PathBuf>::new());
        assert_eq!(layout.hidden, [fake.path(&format!("{prefix}/lib/python3.12/site-packages"))]);
        assert!(layout.walked.contains(&layout.interpreter));
    }

    #[test]
    fn homebrew_on_apple_silicon_is_named_by_its_cellar_and_walked_through_opt() {
        let fake = Fake::new();
        let cellar = "opt/homebrew/Cellar/python@3.12/3.12.7";
        let real_prefix = format!("{cellar}/Frameworks/Python.framework/Versions/3.12");
        fake.framework(&real_prefix, "3.12");
        fake.link("opt/homebrew/opt/python@3.12", "../Cellar/python@3.12/3.12.7");
        // Homebrew keeps packages outside the Cellar, behind a symlink in the framework.
        fake.dir("opt/homebrew/lib/python3.12/site-packages");
        fake.link(
            &format!("{real_prefix}/lib/python3.12/site-packages"),
            &fake.path("opt/homebrew/lib/python3.12/site-packages").to_string_lossy(),
        );
        fake.file("opt/homebrew/Cellar/openssl@3/3.4.0/lib/libssl.3.dylib");
        fake.link("opt/homebrew/opt/openssl@3", "../Cellar/openssl@3/3.4.0");
        let opt_prefix = "opt/homebrew/opt/python@3.12/Frameworks/Python.framework/Versions/3.12";
        let python = fake.python(
            &format!("{opt_prefix}/bin/python3.12"),
            opt_prefix,
            "3.12",
            &format!("{opt_prefix}/lib/python3.12/site-packages"),
        );
        let layout = fake.layout(&python, &["opt/homebrew/opt/openssl@3/lib/libssl.3.dylib"]);
        assert_eq!(layout.interpreter, fake.path(&format!("{real_prefix}/{FRAMEWORK_INTERPRETER}")));
        assert_eq!(layout.trees, [fake.path(&real_prefix)]);
        assert_eq!(layout.libraries, [fake.path("opt/homebrew/Cellar/openssl@3/3.4.0/lib/libssl.3.dylib")]);
        // The packages' real directory is outside every readable tree: nothing to hide.
        assert_eq!(layout.hidden, Vec::<PathBuf>::new());
        // Both symlinks on the way (opt/python@3.12, opt/openssl@3) need their metadata readable.
        let root = fake.path("");
        for walked in [format!("{opt_prefix}/lib/python3.12/os.py"), "opt/homebrew/opt/openssl@3/lib".into()] {
            assert!(contains_ancestors_of(&layout.walked, fake.path(&walked).parent().unwrap(), &root), "{walked}");
        }
    }

    #[test]
    fn homebrew_on_intel_lives_in_usr_local_which_is_shared_but_its_cellar_prefix_is_not() {
        let fake = Fake::new();
        let real_prefix = "usr/local/Cellar/python@3.11/3.11.9/Frameworks/Python.framework/Versions/3.11";
        fake.framework(real_prefix, "3.11");
        fake.link("usr/local/opt/python@3.11", "../Cellar/python@3.11/3.11.9");
        let opt_prefix = "usr/local/opt/python@3.11/Frameworks/Python.framework/Versions/3.11";
        let python = fake.python(
            &format!("{opt_prefix}/bin/python3.11"),
            opt_prefix,
            "3.11",
            "usr/local/lib/python3.11/site-packages",
        );
        let layout = fake.layout(&python, &[]);
        assert_eq!(layout.interpreter, fake.path(&format!("{real_prefix}/{FRAMEWORK_INTERPRETER}")));
        assert_eq!(layout.trees, [fake.path(real_prefix)]);
        assert!(layout.walked.contains(&fake.path(opt_prefix)));
    }

    #[test]
    fn the_command_line_tools_python3_framework_resolves_like_any_framework() {
        let fake = Fake::new();
        let prefix = "Library/Developer/CommandLineTools/Library/Frameworks/Python3.framework/Versions/3.9";
        fake.framework(prefix, "3.9");
        let python = fake.python(
            &format!("{prefix}/bin/python3.9"),
            prefix,
            "3.9",
            &format!("{prefix}/lib/python3.9/site-packages"),
        );
        let layout = fake.layout(&python, &[]);
        assert_eq!(layout.interpreter, fake.path(&format!("{prefix}/{FRAMEWORK_INTERPRETER}")));
        assert_eq!(layout.trees, [fake.path(prefix)]);
        // A package directory that does not exist yet is still hidden (pip may create it while we run).
        assert_eq!(layout.hidden, [fake.path(&format!("{prefix}/lib/python3.9/site-packages"))]);
    }

    #[test]
    fn pyenv_and_uv_installs_are_their_own_prefix_and_run_as_they_are() {
        for prefix in
            ["Users/me/.pyenv/versions/3.11.7", "Users/me/.local/share/uv/python/cpython-3.12.7-macos-aarch64-none"]
        {
            let fake = Fake::new();
            let version = if prefix.contains("3.11") { "3.11" } else { "3.12" };
            fake.file(&format!("{prefix}/bin/python{version}"));
            fake.link(&format!("{prefix}/bin/python3"), &format!("python{version}"));
            fake.file(&format!("{prefix}/lib/python{version}/os.py"));
            let site_packages = format!("{prefix}/lib/python{version}/site-packages");
            fake.dir(&site_packages);
            let python = fake.python(&format!("{prefix}/bin/python3"), prefix, version, &site_packages);
            let layout = fake.layout(&python, &[]);
            assert_eq!(layout.interpreter, fake.path(&format!("{prefix}/bin/python{version}")), "{prefix}");
            assert_eq!(layout.trees, [fake.path(prefix)], "{prefix}");
            assert_eq!(layout.hidden, [fake.path(&site_packages)], "{prefix}");
        }
    }

    #[test]
    fn a_shared_prefix_opens_only_the_standard_library_and_the_libraries_the_interpreter_loads() {
        let fake = Fake::new();
        fake.file("usr/local/bin/python3.12");
        fake.file("usr/local/lib/python3.12/os.py");
        fake.dir("usr/local/lib/python3.12/site-packages");
        fake.file("usr/local/lib/libpython3.12.dylib");
        fake.file("usr/local/lib/libssl.3.dylib");
        let python =
            fake.python("usr/local/bin/python3.12", "usr/local", "3.12", "usr/local/lib/python3.12/site-packages");
        let layout = fake.layout(&python, &["usr/local/lib/libpython3.12.dylib", "usr/local/lib/libssl.3.dylib"]);
        assert_eq!(layout.interpreter, fake.path("usr/local/bin/python3.12"));
        assert_eq!(layout.trees, [fake.path("usr/local/lib/python3.12")]);
        assert_eq!(
            layout.libraries,
            [fake.path("usr/local/lib/libpython3.12.dylib"), fake.path("usr/local/lib/libssl.3.dylib")]
        );
        assert_eq!(layout.hidden, [fake.path("usr/local/lib/python3.12/site-packages")]);
    }

    #[test]
    fn a_conda_environment_is_shared_too() {
        let fake = Fake::new();
        let prefix = "Users/me/miniconda3/envs/work";
        fake.file(&format!("{prefix}/bin/python3.12"));
        fake.file(&format!("{prefix}/lib/python3.12/os.py"));
        fake.dir(&format!("{prefix}/conda-meta"));
        let python = fake.python(
            &format!("{prefix}/bin/python3.12"),
            prefix,
            "3.12",
            &format!("{prefix}/lib/python3.12/site-packages"),
        );
        assert_eq!(fake.layout(&python, &[]).trees, [fake.path(&format!("{prefix}/lib/python3.12"))]);
    }

    #[test]
    fn paths_become_canonical_even_where_they_do_not_exist_yet() {
        let fake = Fake::new();
        fake.dir("private/var/folders/xy");
        fake.link("var", "private/var");
        assert_eq!(canonical(&fake.path("var/folders/xy/T/run")), fake.path("private/var/folders/xy/T/run"));
        assert_eq!(canonical(&fake.path("var/folders/./xy/../xy")), fake.path("private/var/folders/xy"));
        assert_eq!(canonical(Path::new("/nonexistent/a/../b")), PathBuf::from("/nonexistent/b"));
    }

    #[test]
    fn ancestors_stop_below_the_root_and_include_the_paths_themselves() {
        let walked = with_ancestors(&["/opt/py/bin/python3".into(), "/tmp/run".into()]);
        let expected: Vec<PathBuf> =
            ["/opt", "/opt/py", "/opt/py/bin", "/opt/py/bin/python3", "/tmp", "/tmp/run"].map(PathBuf::from).to_vec();
        assert_eq!(walked, expected);
    }
}
