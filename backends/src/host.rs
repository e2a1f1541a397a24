//! Runners that are processes on this host (`none`, `seatbelt`, and `landlock` through its helper): each
//! leads its own process group so that killing the group kills everything the program started.

use std::ffi::OsString;
use std::path::Path;
use std::pin::Pin;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tempfile::TempDir;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::lifecycle::{DeathWatch, ExitWatch, has_exited, signal_group};
use crate::limits::MALLOC_ARENA_MAX;
use crate::mounts::Mount;
use crate::protocol::RUNNER_SOURCE;
use crate::rlimits::MemoryBound;
use crate::tail::StderrTail;
use crate::watch::{LimitWatch, Watched};
use crate::{ExitInfo, RunnerControl, RunnerProcess, SpawnError, SpawnRequest, python, rlimits};

/// Interpreter arguments that start the embedded runner, with its options (`packages`) if any.
pub(crate) fn runner_args(options: Option<String>) -> Vec<String> {
    let mut args = python::isolated_args(RUNNER_SOURCE);
    args.extend(options);
    args
}

/// A command for a runner process: empty environment, piped stdio (the channel and diagnostics), its own
/// process group, killed if dropped.
pub(crate) fn runner_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    command
}

/// Starts `argv` (built for the run's scratch directory) as a runner: an empty environment except `HOME`
/// and `TMPDIR` (the scratch directory, also its working directory, where `mounts` are linked), its own
/// process group, the run's rlimits, and death with the server.
pub(crate) async fn spawn_confined(
    request: &SpawnRequest,
    mounts: &[Mount],
    argv: impl FnOnce(&Path) -> Vec<OsString>,
) -> Result<RunnerProcess, SpawnError> {
    let (scratch, prepared) = prepare_host_run(request, mounts).await?;
    let argv = argv(scratch.path());
    let Some((program, args)) = argv.split_first() else {
        let source = std::io::Error::other("an empty command line");
        return Err(SpawnError::Start { program: String::new(), source });
    };
    let program = program.to_string_lossy().into_owned();
    let Prepared { group, memory, rlimits, user, join } = prepared;
    let mut command = runner_command(&argv[0]);
    command.args(args).env("HOME", scratch.path()).env("TMPDIR", scratch.path()).current_dir(scratch.path());
    command.envs(runner_env(user));
    // SAFETY: the closure only makes async-signal-safe syscalls (write, close_range, setrlimit, prctl).
    unsafe {
        command.pre_exec(move || confine(join.as_ref(), &rlimits));
    }
    let child = crate::spawner::spawn(command).await.map_err(|source| SpawnError::Start { program, source })?;
    let watched = host_watched(request, memory, &scratch);
    host_runner(child, scratch, group, watched)
}

/// Why a zygote gave no runner: the run's own preparation failed (a fresh start would fail as well), or the
/// zygote did (a fresh start will do).
#[cfg(target_os = "linux")]
pub(crate) enum ForkError {
    Spawn(SpawnError),
    Zygote(crate::zygote::ZygoteError),
}

/// A runner forked from `zygote` (started with `start` if none runs) with what [`spawn_confined`] gives
/// its runner: the same scratch directory, rlimits, cgroup, environment and watch.
#[cfg(target_os = "linux")]
pub(crate) async fn fork_confined<F, Fut>(
    zygote: &crate::zygote::Zygote,
    request: &SpawnRequest,
    mounts: &[Mount],
    start: F,
) -> Result<RunnerProcess, ForkError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<crate::zygote::ZygoteProcess, String>>,
{
    let (scratch, prepared) = prepare_host_run(request, mounts).await.map_err(ForkError::Spawn)?;
    let Prepared { group, memory, rlimits, user, join } = prepared;
    let cgroup = group.fork_handles(join).map_err(|source| ForkError::Spawn(SpawnError::Scratch(source)))?;
    let fork = crate::zygote::ForkRequest {
        rlimits,
        env: runner_env(user),
        scratch: Some(scratch.path().to_path_buf()),
        scratch_mb: request.limits.scratch_mb,
        cgroup,
    };
    let forked = zygote.fork(fork, start).await.map_err(ForkError::Zygote)?;
    let watched = host_watched(request, memory, &scratch);
    forked_runner(forked, Some(scratch), group, watched).map_err(ForkError::Spawn)
}

