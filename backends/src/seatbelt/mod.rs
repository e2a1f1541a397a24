//! The `seatbelt` backend (macOS): the runner under `/usr/bin/sandbox-exec` with the deny-by-default profile
//! in `profiles/seatbelt.sbpl`. Paths are passed as `-D` parameters, never pasted into the profile. Finding
//! the interpreter's real files, rendering the profile and reading `sandbox-exec`'s complaints are plain code,
//! compiled and tested on every OS (`ptc-mcp sandbox-profile seatbelt` prints the profile anywhere); only
//! running it needs a Mac.

mod diagnose;
pub mod layout;
mod libraries;
pub mod profile;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use crate::python::ResolvedPython;
use crate::{
    Availability, BackendSettings, Python, RunnerProcess, SandboxBackend, SandboxKind, SpawnError, SpawnRequest,
};
pub use layout::Layout;
pub use libraries::LibrariesError;
pub use profile::{Profile, SANDBOX_EXEC, Shown};

/// How long the availability probe (one sandboxed `print`) may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
const PROBE_OUTPUT: &str = "ptc-sandbox-ready";

/// The interpreter and the paths its profile names, found once: a failure is not kept, so that the next probe
/// looks again.
pub struct SeatbeltBackend {
    python: ResolvedPython,
    layout: OnceCell<Layout>,
    /// Its mounts and packages.
    settings: BackendSettings,
}

