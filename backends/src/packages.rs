//! `execution.site_packages` and `execution.preload`: the interpreter's installed packages on the runner's
//! path, and modules the runner imports before it says `ready`. Both reach the runner as one JSON argument
//! after its source, read by `packages.py` (the runner's first part, also run alone by the sandbox probes).

use std::path::PathBuf;

use crate::Mount;

/// The runner's part that reads the options; the probes run it alone.
pub const PACKAGES_SOURCE: &str = include_str!("packages.py");
/// How a probe reports a preload that failed (stderr), before the reason.
const PROBE_FAILURE_PREFIX: &str = "ptc-preload: ";

/// `execution.site_packages` and `execution.preload`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packages {
    /// Show programs the interpreter's installed packages (read-only).
    pub site_packages: bool,
    /// Modules every runner imports before its program arrives.
    pub preload: Vec<String>,
}

impl Packages {
    /// Whether anything is asked: without, runners start exactly as they always did.
    pub fn is_empty(&self) -> bool {
        !self.site_packages && self.preload.is_empty()
    }

    /// The runner's options argument for these package directories (`site`, shown only with
    /// `site_packages`) and the names of `mounts` (whose files `attach()` takes), or none when nothing is asked.
    /// A directory whose path is not UTF-8 cannot be named in it: the error says which.
    pub(crate) fn runner_argument(&self, site: &[PathBuf], mounts: &[Mount]) -> Result<Option<String>, String> {
        let site: Vec<&str> = if self.site_packages {
            site.iter()
                .map(|dir| {
                    dir.to_str().ok_or_else(|| {
                        format!("execution.site_packages: the package directory {} is not UTF-8", dir.display())
                    })
                })
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        if site.is_empty() && self.preload.is_empty() && mounts.is_empty() {
            return Ok(None);
        }
        let mut options = serde_json::json!({"site": site, "preload": self.preload});
        if !mounts.is_empty() {
            options["mounts"] = mounts.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().into();
        }
        Ok(Some(options.to_string()))
    }
}

impl Packages {
    /// What a probe's detail adds (nothing without packages): the package directories shown, and the preloads.
    pub(crate) fn describe(&self, site: &[PathBuf]) -> String {
        let mut said = String::new();
        if self.site_packages {
            let dirs: Vec<String> = site.iter().map(|dir| dir.display().to_string()).collect();
            said.push_str(&format!("; installed packages shown read-only ({})", dirs.join(", ")));
        }
        if !self.preload.is_empty() {
            said.push_str(&format!("; preloaded: {}", self.preload.join(", ")));
        }
        said
    }

    /// Interpreter arguments of a probe that runs `body`: after the packages step and with its options when
    /// anything is asked, else `body` alone (the probe as it always was).
    pub(crate) fn probe_args(&self, site: &[PathBuf], body: &str) -> Result<Vec<String>, String> {
        Ok(match self.runner_argument(site, &[])? {
            None => crate::python::isolated_args(body),
            Some(options) => {
                let mut args = crate::python::isolated_args(&probe_source(body));
                args.push(options);
                args
            }
        })
    }
}

/// A probe's source: the packages step (exits with the reason on stderr if a preload fails), then `body`.
pub(crate) fn probe_source(body: &str) -> String {
    format!(
        "{PACKAGES_SOURCE}\n_, failed = prepare_packages(runner_options())\nif failed:\n    sys.stderr.write({PROBE_FAILURE_PREFIX:?} \
         + failed + '\\n')\n    sys.exit(3)\n{body}"
    )
}

/// The failed preload a probe reported on `stderr`, if any.
pub(crate) fn probe_failure(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|line| line.strip_prefix(PROBE_FAILURE_PREFIX)).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_asked_adds_no_argument_and_directories_count_only_with_site_packages() {
        let site = [PathBuf::from("/venv/lib/python3.11/site-packages")];
        assert_eq!(Packages::default().runner_argument(&site, &[]), Ok(None));
        let preload = Packages { site_packages: false, preload: vec!["json".into()] };
        assert_eq!(preload.runner_argument(&site, &[]), Ok(Some(r#"{"site":[],"preload":["json"]}"#.into())));
        let both = Packages { site_packages: true, preload: vec!["pandas".into()] };
        assert_eq!(
            both.runner_argument(&site, &[]),
            Ok(Some(r#"{"site":["/venv/lib/python3.11/site-packages"],"preload":["pandas"]}"#.into()))
        );
        let shown_but_none = Packages { site_packages: true, preload: vec![] };
        assert_eq!(shown_but_none.runner_argument(&[], &[]), Ok(None));
        let mounts = [Mount { name: "data".into(), path: "/d".into(), writable: false }];
        assert_eq!(
            Packages::default().runner_argument(&site, &mounts),
            Ok(Some(r#"{"site":[],"preload":[],"mounts":["data"]}"#.into())),
            "the names only: the runner's attach() takes their files"
        );
    }

    #[test]
    fn a_directory_that_is_not_utf8_is_an_error_naming_the_key() {
        use std::os::unix::ffi::OsStrExt;
        let odd = PathBuf::from(std::ffi::OsStr::from_bytes(b"/venv/\xff"));
        let packages = Packages { site_packages: true, preload: vec![] };
        assert!(packages.runner_argument(&[odd], &[]).unwrap_err().starts_with("execution.site_packages: "));
    }

    #[test]
    fn a_probe_reports_the_failed_preload_on_its_own_line() {
        let source = probe_source("print('ok')");
        assert!(source.starts_with(PACKAGES_SOURCE) && source.ends_with("\nprint('ok')"));
        assert!(source.contains("sys.stderr.write(\"ptc-preload: \" + failed + '\\n')"), "{source}");
        let stderr = "noise\nptc-preload: execution.preload: module 'x' could not be imported here: boom\n";
        assert_eq!(
            probe_failure(stderr).as_deref(),
            Some("execution.preload: module 'x' could not be imported here: boom")
        );
        assert_eq!(probe_failure("Traceback ...\n"), None);
    }
}
