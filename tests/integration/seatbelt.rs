//! The seatbelt profile, checked without a Mac: `ptc-mcp sandbox-profile seatbelt` renders it for fake
//! layouts of every common macOS Python (a fake interpreter answers the server's probes) and for this
//! machine's interpreters, and TinyScheme — the interpreter libsandbox embeds — evaluates each rendering with
//! `profiles/check/sbpl-check.scm`. Needs Debian's `tinyscheme` (`PTC_REQUIRE=tinyscheme` makes it required).
//! What only a Mac can show (that macOS accepts every rule, that programs run) is in the macOS workflow.

use std::path::{Path, PathBuf};

use crate::common::*;

/// The -D parameters the rendering lists in its header comments, and the profile text after them.
struct Rendered {
    params: Vec<(String, String)>,
    text: String,
}

impl Rendered {
    fn param(&self, name: &str) -> &str {
        self.params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name}"))
    }

    fn values(&self, prefix: &str) -> Vec<&str> {
        self.params.iter().filter(|(n, _)| n.starts_with(prefix)).map(|(_, v)| v.as_str()).collect()
    }
}

/// `ptc-mcp sandbox-profile seatbelt` with `execution.python` set to `python`.
fn render(python: &Path) -> Rendered {
    render_with(python, "")
}

/// [`render`] with more `execution` keys.
fn render_with(python: &Path, execution: &str) -> Rendered {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("execution:\n  python: {}\n{execution}", python.display())).unwrap();
    let output = std::process::Command::new(binary())
        .args(["sandbox-profile", "seatbelt", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "sandbox-profile failed: {}", String::from_utf8_lossy(&output.stderr));
    let params = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(";;   "))
        .filter_map(|l| l.split_once('='))
        .filter(|(name, _)| name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    Rendered { params, text: stdout }
}

/// How many times a check runs when TinyScheme crashes before giving its verdict.
const TINYSCHEME_ATTEMPTS: usize = 8;

/// TinyScheme's verdict on a profile with these parameters: its last line.
fn scheme_check(text: &str, params: &[(String, String)]) -> Option<String> {
    require("tinyscheme", which_tinyscheme())?;
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.sb");
    std::fs::write(&profile, text).unwrap();
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let definitions: Vec<String> = params.iter().map(|(n, v)| format!("({} . {})", quote(n), quote(v))).collect();
    let driver = format!(
        "(define *profile-file* {})\n(define *params* '({}))\n(load {})\n(check-profile)\n",
        quote(&profile.to_string_lossy()),
        definitions.join(" "),
        quote(&repo_path("profiles/check/sbpl-check.scm").to_string_lossy())
    );
    let driver_file = dir.path().join("driver.scm");
    std::fs::write(&driver_file, driver).unwrap();
    // Debian's TinyScheme 1.42 crashes in its garbage collector (a SIGSEGV marking the dump stack, seen with
    // its sources built with -g) in up to a third of the runs of the same check, depending on where the
    // address-space layout puts its cell segments: a crash is no verdict, so the check runs again.
    let mut crashes = Vec::new();
    while crashes.len() < TINYSCHEME_ATTEMPTS {
        let output = std::process::Command::new("tinyscheme").arg(&driver_file).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        eprintln!("{stdout}{stderr}");
        // The check always ends with a verdict line.
        match stdout.lines().last() {
            Some(verdict) if !verdict.is_empty() => return Some(verdict.to_string()),
            _ => crashes.push(format!("{} (stderr: {stderr:?})", output.status)),
        }
    }
    panic!("tinyscheme gave no verdict in {TINYSCHEME_ATTEMPTS} runs: {crashes:?}")
}

fn which_tinyscheme() -> Result<(), String> {
    match std::process::Command::new("tinyscheme").arg("/dev/null").output() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("tinyscheme cannot be run ({e}): apt-get install tinyscheme")),
    }
}

/// Renders and checks; `None` when TinyScheme is missing (skipped).
fn render_and_check(python: &Path) -> Option<Rendered> {
    check(render(python))
}