/// Why no profile can be made for the configured interpreter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LayoutError {
    #[error(transparent)]
    Python(#[from] crate::PythonError),
    #[error(transparent)]
    Libraries(#[from] LibrariesError),
}

/// The layout of `python` as the profile names it: its real interpreter asked, outside any sandbox, which
/// libraries it loads.
pub async fn layout_of(python: &Python) -> Result<Layout, LibrariesError> {
    let interpreter = layout::interpreter_of(python);
    let libraries = libraries::loaded_by(&interpreter).await?;
    Ok(Layout::of(python, &libraries, Path::new("/")))
}

/// The profile a run of `configured_python` would get, exactly as `sandbox-exec -p` gets it, after comment
/// lines that give its parameters and a command line to try it with (`ptc-mcp sandbox-profile seatbelt`).
/// Works on any OS: on Linux it shows the paths of a Linux interpreter. The scratch directory is an example
/// of a run's (each run has its own).
pub async fn printable_profile(settings: &BackendSettings) -> Result<String, LayoutError> {
    let python = crate::python::resolve_python(&settings.python).await?;
    let layout = layout_of(&python).await?;
    let scratch = crate::scratch::example_run_dir();
    let profile = Profile::render(&layout, &scratch, &shown(&python, settings));
    // Comments hold paths: escaped, so that no byte of a path can end a comment line.
    let shown = |value: &std::ffi::OsStr| value.to_string_lossy().escape_debug().to_string();
    let mut text = format!(
        ";; The seatbelt profile of a ptc-mcp run of python {} ({}), exactly as `sandbox-exec -p` gets it.\n\
         ;; Its parameters, each passed as -D NAME=value (SCRATCH is each run's own directory; this one is an\n\
         ;; example):\n",
        python.version,
        shown(python.executable.as_os_str())
    );
    for (name, value) in &profile.params {
        text.push_str(&format!(";;   {name}={}\n", shown(value)));
    }
    text.push_str(&format!(
        ";; To try it on a Mac: save this as p.sb, then\n\
         ;;   sandbox-exec -f p.sb -D NAME=value ... {} -I -S -c 'print(1)'\n",
        shown(layout.interpreter.as_os_str())
    ));
    text.push_str(&profile.text);
    Ok(text)
}

/// What runs of `python` show beyond it with these settings.
fn shown(python: &Python, settings: &BackendSettings) -> Shown {
    Shown { packages: python.package_dirs(settings.packages.site_packages).0, mounts: settings.mounts.clone() }
}

impl SeatbeltBackend {
    pub fn new(settings: &BackendSettings) -> Self {
        SeatbeltBackend {
            python: ResolvedPython::new(settings.python.clone()),
            layout: OnceCell::new(),
            settings: settings.clone(),
        }
    }

    fn unavailable_reason() -> Option<String> {
        if !cfg!(target_os = "macos") {
            return Some(
                "seatbelt needs macOS (/usr/bin/sandbox-exec); on this OS set execution.sandbox to landlock, \
                 docker or none (`ptc-mcp sandbox-profile seatbelt` prints the profile it would use)"
                    .to_string(),
            );
        }
        if !Path::new(SANDBOX_EXEC).exists() {
            return Some(format!("{SANDBOX_EXEC} is missing; it ships with macOS, so this system is unusual"));
        }
        None
    }

    async fn layout(&self) -> Result<&Layout, LayoutError> {
        let python = self.python.get().await?;
        Ok(self.layout.get_or_try_init(|| layout_of(python)).await?)
    }

    async fn start(&self, request: &SpawnRequest, args: Vec<String>) -> Result<RunnerProcess, SpawnError> {
        if let Some(reason) = Self::unavailable_reason() {
            return Err(SpawnError::Unavailable { kind: SandboxKind::Seatbelt, reason });
        }
        let unavailable = |reason: String| SpawnError::Unavailable { kind: SandboxKind::Seatbelt, reason };
        let layout = self.layout().await.map_err(|e| unavailable(e.to_string()))?;
        let python = self.python.get().await.map_err(|e| unavailable(e.to_string()))?;
        let shown = shown(python, &self.settings);
        crate::host::spawn_confined(request, &self.settings.mounts, |scratch| {
            Profile::render(layout, scratch, &shown).command_line(&layout.interpreter, &args)
        })
        .await
    }
}

#[async_trait]
impl SandboxBackend for SeatbeltBackend {
    fn kind(&self) -> SandboxKind {
        SandboxKind::Seatbelt
    }

    /// Runs one sandboxed `print` with the profile a run gets: a profile that does not compile, a rule this
    /// macOS does not know or a sandbox around the server shows here, not at the first program.
    async fn probe(&self) -> Availability {
        if let Some(reason) = Self::unavailable_reason() {
            return Availability::Unavailable { reason };
        }
        let request = SpawnRequest { limits: crate::Limits::default(), timeout: PROBE_TIMEOUT };
        let installed = match self.python.get().await {
            Ok(python) => python.installed.clone(),
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        let args = match self.settings.packages.probe_args(&installed, &format!("print('{PROBE_OUTPUT}')")) {
            Ok(args) => args,
            Err(reason) => return Availability::Unavailable { reason },
        };
        let runner = match self.start(&request, args).await {
            Ok(runner) => runner,
            Err(e) => return Availability::Unavailable { reason: e.to_string() },
        };
        let probe = runner.finish_probe(PROBE_TIMEOUT).await;
        if let Some(failure) = crate::packages::probe_failure(&probe.stderr) {
            return Availability::Unavailable { reason: failure };
        }
        if !(probe.completed && probe.stdout.trim() == PROBE_OUTPUT) {
            return Availability::Unavailable { reason: diagnose::failure(&probe.exit, &probe.stderr) };
        }
        let (Ok(python), Ok(layout)) = (self.python.get().await, self.layout().await) else {
            return Availability::Unavailable { reason: "the interpreter went away during the probe".into() };
        };
        Availability::Available {
            detail: format!(
                "sandbox-exec deny-by-default profile: no network, no fork (exec of the interpreter only), reads \
                 of the interpreter, its standard library and {} libraries it loads (installed packages hidden{}), \
                 writes only in scratch (no hard links, clones or file flags), no other process's information; \
                 memory and scratch size watched by the server (macOS enforces no memory rlimit); runners end \
                 with the server through a reaper process; python {} at {}",
                layout.libraries.len(),
                if self.settings.packages.site_packages { " but its own" } else { "" },
                python.version,
                layout.interpreter.display()
            ),
        }
        .with_more_detail(&crate::shown_detail(
            &self.settings.mounts,
            &self.settings.packages,
            &python.installed,
        ))
    }

    async fn spawn(&self, request: &SpawnRequest) -> Result<RunnerProcess, SpawnError> {
        let python = self.python.for_spawn(SandboxKind::Seatbelt).await?;
        let options = self
            .settings
            .packages
            .runner_argument(&python.installed, &self.settings.mounts)
            .map_err(|reason| SpawnError::Unavailable { kind: SandboxKind::Seatbelt, reason })?;
        self.start(request, crate::host::runner_args(options)).await
    }

    async fn shutdown(&self) {
        crate::scratch::release();
    }
}