/// A host run's scratch directory (with `mounts` linked in) and what its start needs from the system.
async fn prepare_host_run(request: &SpawnRequest, mounts: &[Mount]) -> Result<(TempDir, Prepared), SpawnError> {
    let scratch = crate::scratch::run_dir().map_err(SpawnError::Scratch)?;
    crate::mounts::link_into(scratch.path(), mounts).map_err(SpawnError::Scratch)?;
    // The run's cgroup, the user's task count and name take file system work: off the runtime's thread.
    let limits = request.limits.clone();
    let cpu_seconds = rlimits::cpu_seconds(request.timeout);
    let prepared = tokio::task::spawn_blocking(move || Prepared::for_run(&limits, cpu_seconds)).await;
    let failed = |source| SpawnError::Start { program: "runner".into(), source };
    let prepared = prepared.map_err(|e| failed(std::io::Error::other(e)))?.map_err(failed)?;
    Ok((scratch, prepared))
}

/// The environment of a host runner besides `HOME` and `TMPDIR`: `MALLOC_ARENA_MAX`, and `LOGNAME` and
/// `USER` where the user has a name.
pub(crate) fn runner_env(user: Option<String>) -> Vec<(String, String)> {
    let mut env = vec![(MALLOC_ARENA_MAX.0.to_string(), MALLOC_ARENA_MAX.1.to_string())];
    if let Some(name) = user {
        env.extend([("LOGNAME".to_string(), name.clone()), ("USER".to_string(), name)]);
    }
    env
}

/// What the server watches of a host run: its memory where no cgroup bounds it, and its scratch directory.
fn host_watched(request: &SpawnRequest, memory: MemoryBound, scratch: &TempDir) -> Watched {
    Watched {
        memory_bytes: (memory == MemoryBound::Watch).then(|| request.limits.memory_bytes()),
        scratch: Some((scratch.path().to_path_buf(), request.limits.scratch_mb << 20)),
    }
}

/// What a runner's start needs from the system, found before the fork.
struct Prepared {
    group: RunGroup,
    memory: MemoryBound,
    rlimits: Vec<rlimits::Rlimit>,
    /// This user's name, for `LOGNAME` and `USER`.
    user: Option<String>,
    /// The run's cgroup's `cgroup.procs`, open for the child to move itself in.
    join: Option<std::fs::File>,
}

impl Prepared {
    fn for_run(limits: &crate::Limits, cpu_seconds: u64) -> std::io::Result<Prepared> {
        let group = RunGroup::for_run(limits, limits.memory_bytes());
        let memory = MemoryBound::for_host(rlimits::Os::CURRENT, group.bounds_memory());
        let mut rlimits = rlimits::for_run(limits, cpu_seconds, memory);
        rlimits.extend(task_limit(limits));
        // SAFETY: getuid has no preconditions.
        let user = user_name(unsafe { libc::getuid() });
        let join = group.joiner()?;
        Ok(Prepared { group, memory, rlimits, user, join })
    }
}

/// The run's cgroup where there is one (Linux, see `cgroup`); nothing elsewhere.
pub(crate) struct RunGroup {
    #[cfg(target_os = "linux")]
    cgroup: Option<crate::cgroup::RunCgroup>,
}