fn check(rendered: Rendered) -> Option<Rendered> {
    let verdict = scheme_check(&rendered.text, &rendered.params)?;
    assert!(verdict.starts_with("sbpl-check: ok"), "{verdict}\n{}", rendered.text);
    assert!(!has_marker(&rendered.text), "a marker is left:\n{}", rendered.text);
    Some(rendered)
}

/// Whether a template marker (`@NAME@`) is left in the rules (paths in comments may hold `@`: python@3.12).
fn has_marker(text: &str) -> bool {
    let rules = text.lines().filter(|l| !l.trim_start().starts_with(';'));
    rules
        .flat_map(|l| l.split('@').skip(1).step_by(2))
        .any(|word| !word.is_empty() && word.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
}

/// A fake macOS Python installation under a temp root: a shell script stands in for every executable and
/// answers the server's two probes (where its files are; which libraries it loads).
struct Fake {
    root: tempfile::TempDir,
}

impl Fake {
    fn new() -> Fake {
        Fake { root: tempfile::tempdir().unwrap() }
    }

    fn path(&self, relative: &str) -> PathBuf {
        std::fs::canonicalize(self.root.path()).unwrap().join(relative)
    }

    fn dir(&self, relative: &str) {
        std::fs::create_dir_all(self.path(relative)).unwrap();
    }

    fn link(&self, relative: &str, target: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    }

    fn file(&self, relative: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }

    /// An executable at `relative` that reports `executable`, `prefix` (both relative) and `libraries`.
    fn interpreter(&self, relative: &str, executable: &str, prefix: &str, version: &str, libraries: &[&str]) {
        let (executable, prefix) = (self.path(executable), self.path(prefix));
        let stdlib = prefix.join(format!("lib/python{version}"));
        let probe = serde_json::json!({
            "executable": executable, "version": version, "base_prefix": prefix,
            "stdlib": [stdlib, stdlib], "site_packages": [stdlib.join("site-packages"), stdlib.join("site-packages")],
            "installed": [stdlib.join("site-packages")],
            "multiarch": "darwin",
        });
        let hex: Vec<String> = libraries
            .iter()
            .map(|l| self.path(l).to_string_lossy().bytes().map(|b| format!("{b:02x}")).collect())
            .collect();
        let script = format!(
            "#!/bin/sh\ncase \"$*\" in\n*ptc-libraries*) printf 'ptc-libraries\\n{}' ;;\n*) printf '%s\\n' '{}' ;;\nesac\n",
            hex.iter().map(|h| format!("{h}\\n")).collect::<String>(),
            probe
        );
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        self.file(&format!("{}/os.py", stdlib.strip_prefix(self.path("")).unwrap().display()));
    }

    /// A framework build at `prefix` (its launcher and its real interpreter both answer).
    fn framework(&self, prefix: &str, reported_prefix: &str, version: &str, libraries: &[&str]) -> PathBuf {
        let launcher = format!("{reported_prefix}/bin/python{version}");
        for executable in
            [format!("{prefix}/bin/python{version}"), format!("{prefix}/Resources/Python.app/Contents/MacOS/Python")]
        {
            self.interpreter(&executable, &launcher, reported_prefix, version, libraries);
        }
        self.path(&launcher)
    }
}

#[apply(integration_test!)]
async fn a_python_org_framework_profile_runs_the_real_interpreter_and_evaluates_in_tinyscheme() {
    let fake = Fake::new();
    let prefix = "Library/Frameworks/Python.framework/Versions/3.12";
    let launcher = fake.framework(prefix, prefix, "3.12", &[]);
    fake.dir(&format!("{prefix}/lib/python3.12/site-packages"));
    let Some(rendered) = render_and_check(&launcher) else { return };
    assert_eq!(
        rendered.param("PYTHON"),
        fake.path(&format!("{prefix}/Resources/Python.app/Contents/MacOS/Python")).to_str().unwrap()
    );
    assert_eq!(rendered.values("TREE_"), [fake.path(prefix).to_str().unwrap()]);
    assert_eq!(
        rendered.values("HIDDEN_"),
        [fake.path(&format!("{prefix}/lib/python3.12/site-packages")).to_str().unwrap()]
    );
    assert!(rendered.text.contains("(allow process-exec (literal (param \"PYTHON\")))"));
}

#[apply(integration_test!)]
async fn a_homebrew_profile_names_the_cellar_walks_the_opt_symlinks_and_reads_other_kegs_libraries() {
    for brew in ["opt/homebrew", "usr/local"] {
        let fake = Fake::new();
        let cellar_prefix = format!("{brew}/Cellar/python@3.12/3.12.7/Frameworks/Python.framework/Versions/3.12");
        let opt_prefix = format!("{brew}/opt/python@3.12/Frameworks/Python.framework/Versions/3.12");
        fake.file(&format!("{brew}/Cellar/openssl@3/3.4.0/lib/libssl.3.dylib"));
        fake.link(&format!("{brew}/opt/openssl@3"), "../Cellar/openssl@3/3.4.0");
        fake.link(&format!("{brew}/opt/python@3.12"), "../Cellar/python@3.12/3.12.7");
        let ssl = format!("{brew}/opt/openssl@3/lib/libssl.3.dylib");
        fake.framework(&cellar_prefix, &opt_prefix, "3.12", &[&ssl]);
        let Some(rendered) = render_and_check(&fake.path(&format!("{opt_prefix}/bin/python3.12"))) else { return };
        let real = fake.path(&cellar_prefix);
        assert_eq!(rendered.param("PYTHON"), real.join("Resources/Python.app/Contents/MacOS/Python").to_str().unwrap());
        assert_eq!(rendered.values("TREE_"), [real.to_str().unwrap()], "{brew}");
        assert_eq!(
            rendered.values("LIBRARY_"),
            [fake.path(&format!("{brew}/Cellar/openssl@3/3.4.0/lib/libssl.3.dylib")).to_str().unwrap()]
        );
        let metadata = rendered.values("METADATA_");
        for symlink in [format!("{brew}/opt/python@3.12"), format!("{brew}/opt/openssl@3")] {
            assert!(metadata.contains(&fake.path(&symlink).to_str().unwrap()), "{symlink} not walkable: {metadata:?}");
        }
    }
}

#[apply(integration_test!)]
async fn the_command_line_tools_pyenv_and_uv_profiles_evaluate_in_tinyscheme() {
    let fake = Fake::new();
    let clt = "Library/Developer/CommandLineTools/Library/Frameworks/Python3.framework/Versions/3.9";
    let Some(rendered) = render_and_check(&fake.framework(clt, clt, "3.9", &[])) else { return };
    assert!(
        rendered.param("PYTHON").ends_with("Python3.framework/Versions/3.9/Resources/Python.app/Contents/MacOS/Python")
    );
    for prefix in
        ["Users/me/.pyenv/versions/3.11.7", "Users/me/.local/share/uv/python/cpython-3.12.7-macos-aarch64-none"]
    {
        let executable = format!("{prefix}/bin/python3");
        fake.interpreter(&executable, &executable, prefix, "3.11", &[]);
        let Some(rendered) = render_and_check(&fake.path(&executable)) else { return };
        assert_eq!(rendered.param("PYTHON"), fake.path(&executable).to_str().unwrap());
        assert_eq!(rendered.values("TREE_"), [fake.path(prefix).to_str().unwrap()]);
    }
}

/// A prefix that holds more than Python (a conda environment here; `/usr/local` and the like in unit tests,
/// which can fake the file system's root) opens only its standard library and the libraries it loads.
#[apply(integration_test!)]
async fn a_shared_prefix_profile_opens_only_the_standard_library() {
    let fake = Fake::new();
    let env = "Users/me/miniconda3/envs/work";
    fake.dir(&format!("{env}/conda-meta"));
    fake.file(&format!("{env}/lib/libssl.3.dylib"));
    let python = format!("{env}/bin/python3.12");
    fake.interpreter(&python, &python, env, "3.12", &[&format!("{env}/lib/libssl.3.dylib")]);
    let Some(rendered) = render_and_check(&fake.path(&python)) else { return };
    assert_eq!(rendered.values("TREE_"), [fake.path(&format!("{env}/lib/python3.12")).to_str().unwrap()]);
    assert_eq!(rendered.values("LIBRARY_"), [fake.path(&format!("{env}/lib/libssl.3.dylib")).to_str().unwrap()]);
}

/// The same with this machine's real interpreters (their libraries found by the real probe).
#[apply(integration_test!)]
async fn this_machines_interpreters_profiles_evaluate_in_tinyscheme() {
    let home = std::env::var("HOME").unwrap_or_default();
    let mut pythons: Vec<PathBuf> = vec!["/usr/bin/python3".into()];
    if let Ok(versions) = std::fs::read_dir(format!("{home}/.pyenv/versions")) {
        // The runner needs 3.9 or later (older ones are refused, as the CLI says).
        let supported = |name: &str| name.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m >= 9);
        let versions = versions.flatten().filter(|v| supported(&v.file_name().to_string_lossy()));
        pythons.extend(versions.map(|v| v.path().join("bin/python3")));
    }
    for python in pythons.iter().filter(|p| p.exists()) {
        let Some(rendered) = render_and_check(python) else { return };
        assert!(!rendered.values("TREE_").is_empty(), "{}", python.display());
    }
}

