//! The `docker` backend's settings and the container it creates for one run: plain code, unit-tested
//! without an engine.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};
use serde::Deserialize;

use crate::protocol::RUNNER_SOURCE;
use crate::rlimits::{self, MemoryBound};
use crate::{Limits, Mount, SpawnRequest};

/// `execution.docker`: where the engine is, which image runs programs, and the container's limits.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerSettings {
    /// The image; it needs CPython 3.9+ as `python3` on its PATH (a standard library is enough).
    pub image: String,
    /// The engine: `unix:///path/docker.sock`, `tcp://host:2375`, `https://host:2376` (TLS with the
    /// certificates in `DOCKER_CERT_PATH`, default `~/.docker`). Unset: `DOCKER_HOST`, else the local socket.
    pub host: Option<String>,
    /// The container's memory limit (cgroup; no swap) in MiB. It also holds the scratch tmpfs, so the
    /// default is `limits.memory_mb + scratch`.
    pub memory_mb: Option<u64>,
    /// Most tasks (processes and threads) in the container; default `limits.tasks`.
    pub pids: Option<u64>,
    /// CPUs the container may use (fractions allowed).
    pub cpus: f64,
    /// Size of the scratch tmpfs in MiB; default `limits.scratch_mb`.
    pub scratch_mb: Option<u64>,
    /// The OCI runtime of run containers, by the name the engine registered it under (e.g. `runsc` for
    /// gVisor); unset: the engine's default runtime.
    pub runtime: Option<String>,
}

/// The default image: the official slim CPython image, pulled once with `docker pull`.
pub const DEFAULT_IMAGE: &str = "python:3.12-slim";

impl Default for DockerSettings {
    fn default() -> Self {
        DockerSettings {
            image: DEFAULT_IMAGE.to_string(),
            host: None,
            memory_mb: None,
            pids: None,
            cpus: 1.0,
            scratch_mb: None,
            runtime: None,
        }
    }
}

/// A value under `execution.docker` that cannot be used; the message starts with its key.
#[derive(Debug, thiserror::Error)]
pub enum DockerSettingsError {
    #[error("image: must name an image (e.g. python:3.12-slim)")]
    NoImage,
    #[error("host: '{0}' is not unix://PATH, tcp://HOST:PORT, http://HOST:PORT or https://HOST:PORT")]
    Host(String),
    #[error("memory_mb: must be at least 16 (MiB)")]
    Memory,
    #[error("pids: must be at least 8 (the interpreter and its threads)")]
    Pids,
    #[error("cpus: must be between 0.01 and 1024, got {0}")]
    Cpus(f64),
    #[error("scratch_mb: must be at least 1")]
    Scratch,
    #[error("runtime: must name an OCI runtime the engine knows (e.g. runsc), or be left out for the engine's default")]
    NoRuntime,
}

impl DockerSettings {
    /// Checks the values.
    pub fn validate(&self) -> Result<(), DockerSettingsError> {
        if self.image.trim().is_empty() {
            return Err(DockerSettingsError::NoImage);
        }
        if let Some(host) = &self.host
            && !["unix://", "tcp://", "http://", "https://"].iter().any(|scheme| host.starts_with(scheme))
        {
            return Err(DockerSettingsError::Host(host.clone()));
        }
        if self.memory_mb.is_some_and(|mb| mb < 16) {
            return Err(DockerSettingsError::Memory);
        }
        if self.pids.is_some_and(|pids| pids < 8) {
            return Err(DockerSettingsError::Pids);
        }
        if !(self.cpus >= 0.01 && self.cpus <= 1024.0) {
            return Err(DockerSettingsError::Cpus(self.cpus));
        }
        if self.scratch_mb == Some(0) {
            return Err(DockerSettingsError::Scratch);
        }
        if self.runtime.as_deref().is_some_and(|runtime| runtime.trim().is_empty()) {
            return Err(DockerSettingsError::NoRuntime);
        }
        Ok(())
    }

    pub fn pids(&self, limits: &Limits) -> u64 {
        self.pids.unwrap_or(limits.tasks)
    }

    pub fn scratch_mb(&self, limits: &Limits) -> u64 {
        self.scratch_mb.unwrap_or(limits.scratch_mb)
    }