impl RunGroup {
    pub(crate) fn for_run(limits: &crate::Limits, memory_bytes: u64) -> RunGroup {
        #[cfg(target_os = "linux")]
        return RunGroup { cgroup: crate::cgroup::for_run(limits, memory_bytes) };
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (limits, memory_bytes);
            RunGroup {}
        }
    }

    /// No cgroup (a zygote's: each of its forks joins its run's).
    pub(crate) fn none() -> RunGroup {
        RunGroup {
            #[cfg(target_os = "linux")]
            cgroup: None,
        }
    }

    /// [`for_run`](Self::for_run) where the cgroup would bound the run's tasks or memory; none where it would
    /// only kill it whole.
    #[cfg(target_os = "linux")]
    pub(crate) fn bounding_for_run(limits: &crate::Limits, memory_bytes: u64) -> RunGroup {
        if crate::cgroup::would_bound() { RunGroup::for_run(limits, memory_bytes) } else { RunGroup::none() }
    }

    pub(crate) fn bounds_memory(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.cgroup.as_ref().is_some_and(|c| c.bounds_memory);
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// The cgroup's directory, for a helper that moves itself in.
    #[cfg(target_os = "linux")]
    pub(crate) fn cgroup(&self) -> Option<&crate::cgroup::RunCgroup> {
        self.cgroup.as_ref()
    }

    /// An open `cgroup.procs` of the run's cgroup, for the child to move itself in before exec.
    pub(crate) fn joiner(&self) -> std::io::Result<Option<std::fs::File>> {
        #[cfg(target_os = "linux")]
        if let Some(cgroup) = &self.cgroup {
            use std::os::unix::fs::OpenOptionsExt;
            let file = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_CLOEXEC).open(cgroup.procs())?;
            return Ok(Some(file));
        }
        Ok(None)
    }

    /// The run's cgroup as a zygote's fork is given it (`procs`: from [`joiner`](Self::joiner)).
    #[cfg(target_os = "linux")]
    pub(crate) fn fork_handles(
        &self,
        procs: Option<std::fs::File>,
    ) -> std::io::Result<Option<crate::zygote::CgroupHandles>> {
        match (&self.cgroup, procs) {
            (Some(cgroup), Some(procs)) => crate::zygote::CgroupHandles::open(cgroup.dir(), procs).map(Some),
            _ => Ok(None),
        }
    }

    fn kill(&self) {
        #[cfg(target_os = "linux")]
        if let Some(cgroup) = &self.cgroup {
            cgroup.kill();
        }
    }

    /// What a run's group is here, for a probe's report.
    pub(crate) fn describe() -> String {
        #[cfg(target_os = "linux")]
        return crate::cgroup::describe();
        #[cfg(not(target_os = "linux"))]
        "no cgroup (not Linux)".to_string()
    }

    fn is_empty(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.cgroup.as_ref().is_none_or(|c| c.is_empty());
        #[cfg(not(target_os = "linux"))]
        true
    }
}

/// RLIMIT_NPROC for a runner of this server's user: as many tasks as the user has now, plus the run's. The
/// kernel counts every task of the user, so concurrent runs and the user's other processes share the margin;
/// root is exempt from the limit, so none is set for it. Linux only.
fn task_limit(limits: &crate::Limits) -> Option<rlimits::Rlimit> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        (uid != 0).then(|| rlimits::nproc(rlimits::tasks_of_user(uid), limits.tasks))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = limits;
        None
    }
}