/// The check itself can fail: the shapes of the profile's old bugs are caught.
#[apply(integration_test!)]
async fn the_check_rejects_a_broken_comment_an_unknown_rule_and_a_missing_parameter() {
    let params = vec![("PYTHON".to_string(), "/usr/bin/python3".to_string())];
    let cases = [
        // A comment's marker replaced by rules: the rest of the comment became bare words.
        "(version 1)\n(deny default)\n;; one rule a line\n  (literal (param \"PYTHON\")) is replaced\n",
        "(version 1)\n(deny default)\n(allow file-read-everything (literal (param \"PYTHON\")))\n",
        "(version 1)\n(deny default)\n(allow file-read* (literal (param \"PYTHON\")) (subpath (param \"SCRATCH\")))\n",
        "(deny default)\n(version 1)\n(allow process-exec (literal (param \"PYTHON\")))\n",
        "(version 1)\n(deny default)\n(allow process-exec (literal \"relative/path\"))\n",
    ];
    for case in cases {
        let Some(verdict) = scheme_check(case, &params) else { return };
        assert!(!verdict.starts_with("sbpl-check: ok"), "not caught: {case}");
    }
    let unused = vec![("PYTHON".to_string(), "/p".to_string()), ("EXTRA".to_string(), "/e".to_string())];
    let Some(verdict) =
        scheme_check("(version 1)\n(deny default)\n(allow process-exec (literal (param \"PYTHON\")))\n", &unused)
    else {
        return;
    };
    assert_eq!(verdict, "sbpl-check: 1 problem(s)");
}