    pub fn memory_mb(&self, limits: &Limits) -> u64 {
        self.memory_mb.unwrap_or_else(|| limits.memory_mb.saturating_add(self.scratch_mb(limits)))
    }
}

/// The scratch tmpfs: the runner's working directory, `HOME` and `TMPDIR`.
pub const SCRATCH: &str = "/scratch";
/// The user programs run as (`nobody` on most systems); numeric, so images need no user database.
pub const USER: &str = "65534:65534";
/// The user's name in the container's own user database and in `LOGNAME`/`USER` (for `getpass.getuser()`).
const USER_NAME: &str = "ptc";
/// The runner's whole environment (the prologue removes anything else a runtime adds).
pub const USER_ENV: [(&str, &str); 4] =
    [("HOME", SCRATCH), ("TMPDIR", SCRATCH), ("LOGNAME", USER_NAME), ("USER", USER_NAME)];
/// With the image's /etc hidden, /etc is a tiny tmpfs of the container's own, where the prologue writes a user
/// database for the runner's user; the files Docker adds there (its /etc/hostname, /etc/hosts and
/// /etc/resolv.conf) are masked. runsc ignores masked paths: there they hold only the host name below, Docker's
/// loopback-only hosts file and the fixed resolver settings of [`DNS`].
const ETC: &str = "/etc";
const DOCKER_ETC_FILES: &[&str] = &["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];
/// Every runner container carries this label; its value is the server instance that made it.
pub const LABEL: &str = "ptc-mcp.server";
/// The container's host name (the kernel's and /etc/hostname): tells programs nothing.
const HOSTNAME: &str = "sandbox";
/// Docker's default masked paths (replaced, not extended, by a `MaskedPaths` list), plus all of /sys. A
/// masked directory is an empty read-only tmpfs, a masked file reads as /dev/null.
const MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys",
];

/// Empty read-only tmpfs mounts: /sys (masked too, but runsc ignores masked paths) and /tmp (where runsc
/// would otherwise mount a writable tmpfs of its own).
const EMPTY: &[&str] = &["/sys", "/tmp"];
const EMPTY_TMPFS: &str = "ro,nosuid,nodev,noexec,size=4k,mode=0555";
/// What /etc/resolv.conf holds instead of the host's resolver settings (masked under runc, but runsc ignores
/// masked paths): a loopback resolver, which network `none` leaves nothing behind, and no search domains.
const DNS: &str = "127.0.0.1";
const DNS_OPTIONS: &str = "ndots:1";

/// The confinement prologue run by the interpreter before the runner (see its docstring).
const CONFINE_SOURCE: &str = include_str!("confine.py");

/// Host tasks a gVisor sandbox may have besides the program's own: its kernel's and file proxy's threads
/// (about 40 on 2 cores; a pids limit of 32 keeps it from starting at all).
pub const GVISOR_HOST_TASKS: u64 = 512;

/// Where the tasks (processes and threads) of a run are counted and bounded at `docker.pids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskBound {
    /// The container's pids cgroup: each of the program's threads is a host task (runc and its kind).
    Cgroup,
    /// gVisor's kernel: the program's threads are its tasks, not the host's, so RLIMIT_NPROC bounds them
    /// there (the runner's user has no other task in the sandbox, and the count is not shared with the host's
    /// user of that uid as it would be under runc); the pids cgroup bounds the sandbox's own host threads,
    /// with [`GVISOR_HOST_TASKS`] more room.
    Gvisor,
}

impl TaskBound {
    /// RLIMIT_NPROC for the prologue to set, if the runtime counts the program's tasks that way.
    pub fn nproc(self, settings: &DockerSettings, limits: &Limits) -> Option<u64> {
        (self == TaskBound::Gvisor).then(|| settings.pids(limits))
    }

    /// The container's pids limit.
    fn pids_limit(self, settings: &DockerSettings, limits: &Limits) -> u64 {
        match self {
            TaskBound::Cgroup => settings.pids(limits),
            TaskBound::Gvisor => settings.pids(limits).saturating_add(GVISOR_HOST_TASKS),
        }
    }
}