/// This machine's name for `uid`, if its user database has one.
pub(crate) fn user_name(uid: libc::uid_t) -> Option<String> {
    // SAFETY: an all-zero passwd is a valid value to be filled in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; 16384];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r with a zeroed entry and a buffer of the given size; `found` points at `entry` or is null.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buffer`, NUL-terminated.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// In the child before exec: into the run's cgroup, no inherited files but stdio, the run's limits, and death
/// with the server.
fn confine(cgroup_procs: Option<&std::fs::File>, rlimits: &[rlimits::Rlimit]) -> std::io::Result<()> {
    if let Some(procs) = cgroup_procs {
        use std::os::fd::AsRawFd;
        // SAFETY: write of a local buffer to an fd we own: "0" moves the writing process.
        if unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    close_inherited_fds()?;
    rlimits::apply(rlimits)?;
    // Elsewhere than on Linux the reaper does this, once the runner's group is known (`host_runner`).
    crate::lifecycle::die_with_server()
}

/// In a zygote's process before exec: no inherited files but stdio (its socket and diagnostics), and death
/// with the server; no limits (each fork gets its run's).
#[cfg(target_os = "linux")]
pub(crate) fn zygote_pre_exec() -> std::io::Result<()> {
    close_inherited_fds()?;
    crate::lifecycle::die_with_server()
}

/// Fds past stdio become close-on-exec (async-signal-safe): with one `close_range` on Linux 5.11+; on older
/// kernels (ENOSYS, or EINVAL for the CLOEXEC flag) and other OSes, with `fcntl` on every fd below the open-files
/// limit (at most 65536 of them).
fn close_inherited_fds() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: close_range on the child's own fd table, marking everything past stdio close-on-exec.
        if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) } == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if !matches!(error.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
            return Err(error);
        }
    }
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit into a local struct.
    let open_files = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 { limit.rlim_cur } else { 0 };
    mark_close_on_exec(3..open_files.clamp(1024, 65536) as libc::c_int);
    Ok(())
}