/// With `execution.mounts` and `execution.site_packages`: each folder and the interpreter's package
/// directories are parameters with rules of their own, and the profile still evaluates.
#[apply(integration_test!)]
async fn mounts_and_shown_packages_are_parameters_and_the_profile_evaluates_in_tinyscheme() {
    let (data, out) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let fake = Fake::new();
    let prefix = "Users/me/.pyenv/versions/3.12.7";
    fake.interpreter(&format!("{prefix}/bin/python3.12"), &format!("{prefix}/bin/python3.12"), prefix, "3.12", &[]);
    fake.dir(&format!("{prefix}/lib/python3.12/site-packages"));
    let execution = format!(
        "  site_packages: true\n  mounts:\n    data: {{path: {}}}\n    out: {{path: {}, writable: true}}\n",
        data.path().display(),
        out.path().display()
    );
    let rendered = render_with(&fake.path(&format!("{prefix}/bin/python3.12")), &execution);
    let Some(rendered) = check(rendered) else { return };
    let real = |dir: &tempfile::TempDir| std::fs::canonicalize(dir.path()).unwrap().display().to_string();
    assert_eq!(rendered.values("MOUNT_RO_"), [real(&data)]);
    assert_eq!(rendered.values("MOUNT_RW_"), [real(&out)]);
    let site_packages = fake.path(&format!("{prefix}/lib/python3.12/site-packages")).display().to_string();
    assert_eq!(rendered.values("PACKAGES_"), [site_packages.as_str()]);
    assert!(rendered.values("HIDDEN_").is_empty(), "shown, so not hidden");
}