/// Source for `python -c`: the prologue, the call that confines the interpreter with the run's rlimits (and
/// `nproc` as RLIMIT_NPROC), then `body` (the runner, or the probe's script).
pub(crate) fn confined_source(limits: &Limits, cpu_seconds: u64, nproc: Option<u64>, body: &str) -> String {
    // The container's cgroup counts the memory it uses: no memory rlimits (they would count reservations).
    let mut by_name: serde_json::Map<String, serde_json::Value> =
        rlimits::named_for_run(limits, cpu_seconds, MemoryBound::Cgroup)
            .iter()
            .map(|&(name, _, value)| (name.to_string(), value.into()))
            .collect();
    if let Some(nproc) = nproc {
        by_name.insert("NPROC".to_string(), nproc.into());
    }
    format!("{CONFINE_SOURCE}\nconfine({})\ndel confine\n{body}", serde_json::Value::Object(by_name))
}

/// The interpreter command line that runs `body` confined by the prologue.
pub fn confined_command(
    python: &str,
    limits: &Limits,
    cpu_seconds: u64,
    nproc: Option<u64>,
    body: &str,
) -> Vec<String> {
    let mut command = vec![python.to_string()];
    command.extend(crate::python::isolated_args(&confined_source(limits, cpu_seconds, nproc, body)));
    command
}

/// The interpreter command line of one run's runner, with its options (`packages`) if any.
pub fn runner_command(
    python: &str,
    request: &SpawnRequest,
    nproc: Option<u64>,
    options: Option<String>,
) -> Vec<String> {
    let mut command =
        confined_command(python, &request.limits, rlimits::cpu_seconds(request.timeout), nproc, RUNNER_SOURCE);
    command.extend(options);
    command
}