fn mark_close_on_exec(fds: std::ops::Range<libc::c_int>) {
    for fd in fds {
        // SAFETY: fcntl on an fd number; one that is not open yields EBADF, which is fine.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Wraps a spawned child (started with `process_group(0)` and piped stdio) into a [`RunnerProcess`]. The
/// scratch directory lives as long as the runner and is removed after it is killed; what no kernel limit
/// bounds here is `watched`.
pub(crate) fn host_runner(
    mut child: Child,
    scratch: TempDir,
    group: RunGroup,
    watched: Watched,
) -> Result<RunnerProcess, SpawnError> {
    let missing = |what: &str| SpawnError::Start {
        program: "runner".into(),
        source: std::io::Error::other(format!("{what} was not piped")),
    };
    let to_runner = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let from_runner = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    widen_pipe(&to_runner);
    widen_pipe(&from_runner);
    let pid = child.id().map(|pid| pid as libc::pid_t);
    let streams =
        Streams { to_runner: Box::pin(to_runner), from_runner: Box::pin(from_runner), stderr: Box::pin(stderr) };
    Ok(led_runner(Leader::Child(child), pid, streams, Some(scratch), group, watched))
}

/// The same for a runner forked by a zygote: its leader is the zygote's child, not ours.
#[cfg(target_os = "linux")]
pub(crate) fn forked_runner(
    mut forked: crate::zygote::Forked,
    scratch: Option<TempDir>,
    group: RunGroup,
    watched: Watched,
) -> Result<RunnerProcess, SpawnError> {
    let (to_runner, from_runner, stderr) = forked.take_streams().ok_or_else(|| SpawnError::Start {
        program: "zygote".into(),
        source: std::io::Error::other("the fork's streams were taken"),
    })?;
    widen_pipe(&to_runner);
    widen_pipe(&from_runner);
    let pid = Some(forked.pid);
    let streams =
        Streams { to_runner: Box::pin(to_runner), from_runner: Box::pin(from_runner), stderr: Box::pin(stderr) };
    Ok(led_runner(Leader::Forked(forked), pid, streams, scratch, group, watched))
}

/// A runner's channel and diagnostics, as the server holds them.
struct Streams {
    to_runner: Pin<Box<dyn AsyncWrite + Send>>,
    from_runner: Pin<Box<dyn AsyncRead + Send>>,
    stderr: Pin<Box<dyn AsyncRead + Send>>,
}

fn led_runner(
    leader: Leader,
    pid: Option<libc::pid_t>,
    streams: Streams,
    scratch: Option<TempDir>,
    group: RunGroup,
    watched: Watched,
) -> RunnerProcess {
    let Streams { to_runner, from_runner, stderr } = streams;
    let tail = StderrTail::default();
    let stderr_reader = Some(tokio::spawn(keep_stderr_tail(stderr, tail.clone())));
    let lifecycle = pid.map(|pid| Lifecycle::of(pid, watched));
    let control = HostControl {
        leader,
        lifecycle,
        exited: None,
        passed: None,
        stderr_tail: tail,
        stderr_reader,
        group,
        _scratch: scratch,
    };
    RunnerProcess { to_runner, from_runner, control: Box::new(control) }
}

/// The leader of a runner's process group: our child, or a zygote's (which reports how it ended).
enum Leader {
    Child(Child),
    #[cfg(target_os = "linux")]
    Forked(crate::zygote::Forked),
}

impl Leader {
    /// How it ended; reaps it (ours) or lets the zygote reap it.
    async fn status(&mut self) -> ExitInfo {
        match self {
            Leader::Child(child) => match child.wait().await {
                Ok(status) => exit_info(status),
                Err(e) => ExitInfo::Unknown(format!("could not wait for the runner: {e}")),
            },
            #[cfg(target_os = "linux")]
            Leader::Forked(forked) => forked.status().await,
        }
    }

    fn has_exited(&self, pid: libc::pid_t) -> bool {
        match self {
            Leader::Child(_) => has_exited(pid),
            #[cfg(target_os = "linux")]
            Leader::Forked(forked) => forked.has_exited(),
        }
    }

    fn start_kill(&mut self) {
        match self {
            Leader::Child(child) => drop(child.start_kill()),
            #[cfg(target_os = "linux")]
            Leader::Forked(forked) => forked.start_kill(),
        }
    }
}

/// What watches a started runner's group: its leader's exit, the limits no kernel enforces, and the server's
/// death. All of it ends before the leader is reaped, when the group's id stops being ours.
struct Lifecycle {
    /// The runner's process group (its own pid).
    pgid: libc::pid_t,
    exit: ExitWatch,
    limits: Option<LimitWatch>,
    _death: DeathWatch,
}

impl Lifecycle {
    fn of(pgid: libc::pid_t, watched: Watched) -> Lifecycle {
        Lifecycle {
            pgid,
            exit: ExitWatch::new(pgid),
            limits: LimitWatch::start(pgid, watched),
            _death: DeathWatch::of(pgid),
        }
    }
}

/// How long a killed runner's stderr may take to reach its end (a process that left the group can hold it).
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// Pipe capacity for the channel: a multi-megabyte result then moves in a few large writes and reads
/// instead of 64 KiB pieces, each a context switch between server and runner.
#[cfg(target_os = "linux")]
const CHANNEL_PIPE_BYTES: libc::c_int = 1 << 20;

/// Best effort: a system whose `fs.pipe-max-size` is lower keeps the default size.
fn widen_pipe(pipe: &impl std::os::fd::AsRawFd) {
    #[cfg(target_os = "linux")]
    // SAFETY: fcntl on a pipe fd we own; failure leaves the pipe as it was.
    unsafe {
        libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, CHANNEL_PIPE_BYTES);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = pipe;
}

pub(crate) async fn keep_stderr_tail(mut stderr: impl AsyncRead + Unpin, tail: StderrTail) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stderr.read(&mut buf).await {
        tail.push(&buf[..n]);
    }
}

struct HostControl {
    leader: Leader,
    /// Until the leader is reaped (`None` also if it had exited when spawned): its group is ours to kill.
    lifecycle: Option<Lifecycle>,
    exited: Option<ExitInfo>,
    /// The limit the run passed, if its watch killed it (known once the leader has exited).
    passed: Option<String>,
    stderr_tail: StderrTail,
    /// Fills `stderr_tail`; ends once nothing holds the runner's stderr open.
    stderr_reader: Option<JoinHandle<()>>,
    /// The run's cgroup, if any: killed with the process group, removed when dropped.
    group: RunGroup,
    /// Dropped (removed) after the control, i.e. after the group is killed.
    _scratch: Option<TempDir>,
}

impl HostControl {
    /// Kills the process group and the cgroup (which also holds what left the group: new sessions). Once the
    /// leader is reaped its id, the group's, may name another process group: then only the cgroup (the run's
    /// own) is killed.
    fn kill_group(&self) {
        if let Some(lifecycle) = &self.lifecycle {
            signal_group(lifecycle.pgid, libc::SIGKILL);
        }
        self.group.kill();
    }
}

#[async_trait]
impl RunnerControl for HostControl {
    async fn wait(&mut self) -> ExitInfo {
        if let Some(info) = &self.exited {
            return info.clone();
        }
        if let Some(lifecycle) = &self.lifecycle {
            // Whatever the leader left behind in its group goes, before the leader is reaped.
            lifecycle.exit.exited().await;
            self.kill_group();
            self.passed = lifecycle.limits.as_ref().and_then(|l| l.passed().map(str::to_string));
        }
        // No watch may signal the group, nor the reaper remember it, once its id is free.
        self.lifecycle = None;
        // A zygote's answer takes a moment: a wait cancelled meanwhile has kept the limit passed in `passed`.
        let status = self.leader.status().await;
        let info = match self.passed.clone() {
            Some(why) => ExitInfo::PastLimit(why),
            None => status,
        };
        self.exited = Some(info.clone());
        info
    }

    async fn kill(&mut self) {
        self.start_kill();
        self.wait().await;
        // Killed processes leave the cgroup a moment after: then it can be removed at once when dropped.
        for _ in 0..100 {
            if self.group.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // With the group gone nothing should hold stderr open; once the reader reaches its end, the tail has
        // the runner's last words (a helper's reason for failing).
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
    }

    fn start_kill(&mut self) {
        self.kill_group();
        self.leader.start_kill();
    }

    fn has_exited(&mut self) -> bool {
        self.exited.is_some() || self.lifecycle.as_ref().is_none_or(|l| self.leader.has_exited(l.pgid))
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail.text()
    }
}

impl Drop for HostControl {
    fn drop(&mut self) {
        self.kill_group();
        // `kill_on_drop` on a child makes tokio kill and reap the leader if it is still there; a zygote's
        // reaps its own once told (when the fork is dropped).
    }
}

fn exit_info(status: std::process::ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitInfo::Code(code),
        (None, Some(signal)) => ExitInfo::Signal(signal),
        (None, None) => ExitInfo::Unknown(status.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_finished_runner_s_last_stderr_words_are_in_the_tail() {
        let request = SpawnRequest { limits: crate::Limits::default(), timeout: Duration::from_secs(10) };
        let script = "printf 'ready\\n'; printf 'first\\n' >&2; sleep 0.1; printf 'last words\\n' >&2; exit 3";
        let runner =
            spawn_confined(&request, &[], |_| ["/bin/sh", "-c", script].map(OsString::from).to_vec()).await.unwrap();
        let probe = runner.finish_probe(Duration::from_secs(10)).await;
        assert!(probe.completed);
        assert_eq!(probe.stdout, "ready\n");
        assert_eq!(probe.exit, ExitInfo::Code(3));
        assert!(probe.stderr.ends_with("last words\n"), "{:?}", probe.stderr);
    }

    #[test]
    fn fds_are_marked_close_on_exec_without_close_range() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // SAFETY: fcntl on an fd this test owns.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        mark_close_on_exec(fd..fd + 1);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[tokio::test]
    async fn a_probe_that_hangs_is_killed_at_its_limit() {
        let request = SpawnRequest { limits: crate::Limits::default(), timeout: Duration::from_secs(10) };
        let runner = spawn_confined(&request, &[], |_| ["/bin/sh", "-c", "sleep 60"].map(OsString::from).to_vec())
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let probe = runner.finish_probe(Duration::from_millis(200)).await;
        assert!(!probe.completed);
        assert_eq!(probe.exit, ExitInfo::Signal(libc::SIGKILL));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