/// `execution.mounts` as binds at `/scratch/NAME`: of the folder alone (not recursively: file systems mounted
/// inside it stay out), read-only unless writable, never propagating. The paths are the engine's machine's:
/// the backend refuses mounts on an engine that is not local.
fn binds(mounts: &[Mount]) -> Vec<bollard::models::Mount> {
    use bollard::models::{MountBindOptions, MountBindOptionsPropagationEnum, MountType};
    mounts
        .iter()
        .map(|mount| bollard::models::Mount {
            target: Some(format!("{SCRATCH}/{}", mount.name)),
            source: Some(mount.path.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(!mount.writable),
            bind_options: Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                non_recursive: Some(true),
                create_mountpoint: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect()
}

/// The container for one runner: `command` in a fresh container of the image, with stdin/stdout/stderr
/// attached (no TTY), no network, a read-only root, a size-limited tmpfs as scratch and working directory,
/// no capabilities, no-new-privileges, a non-root user, memory, pids and CPU limits, no IPC namespace
/// shared or /dev/shm, /sys masked, /sys and /tmp empty and read-only, a resolv.conf of fixed text, no logs kept, the configured OCI runtime (else the engine's default),
/// and removed by the engine as soon as it exits; `tasks` says what its pids limit bounds. With
/// `hide_etc`, the image's /etc is hidden under a tiny tmpfs holding only the user database the prologue writes
/// (and Docker's /etc files, masked): the probe finds out whether the image's interpreter starts without it
/// (it may need /etc/ld.so.cache). `mounts` are bound in scratch (see [`binds`]).
pub fn container_body(
    settings: &DockerSettings,
    limits: &Limits,
    command: Vec<String>,
    instance: &str,
    hide_etc: bool,
    tasks: TaskBound,
    mounts: &[Mount],
) -> ContainerCreateBody {
    const MIB: i64 = 1024 * 1024;
    let memory = i64::try_from(settings.memory_mb(limits)).unwrap_or(i64::MAX / MIB).saturating_mul(MIB);
    // Owned by the runner's user: the engine copies the working directory's 0755 onto the tmpfs.
    let (uid, gid) = USER.split_once(':').expect("USER is uid:gid");
    let scratch = format!("rw,nosuid,nodev,noexec,size={}m,uid={uid},gid={gid},mode=0700", settings.scratch_mb(limits));
    let mut tmpfs = HashMap::from([(SCRATCH.to_string(), scratch)]);
    tmpfs.extend(EMPTY.iter().map(|path| (path.to_string(), EMPTY_TMPFS.to_string())));
    let mut masked: Vec<String> = MASKED_PATHS.iter().map(|p| p.to_string()).collect();
    if hide_etc {
        tmpfs.insert(ETC.to_string(), format!("rw,nosuid,nodev,noexec,size=64k,uid={uid},gid={gid},mode=0755"));
        masked.extend(DOCKER_ETC_FILES.iter().map(|p| p.to_string()));
    }
    ContainerCreateBody {
        image: Some(settings.image.clone()),
        cmd: Some(command),
        // [""] resets an image's entrypoint: the command runs as given.
        entrypoint: Some(vec![String::new()]),
        env: Some(USER_ENV.iter().map(|(name, value)| format!("{name}={value}")).collect()),
        working_dir: Some(SCRATCH.to_string()),
        user: Some(USER.to_string()),
        hostname: Some(HOSTNAME.to_string()),
        labels: Some(HashMap::from([(LABEL.to_string(), instance.to_string())])),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        network_disabled: Some(true),
        host_config: Some(HostConfig {
            network_mode: Some("none".to_string()),
            dns: Some(vec![DNS.to_string()]),
            // ".": no search domains (the host's otherwise).
            dns_search: Some(vec![".".to_string()]),
            dns_options: Some(vec![DNS_OPTIONS.to_string()]),
            readonly_rootfs: Some(true),
            tmpfs: Some(tmpfs),
            mounts: (!mounts.is_empty()).then(|| binds(mounts)),
            cap_drop: Some(vec!["ALL".to_string()]),
            security_opt: Some(vec!["no-new-privileges".to_string()]),
            ipc_mode: Some("none".to_string()),
            masked_paths: Some(masked),
            memory: Some(memory),
            memory_swap: Some(memory),
            pids_limit: Some(i64::try_from(tasks.pids_limit(settings, limits)).unwrap_or(i64::MAX)),
            nano_cpus: Some((settings.cpus * 1e9).round() as i64),
            auto_remove: Some(true),
            init: Some(false),
            privileged: Some(false),
            log_config: Some(HostConfigLogConfig { typ: Some("none".to_string()), config: None }),
            runtime: settings.runtime.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn request() -> SpawnRequest {
        SpawnRequest { limits: Limits::default(), timeout: Duration::from_secs(30) }
    }

    #[test]
    fn the_container_is_locked_down() {
        let settings = DockerSettings::default();
        let body = container_body(
            &settings,
            &Limits::default(),
            vec!["python3".into()],
            "inst-1",
            true,
            TaskBound::Cgroup,
            &[],
        );
        let host = body.host_config.clone().unwrap();
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(body.network_disabled, Some(true));
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(host.security_opt, Some(vec!["no-new-privileges".to_string()]));
        assert_eq!(host.privileged, Some(false));
        assert_eq!(host.ipc_mode.as_deref(), Some("none"));
        let masked = host.masked_paths.unwrap();
        assert!(masked.contains(&"/sys".to_string()) && masked.contains(&"/etc/resolv.conf".to_string()));
        assert!(masked.contains(&"/proc/kcore".to_string()), "Docker's own list is kept");
        for empty in ["/sys", "/tmp"] {
            assert_eq!(host.tmpfs.as_ref().unwrap()[empty], "ro,nosuid,nodev,noexec,size=4k,mode=0555", "{empty}");
        }
        assert_eq!(
            (host.dns.clone(), host.dns_search.clone(), host.dns_options.clone()),
            (Some(vec!["127.0.0.1".into()]), Some(vec![".".into()]), Some(vec!["ndots:1".into()])),
            "nothing of the host's resolver settings"
        );
        let etc = &host.tmpfs.as_ref().unwrap()["/etc"];
        assert_eq!(etc, "rw,nosuid,nodev,noexec,size=64k,uid=65534,gid=65534,mode=0755", "the image's /etc hidden");
        let shown = container_body(&settings, &Limits::default(), vec![], "i", false, TaskBound::Cgroup, &[])
            .host_config
            .unwrap();
        assert!(!shown.tmpfs.unwrap().contains_key("/etc"));
        assert!(!shown.masked_paths.unwrap().contains(&"/etc/resolv.conf".to_string()));
        assert_eq!(body.user.as_deref(), Some(USER));
        assert!(!USER.starts_with("0:") && !USER.starts_with("root"));
        // Nothing from the host: no binds, no volumes, no devices, no docker socket.
        assert!(host.binds.is_none() && host.mounts.is_none() && host.devices.is_none() && body.volumes.is_none());
        assert_eq!(
            body.env,
            Some(["HOME=/scratch", "TMPDIR=/scratch", "LOGNAME=ptc", "USER=ptc"].map(String::from).to_vec())
        );
        assert_eq!(body.working_dir.as_deref(), Some(SCRATCH));
        assert_eq!(body.entrypoint, Some(vec![String::new()]));
        assert_eq!(body.labels.unwrap().get(LABEL).map(String::as_str), Some("inst-1"));
    }

    #[test]
    fn mounts_are_binds_in_scratch_of_the_folder_alone_read_only_unless_writable() {
        let mounts = [
            Mount { name: "data".into(), path: "/home/me/data".into(), writable: false },
            Mount { name: "out".into(), path: "/home/me/out".into(), writable: true },
        ];
        let host = container_body(
            &DockerSettings::default(),
            &Limits::default(),
            vec![],
            "i",
            true,
            TaskBound::Cgroup,
            &mounts,
        )
        .host_config
        .unwrap();
        let binds: Vec<_> = host
            .mounts
            .unwrap()
            .into_iter()
            .map(|m| {
                let options = m.bind_options.unwrap();
                (m.target.unwrap(), m.source.unwrap(), m.typ, m.read_only, options.non_recursive, options.propagation)
            })
            .collect();
        use bollard::models::{MountBindOptionsPropagationEnum::RPRIVATE, MountType::BIND};
        assert_eq!(
            binds,
            [
                ("/scratch/data".into(), "/home/me/data".into(), Some(BIND), Some(true), Some(true), Some(RPRIVATE)),
                ("/scratch/out".into(), "/home/me/out".into(), Some(BIND), Some(false), Some(true), Some(RPRIVATE)),
            ]
        );
        assert!(host.binds.is_none() && host.devices.is_none());
        assert_eq!(host.readonly_rootfs, Some(true), "the rest stays as it is");
    }

    #[test]
    fn the_runners_options_follow_its_source() {
        let command = runner_command("python3", &request(), None, Some("{\"site\":[]}".into()));
        assert_eq!(command.len(), 6);
        assert!(command[4].ends_with(RUNNER_SOURCE));
        assert_eq!(command[5], "{\"site\":[]}");
        assert_eq!(runner_command("python3", &request(), None, None).len(), 5, "no options, no argument");
    }

    #[test]
    fn stdio_is_attached_without_a_tty_and_the_engine_removes_the_container() {
        let body =
            container_body(&DockerSettings::default(), &Limits::default(), vec![], "i", true, TaskBound::Cgroup, &[]);
        assert_eq!(
            (body.attach_stdin, body.attach_stdout, body.attach_stderr, body.open_stdin, body.stdin_once, body.tty),
            (Some(true), Some(true), Some(true), Some(true), Some(true), Some(false))
        );
        let host = body.host_config.unwrap();
        assert_eq!(host.auto_remove, Some(true));
        assert_eq!(host.init, Some(false), "the runner is pid 1: no other process in the container");
        assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
    }

    #[test]
    fn limits_default_from_execution_limits() {
        let limits = Limits { memory_mb: 512, scratch_mb: 100, ..Limits::default() };
        let body = container_body(&DockerSettings::default(), &limits, vec![], "i", true, TaskBound::Cgroup, &[]);
        let host = body.host_config.unwrap();
        assert_eq!(host.memory, Some(612 * 1024 * 1024), "memory holds the scratch tmpfs too");
        assert_eq!(host.memory_swap, host.memory, "no swap");
        assert_eq!(host.pids_limit, Some(64));
        assert_eq!(host.nano_cpus, Some(1_000_000_000));
        assert_eq!(host.tmpfs.unwrap()[SCRATCH], "rw,nosuid,nodev,noexec,size=100m,uid=65534,gid=65534,mode=0700");
        assert_eq!(host.runtime, None, "the engine's default runtime");
    }

    #[test]
    fn docker_keys_override_the_defaults() {
        let settings = DockerSettings {
            memory_mb: Some(300),
            pids: Some(16),
            cpus: 0.5,
            scratch_mb: Some(8),
            runtime: Some("runsc".into()),
            ..Default::default()
        };
        let host = container_body(&settings, &Limits::default(), vec![], "i", true, TaskBound::Cgroup, &[])
            .host_config
            .unwrap();
        assert_eq!(host.runtime.as_deref(), Some("runsc"));
        assert_eq!(host.memory, Some(300 * 1024 * 1024));
        assert_eq!(host.pids_limit, Some(16));
        assert_eq!(host.nano_cpus, Some(500_000_000));
        assert_eq!(host.tmpfs.unwrap()[SCRATCH], "rw,nosuid,nodev,noexec,size=8m,uid=65534,gid=65534,mode=0700");
    }

    #[test]
    fn the_runner_starts_confined_with_the_runs_rlimits() {
        let command = runner_command("/usr/local/bin/python3", &request(), None, None);
        assert_eq!(&command[..4], ["/usr/local/bin/python3", "-I", "-S", "-c"]);
        let source = &command[4];
        assert!(source.starts_with(CONFINE_SOURCE));
        assert!(source.ends_with(RUNNER_SOURCE));
        let call = source[CONFINE_SOURCE.len()..].lines().find(|l| l.starts_with("confine(")).unwrap();
        let limits: serde_json::Value = serde_json::from_str(&call["confine(".len()..call.len() - 1]).unwrap();
        #[allow(unused_mut)]
        let mut expected = serde_json::json!({"CPU": 31, "FSIZE": 64u64 << 20, "NOFILE": 256, "CORE": 0});
        #[cfg(target_os = "linux")]
        {
            expected["SIGPENDING"] = rlimits::PENDING_SIGNALS.into();
        }
        assert_eq!(limits, expected);
    }

    #[test]
    fn under_gvisor_the_programs_tasks_are_bounded_by_its_kernel_and_the_cgroup_leaves_room_for_its_own() {
        let settings = DockerSettings { pids: Some(32), ..Default::default() };
        let limits = Limits::default();
        assert_eq!(TaskBound::Cgroup.nproc(&settings, &limits), None, "under runc the count is the host user's");
        assert_eq!(TaskBound::Gvisor.nproc(&settings, &limits), Some(32));
        let pids_limit =
            |tasks| container_body(&settings, &limits, vec![], "i", true, tasks, &[]).host_config.unwrap().pids_limit;
        assert_eq!(pids_limit(TaskBound::Cgroup), Some(32));
        assert_eq!(pids_limit(TaskBound::Gvisor), Some(32 + 512));
        let command = runner_command("python3", &request(), Some(32), None);
        assert!(command[4].contains("\nconfine({") && command[4].contains("\"NPROC\":32"), "{}", command[4]);
    }

    #[test]
    fn settings_are_validated_with_the_key_named() {
        assert!(DockerSettings::default().validate().is_ok());
        let cases = [
            (
                DockerSettings { image: " ".into(), ..Default::default() },
                "image: must name an image (e.g. python:3.12-slim)",
            ),
            (
                DockerSettings { host: Some("ssh://box".into()), ..Default::default() },
                "host: 'ssh://box' is not unix://PATH, tcp://HOST:PORT, http://HOST:PORT or https://HOST:PORT",
            ),
            (DockerSettings { memory_mb: Some(4), ..Default::default() }, "memory_mb: must be at least 16 (MiB)"),
            (
                DockerSettings { pids: Some(2), ..Default::default() },
                "pids: must be at least 8 (the interpreter and its threads)",
            ),
            (DockerSettings { cpus: 0.0, ..Default::default() }, "cpus: must be between 0.01 and 1024, got 0"),
            (DockerSettings { cpus: f64::NAN, ..Default::default() }, "cpus: must be between 0.01 and 1024, got NaN"),
            (DockerSettings { scratch_mb: Some(0), ..Default::default() }, "scratch_mb: must be at least 1"),
            (
                DockerSettings { runtime: Some(String::new()), ..Default::default() },
                "runtime: must name an OCI runtime the engine knows (e.g. runsc), or be left out for the engine's \
                 default",
            ),
        ];
        for (settings, message) in cases {
            assert_eq!(settings.validate().map_err(|e| e.to_string()), Err(message.to_string()));
        }
    }
}
