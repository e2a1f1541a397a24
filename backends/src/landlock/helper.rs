//! The landlock helper. The server re-executes its own binary as `ptc-mcp __landlock-helper <policy>`; this
//! fresh, single-threaded process confines itself layer by layer and finally execs the interpreter, so no
//! confinement is ever applied inside the multi-threaded server. On any failure it exits with
//! [`HELPER_FAILED`] after one `ptc-landlock: <what failed>` line on stderr: it never runs the interpreter
//! with a layer missing that it meant to apply.

use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use super::policy::{Bind, BindAccess, Policy, SANDBOX_ID};
use super::{DEGRADED_LAYER, LAYERS_PREFIX, seccomp};
use crate::Mount;
use crate::limits::MALLOC_ARENA_MAX;
use crate::rlimits::{self, MemoryBound};
use crate::zygote::hex;

/// Exit status of a helper that could not set up the sandbox.
pub const HELPER_FAILED: i32 = 125;

/// Landlock ABI this helper asks for; older kernels enforce what they can, and the report says so.
const LANDLOCK_ABI: ABI = ABI::V7;

#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
struct StepError {
    step: String,
    source: Box<dyn std::error::Error>,
}

fn step<T, E: std::error::Error + 'static>(what: impl Into<String>, result: Result<T, E>) -> Result<T, StepError> {
    result.map_err(|e| StepError { step: what.into(), source: Box::new(e) })
}

fn check(what: &str, rc: libc::c_long) -> Result<(), StepError> {
    if rc < 0 { step(what, Err(std::io::Error::last_os_error())) } else { Ok(()) }
}

/// Entry point of the helper process; never returns.
pub fn main(policy_json: &str) -> ! {
    let error = match run(policy_json) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!("ptc-landlock: {error}");
    std::process::exit(HELPER_FAILED)
}

fn run(policy_json: &str) -> Result<Infallible, StepError> {
    let policy: Policy = step("reading the policy", serde_json::from_str(policy_json))?;
    if let Some(cgroup) = &policy.cgroup {
        // First: everything this process starts is in the run's cgroup.
        let procs = cgroup.dir.join("cgroup.procs");
        let joined = File::options().write(true).open(&procs).and_then(|mut f| f.write_all(b"0"));
        step(format!("joining the run's cgroup {}", cgroup.dir.display()), joined)?;
    }
    // SAFETY: plain id syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        // SAFETY: setgroups with an empty list.
        check("dropping supplementary groups", unsafe { libc::setgroups(0, std::ptr::null()) } as libc::c_long)?;
    }
    set_parent_death_signal()?;
    let namespaces = match enter_namespaces(uid, gid)? {
        Entered::Namespaces(namespaces) => namespaces,
        Entered::Degraded(why) if policy.zygote => {
            return step(
                "starting the zygote",
                Err(std::io::Error::other(format!("it needs user namespaces ({why})"))),
            );
        }
        Entered::Degraded(why) => return run_degraded(&policy, uid, why),
    };
    // Bind sources are opened inside the new mount namespace (mounts from another one cannot be bound), and
    // before the ids change: until then files are opened as the server's user.
    let sources: Vec<OwnedFd> = policy
        .binds
        .iter()
        .map(|b| step(format!("opening {}", b.path.display()), open_path(&b.path, 0)))
        .collect::<Result<_, _>>()?;
    let folders: Vec<OwnedFd> = policy
        .mounts
        .iter()
        .map(|m| {
            step(
                format!("opening execution.mounts.{} ({})", m.name, m.path.display()),
                open_path(&m.path, libc::O_DIRECTORY),
            )
        })
        .collect::<Result<_, _>>()?;
    // The zygote's forks map the ids of their own user namespaces through it (there is no /proc inside).
    let proc =
        policy.zygote.then(|| step("opening /proc", open_path(Path::new("/proc"), libc::O_DIRECTORY))).transpose()?;
    namespaces.become_the_sandbox_user()?;
    build_root(&policy, &sources, &folders)?;
    drop((sources, folders));
    if let Some(proc) = proc {
        return exec_zygote(&policy, proc);
    }
    let mut layers = vec![format!(
        "user/mount/pid/net/ipc/uts namespaces with a minimal root and a {} MiB tmpfs scratch, as uid {} outside",
        policy.limits.scratch_mb, namespaces.outside_uid
    )];
    let task_limit = rlimits::nproc(0, namespaces.task_limit(policy.limits.tasks));
    let user_database = [Path::new(PASSWD), Path::new(GROUP)];
    // The mounts' binds are in scratch, under its rule; a read-only one is a read-only mount.
    let exec = confine(&policy, Some(SANDBOX_USER.to_string()), &user_database, &[], &mut layers)?;
    layers.push(if namespaces.outside_uid == 0 {
        "tasks: NOT bounded by RLIMIT_NPROC (uid 0 outside: the kernel exempts root)".to_string()
    } else {
        format!("tasks: at most {} (RLIMIT_NPROC in the run's user namespace)", policy.limits.tasks)
    });
    finish(&policy, exec, Some(task_limit), false, layers)
}

/// Degraded mode (no user namespaces), if the policy allows it: Landlock, seccomp (denying metadata changes
/// everywhere) and rlimits, as the server's user.
fn run_degraded(policy: &Policy, uid: u32, why: std::io::Error) -> Result<Infallible, StepError> {
    if !policy.allow_degraded {
        return step(
            "refusing to run degraded",
            Err(std::io::Error::other(format!(
                "user namespaces are unavailable ({why}), so programs could learn which host files exist; \
                 enable them, or set execution.allow_degraded: true to run programs without them"
            ))),
        );
    }
    let mut layers = vec![format!("{DEGRADED_LAYER} ({why})")];
    // The program's user is ours: its name is looked up now (the host's user database is out of reach once
    // Landlock applies). RLIMIT_NPROC counts every task of our user (and root is exempt from it).
    let user_name = crate::host::user_name(uid);
    let task_limit = (uid != 0).then(|| rlimits::nproc(rlimits::tasks_of_user(uid), policy.limits.tasks));
    // No binds without a mount namespace: each folder is a symlink in scratch, reachable through Landlock's
    // rules for it.
    step("linking execution.mounts into scratch", crate::mounts::link_into(&policy.scratch, &policy.mounts))?;
    let exec = confine(policy, user_name, &[], &policy.mounts, &mut layers)?;
    layers.push(match task_limit {
        Some(_) => format!(
            "tasks: at most {} more than this user runs (RLIMIT_NPROC, shared with its other processes)",
            policy.limits.tasks
        ),
        None => "tasks: NOT bounded (root is exempt from RLIMIT_NPROC)".to_string(),
    });
    finish(policy, exec, task_limit, true, layers)
}

/// The layers both modes share, in order: the scratch directory as working directory, no inherited files,
/// no_new_privs, Landlock (with rules of their own for `folders`), no capabilities; returns the prepared exec
/// of the interpreter.
fn confine(
    policy: &Policy,
    user_name: Option<String>,
    also_readable: &[&Path],
    folders: &[Mount],
    layers: &mut Vec<String>,
) -> Result<Exec, StepError> {
    step("entering the scratch directory", std::env::set_current_dir(&policy.scratch))?;
    // SAFETY: close_range on our own fd table; 0, 1 and 2 stay (the channel and diagnostics).
    check("closing inherited files", unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) })?;
    // SAFETY: prctl with integer arguments.
    check("setting no_new_privs", unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long })?;
    layers.push(restrict_with_landlock(policy, also_readable, folders)?);
    drop_capabilities()?;
    layers.push("capabilities dropped, no_new_privs".to_string());
    Exec::new(policy, user_name.as_deref())
}

/// The last steps: rlimits (with the task limit), the layer report, seccomp, exec.
fn finish(
    policy: &Policy,
    exec: Exec,
    task_limit: Option<rlimits::Rlimit>,
    deny_metadata: bool,
    mut layers: Vec<String>,
) -> Result<Infallible, StepError> {
    let cgroup = policy.cgroup.as_ref();
    let memory = MemoryBound::for_host(rlimits::Os::CURRENT, cgroup.is_some_and(|c| c.bounds_memory));
    let mut limits = rlimits::for_run(&policy.limits, policy.cpu_seconds, memory);
    limits.extend(task_limit);
    step("setting resource limits", rlimits::apply(&limits))?;
    layers.push(match cgroup {
        Some(cgroup) => {
            let mut bounds = vec![];
            if cgroup.bounds_tasks {
                bounds.push(format!("tasks at most {}", policy.limits.tasks));
            }
            if cgroup.bounds_memory {
                bounds.push(format!(
                    "memory at most {} MiB with scratch, no swap",
                    policy.limits.memory_mb + policy.limits.scratch_mb
                ));
            }
            if bounds.is_empty() {
                "the run's own cgroup (killed whole)".to_string()
            } else {
                format!("the run's own cgroup ({}; killed whole)", bounds.join(", "))
            }
        }
        None => "no cgroup of its own".to_string(),
    });
    layers.push(match memory {
        MemoryBound::Cgroup => "memory: the cgroup's".to_string(),
        MemoryBound::Watch => "memory: watched by the server".to_string(),
        MemoryBound::Rlimits => format!(
            "memory: RLIMIT_DATA {} MiB (private memory), RLIMIT_AS {} MiB (with room for stacks and arenas)",
            policy.limits.memory_mb,
            policy.limits.address_space_bytes() >> 20
        ),
    });
    // Without namespaces every host file is on its own writable mount: metadata changes are denied everywhere.
    layers.push(if deny_metadata { "seccomp (metadata changes denied everywhere)" } else { "seccomp" }.to_string());
    eprintln!("{LAYERS_PREFIX}{}", layers.join("; "));
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let target = seccomp::Target { pid, exec_path: exec.path.as_ptr() as u64, deny_metadata };
    let filters = step("building the seccomp filters", seccomp::filters(target))?;
    for filter in &filters {
        step("installing a seccomp filter", seccompiler::apply_filter(filter))?;
    }
    exec.run()
}

fn set_parent_death_signal() -> Result<(), StepError> {
    // SAFETY: prctl with integer arguments.
    check("setting the parent-death signal", unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) as libc::c_long
    })
}

/// The host uid a root server's programs run as (`nobody`): never root, and subject to RLIMIT_NPROC, from
/// which the kernel exempts root.
const OUTSIDE_UID_FOR_ROOT: u32 = 65534;

enum Entered {
    /// This process is pid 1 of a new pid namespace, in new user, mount, network, IPC and UTS namespaces.
    Namespaces(Namespaces),
    /// No user namespace could be created (why).
    Degraded(std::io::Error),
}

struct Namespaces {
    /// The host uid the sandbox's uid maps to.
    outside_uid: u32,
    /// Whether this process still has to switch to the sandbox's ids (a root server's: it keeps the server's
    /// own uid, unmapped in the namespace, until the bind sources are open).
    switch_ids: bool,
    /// The read end of a pipe the parent holds open until it dies.
    parent_alive: OwnedFd,
}

impl Namespaces {
    fn become_the_sandbox_user(&self) -> Result<(), StepError> {
        if self.switch_ids {
            let id = SANDBOX_ID;
            // SAFETY: id syscalls with ids mapped in our user namespace, where we hold CAP_SETUID/CAP_SETGID.
            unsafe {
                check("switching to the sandbox's group", libc::setresgid(id, id, id) as libc::c_long)?;
                check("switching to the sandbox's user", libc::setresuid(id, id, id) as libc::c_long)?;
            }
            // An id change clears the parent-death signal: set it again, then make sure the parent is alive.
            set_parent_death_signal()?;
        }
        check_parent_alive(&self.parent_alive)
    }

    /// RLIMIT_NPROC for `tasks` in the run: it counts the tasks of the sandbox's uid in the run's own user
    /// namespace, where the waiting parent counts too when it is inside (non-root servers).
    fn task_limit(&self, tasks: u64) -> u64 {
        if self.switch_ids { tasks.saturating_sub(1) } else { tasks }
    }
}

/// Creates the namespaces; returns in the process that goes on to run the interpreter, pid 1 of its pid
/// namespace. The process that called it stays outside that pid namespace (it cannot be named from inside),
/// waits, and ends as the interpreter ended: it never returns.
///
/// A non-root server can only map its own uid: this process makes the user and pid namespaces and maps its
/// ids, and the child makes the rest. A root server's process makes the pid namespace, and the child the user
/// namespace, whose ids the parent then maps to `nobody` (holding CAP_SETUID outside): programs never run as
/// host root, and RLIMIT_NPROC (which root is exempt from) bounds their tasks.
fn enter_namespaces(uid: u32, gid: u32) -> Result<Entered, StepError> {
    const REST: libc::c_int = libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    let (alive_read, alive_write) = pipe("creating the parent-death pipe")?;
    if uid != 0 {
        // SAFETY: unshare with flags only; this process has a single thread.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
            return Ok(Entered::Degraded(unshare_error()));
        }
        // A new user namespace changes our credentials, which clears the parent-death signal.
        set_parent_death_signal()?;
        map_ids("self", uid, gid)?;
        if fork()? > 0 {
            drop(alive_read);
            relay(&alive_write)
        }
        drop(alive_write);
        set_parent_death_signal()?;
        check_parent_alive(&alive_read)?;
        // SAFETY: unshare with flags only; single-threaded.
        check("creating namespaces", unsafe { libc::unshare(REST) } as libc::c_long)?;
        return Ok(Entered::Namespaces(Namespaces { outside_uid: uid, switch_ids: false, parent_alive: alive_read }));
    }
    // SAFETY: unshare with flags only; single-threaded.
    if unsafe { libc::unshare(libc::CLONE_NEWPID) } != 0 {
        return Ok(Entered::Degraded(unshare_error()));
    }
    let (ready_read, ready_write) = pipe("creating the namespace pipe")?;
    let child = fork()?;
    if child > 0 {
        drop((alive_read, ready_write));
        // The child's answer: 0 once its user namespace exists, else the errno of its unshare.
        let mut answer = [0u8; 4];
        let got = File::from(ready_read).read_exact(&mut answer);
        let errno = i32::from_ne_bytes(answer);
        if got.is_err() || errno != 0 {
            reap(child);
            return match got {
                Err(e) => step("creating the user namespace (the child ended)", Err(e)),
                Ok(()) => {
                    let error = std::io::Error::from_raw_os_error(errno);
                    Ok(Entered::Degraded(std::io::Error::new(error.kind(), format!("unshare: {error}"))))
                }
            };
        }
        let outside_uid = map_root_ids(&child.to_string(), uid, gid)?;
        let mut start = File::from(step("the parent-death pipe", alive_write.try_clone())?);
        step("starting the sandbox's first process", start.write_all(&outside_uid.to_ne_bytes()))?;
        relay(&alive_write)
    }
    drop((alive_write, ready_read));
    set_parent_death_signal()?;
    // SAFETY: unshare with flags only; single-threaded.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
    let errno = if unshared { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM) };
    set_parent_death_signal()?;
    let told = File::from(ready_write).write_all(&errno.to_ne_bytes());
    // Wait for the parent to map our ids (it writes the uid they map to); end if it died instead, or went on
    // degraded.
    let mut start = [0u8; 4];
    let started = told.is_ok()
        && File::from(step("the parent-death pipe", alive_read.try_clone())?).read_exact(&mut start).is_ok();
    if !unshared || !started {
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(HELPER_FAILED) }
    }
    // SAFETY: unshare with flags only; single-threaded; we hold every capability in our new user namespace.
    check("creating namespaces", unsafe { libc::unshare(REST) } as libc::c_long)?;
    Ok(Entered::Namespaces(Namespaces {
        outside_uid: u32::from_ne_bytes(start),
        switch_ids: true,
        parent_alive: alive_read,
    }))
}

fn unshare_error() -> std::io::Error {
    let error = std::io::Error::last_os_error();
    std::io::Error::new(error.kind(), format!("unshare: {error}"))
}

fn pipe(what: &str) -> Result<(OwnedFd, OwnedFd), StepError> {
    step(what, crate::zygote::pipe_pair())
}

fn fork() -> Result<libc::pid_t, StepError> {
    // SAFETY: fork in a single-threaded process; each side goes on with plain code and syscalls.
    let child = unsafe { libc::fork() };
    check("forking the sandbox's first process", child as libc::c_long)?;
    Ok(child)
}

/// Ends this process if the parent's end of the pipe is closed (it died before our parent-death signal was
/// set).
fn check_parent_alive(parent_alive: &OwnedFd) -> Result<(), StepError> {
    let mut poll = libc::pollfd { fd: parent_alive.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: poll of one fd we own, without waiting.
    if unsafe { libc::poll(&mut poll, 1, 0) } != 0 {
        // SAFETY: _exit has no preconditions.
        unsafe { libc::_exit(HELPER_FAILED) }
    }
    Ok(())
}

fn reap(child: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid of our own child into a local.
    unsafe { libc::waitpid(child, &mut status, 0) };
}

/// The parent's part: it keeps no channel end and no capability, holds `alive` open (the child's check), waits
/// for its child and ends as it ended (its exit status, or killed by the same signal), so that the server sees
/// the interpreter's end in the helper's. Both stay in the process group the server kills.
fn relay(alive: &OwnedFd) -> ! {
    let keep = alive.as_raw_fd() as u32;
    // SAFETY: closes our copies of the channel and every fd but stderr and `alive`; then prctl.
    unsafe {
        libc::close(0);
        libc::close(1);
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    let _ = drop_capabilities();
    relay_the_end_of()
}

/// Waits for our one child and ends as it ended.
fn relay_the_end_of() -> ! {
    let mut status = 0;
    // SAFETY: waitpid of our only child into a local; EINTR is retried.
    while unsafe { libc::waitpid(-1, &mut status, 0) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: _exit has no preconditions.
            unsafe { libc::_exit(HELPER_FAILED) }
        }
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // SAFETY: the signal's default action (death, without a core: RLIMIT_CORE is 0), unblocked, at ourselves.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
    }
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { 128 + libc::WTERMSIG(status) };
    // SAFETY: _exit has no preconditions.
    unsafe { libc::_exit(code) }
}

/// An `O_PATH` fd of `path` (with `flags` added, e.g. `O_DIRECTORY`).
fn open_path(path: &Path, flags: libc::c_int) -> std::io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: valid NUL-terminated path; the fd is owned right away.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// A root server's mapping of the child's ids: to `nobody` (65534), or, where this user namespace has no such
/// id (a container's root with a short id map), to its own. Returns the uid mapped to.
fn map_root_ids(child: &str, uid: u32, gid: u32) -> Result<u32, StepError> {
    let write = |file: &str, text: String| {
        let path = format!("/proc/{child}/{file}");
        File::options().write(true).open(&path).and_then(|mut f| f.write_all(text.as_bytes()))
    };
    step("denying setgroups in the sandbox", write("setgroups", "deny".to_string()))?;
    let mut outside_uid = OUTSIDE_UID_FOR_ROOT;
    if write("uid_map", format!("{SANDBOX_ID} {OUTSIDE_UID_FOR_ROOT} 1\n")).is_err() {
        step("mapping the sandbox's uid", write("uid_map", format!("{SANDBOX_ID} {uid} 1\n")))?;
        outside_uid = uid;
    }
    if write("gid_map", format!("{SANDBOX_ID} {OUTSIDE_UID_FOR_ROOT} 1\n")).is_err() {
        step("mapping the sandbox's gid", write("gid_map", format!("{SANDBOX_ID} {gid} 1\n")))?;
    }
    Ok(outside_uid)
}

/// Maps the sandbox's ids to `uid`/`gid` in the user namespace of `/proc/<process>` (`self`: our own; an
/// unprivileged process may only map its own ids).
fn map_ids(process: &str, uid: u32, gid: u32) -> Result<(), StepError> {
    let write = |file: &str, text: String| -> Result<(), StepError> {
        let path = format!("/proc/{process}/{file}");
        let result = File::options().write(true).open(&path).and_then(|mut f| f.write_all(text.as_bytes()));
        step(format!("writing {path}"), result)
    };
    write("setgroups", "deny".to_string())?;
    write("uid_map", format!("{SANDBOX_ID} {uid} 1\n"))?;
    write("gid_map", format!("{SANDBOX_ID} {gid} 1\n"))
}

fn c_path(path: &Path) -> Result<CString, StepError> {
    step(format!("path {}", path.display()), CString::new(path.as_os_str().as_bytes()))
}

fn mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Result<(), StepError> {
    let source = source.map(c_path).transpose()?;
    let target_c = c_path(target)?;
    let fstype = fstype.map(|t| CString::new(t).expect("no NUL"));
    let data = data.map(|d| CString::new(d).expect("no NUL"));
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: all pointers are NUL-terminated strings or null, valid for the call.
    let rc = unsafe { libc::mount(ptr(&source), target_c.as_ptr(), ptr(&fstype), flags, ptr(&data).cast()) };
    check(&format!("mounting {}", target.display()), rc as libc::c_long)
}

/// Where the new root is assembled (a fresh tmpfs, visible only in our mount namespace).
const STAGING: &str = "/tmp";
/// The user database of the minimal root: one user (the sandbox's uid) and its group, so that `getpass` and
/// `pwd` find the program's user.
const PASSWD: &str = "/etc/passwd";
const GROUP: &str = "/etc/group";
/// The name of the program's user in its namespace.
pub(super) const SANDBOX_USER: &str = "ptc";

/// Writes the minimal root's `/etc/passwd` and `/etc/group` (into `etc` of the staging root); the user's home
/// is the scratch directory.
fn write_user_database(etc: &Path, scratch: &Path) -> Result<(), StepError> {
    step("creating /etc", std::fs::create_dir_all(etc))?;
    let home = scratch.display();
    let passwd = format!("{SANDBOX_USER}:x:{SANDBOX_ID}:{SANDBOX_ID}:ptc-mcp sandbox:{home}:/nonexistent\n");
    step("writing /etc/passwd", std::fs::write(etc.join("passwd"), passwd))?;
    step("writing /etc/group", std::fs::write(etc.join("group"), format!("{SANDBOX_USER}:x:{SANDBOX_ID}:\n")))
}

/// Builds the minimal root: an empty tmpfs holding read-only binds of the interpreter's paths, the
/// devices, a sized tmpfs scratch with the mounts' folders bound in it, and nothing else; then makes it the
/// root.
fn build_root(policy: &Policy, sources: &[OwnedFd], folders: &[OwnedFd]) -> Result<(), StepError> {
    let staging = Path::new(STAGING);
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None)?;
    mount(
        Some(Path::new("tmpfs")),
        staging,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=1m,mode=755"),
    )?;
    let inside = |path: &Path| staging.join(path.strip_prefix("/").unwrap_or(path));
    for (bind, source) in policy.binds.iter().zip(sources) {
        bind_read_only(bind, source, &inside(&bind.path))?;
    }
    for (link, target) in &policy.symlinks {
        let at = inside(link);
        step(format!("creating {}", link.display()), std::fs::create_dir_all(at.parent().unwrap_or(staging)))?;
        step(format!("linking {}", link.display()), std::os::unix::fs::symlink(target, &at))?;
    }
    for dir in &policy.hidden {
        mount(
            Some(Path::new("tmpfs")),
            &inside(dir),
            Some("tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("size=4k,mode=555"),
        )?;
    }
    write_user_database(&staging.join("etc"), &policy.scratch)?;
    let scratch = inside(&policy.scratch);
    step("creating the scratch directory", std::fs::create_dir_all(&scratch))?;
    let options = format!("size={}m,mode=700,uid={SANDBOX_ID},gid={SANDBOX_ID}", policy.limits.scratch_mb);
    mount(
        Some(Path::new("tmpfs")),
        &scratch,
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        Some(&options),
    )?;
    for (mount, folder) in policy.mounts.iter().zip(folders) {
        bind_folder(mount, folder, &scratch.join(&mount.name))?;
    }
    let old = staging.join(".old");
    step("creating the old-root mount point", std::fs::create_dir(&old))?;
    let (new_c, old_c) = (c_path(staging)?, c_path(&old)?);
    // SAFETY: pivot_root with two valid paths.
    check("pivoting into the new root", unsafe {
        libc::syscall(libc::SYS_pivot_root, new_c.as_ptr(), old_c.as_ptr())
    })?;
    step("entering the new root", std::env::set_current_dir("/"))?;
    let old_c = c_path(Path::new("/.old"))?;
    // SAFETY: umount2 of a valid path.
    check("detaching the old root", unsafe { libc::umount2(old_c.as_ptr(), libc::MNT_DETACH) as libc::c_long })?;
    step("removing the old-root mount point", std::fs::remove_dir("/.old"))?;
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
        None,
    )
}

fn bind_read_only(bind: &Bind, source: &OwnedFd, target: &Path) -> Result<(), StepError> {
    let is_dir = step("inspecting a bind source", File::from(step("dup", source.try_clone())?).metadata())?.is_dir();
    if is_dir {
        step(format!("creating {}", target.display()), std::fs::create_dir_all(target))?;
    } else {
        step(format!("creating {}", target.display()), std::fs::create_dir_all(target.parent().unwrap_or(target)))?;
        step(format!("creating {}", target.display()), File::create(target))?;
    }
    let from = PathBuf::from(format!("/proc/self/fd/{}", source.as_raw_fd()));
    mount(Some(&from), target, None, libc::MS_BIND | libc::MS_REC, None)?;
    // A remount must keep the flags the kernel locked on the source mount, so start from those.
    let mut flags = locked_flags(target)? | libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOSUID;
    // Read-only everywhere: a read-only mount refuses changes of modes, owners, times and extended attributes
    // (which Landlock does not cover), while device nodes on it can still be written to.
    flags |= libc::MS_RDONLY;
    match bind.access {
        BindAccess::Exec => flags |= libc::MS_NODEV,
        BindAccess::Read => flags |= libc::MS_NODEV | libc::MS_NOEXEC,
        BindAccess::Device { .. } => flags |= libc::MS_NOEXEC,
    }
    mount(None, target, None, flags, None)
}

/// Binds a mount's folder at `target` in scratch: not recursively (file systems mounted inside the folder
/// stay out: a read-only remount would not reach them), never with devices, set-id or execution, and read-only
/// unless writable. Renames and hard links between it and anything else cross a mount: the kernel refuses
/// them (EXDEV).
fn bind_folder(mount: &Mount, folder: &OwnedFd, target: &Path) -> Result<(), StepError> {
    let what = format!("execution.mounts.{}", mount.name);
    step(format!("creating the mount point of {what}"), std::fs::create_dir(target))?;
    let from = PathBuf::from(format!("/proc/self/fd/{}", folder.as_raw_fd()));
    mount_folder(&what, Some(&from), target, libc::MS_BIND)?;
    let mut flags = locked_flags(target)? | libc::MS_REMOUNT | libc::MS_BIND;
    flags |= libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    if !mount.writable {
        flags |= libc::MS_RDONLY;
    }
    mount_folder(&what, None, target, flags)
}

/// A mount call for a mount's folder; the error names the key and the usual cause of EINVAL.
fn mount_folder(what: &str, source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> Result<(), StepError> {
    mount(source, target, None, flags, None).map_err(|e| {
        let locked = " (a folder with another file system mounted inside it cannot be shown: mount that one instead)";
        let hint = if e.to_string().contains("Invalid argument") { locked } else { "" };
        StepError { step: format!("binding {what}{hint}"), source: e.source }
    })
}

fn locked_flags(path: &Path) -> Result<libc::c_ulong, StepError> {
    let c = c_path(path)?;
    // SAFETY: statvfs into a zeroed struct with a valid path.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    check(&format!("statvfs {}", path.display()), unsafe { libc::statvfs(c.as_ptr(), &mut stat) as libc::c_long })?;
    let pairs = [
        (libc::ST_RDONLY, libc::MS_RDONLY),
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs.iter().filter(|(st, _)| stat.f_flag & st != 0).fold(0, |acc, (_, ms)| acc | ms))
}

/// Landlock: read (and execute where needed) on the interpreter's paths, read-write on scratch, read (or
/// scratch's rights, if writable) on `folders`, nothing else; no TCP; signals and abstract sockets only within
/// the sandbox. Refuses to go on unenforced. A read-only folder has no `Refer` right: nothing is linked or
/// renamed out of it (and nothing gains its write rights by a link into a writable place).
fn restrict_with_landlock(policy: &Policy, also_readable: &[&Path], folders: &[Mount]) -> Result<String, StepError> {
    let abi = LANDLOCK_ABI;
    let ruleset = Ruleset::default();
    let ruleset = step("landlock: filesystem access", ruleset.handle_access(AccessFs::from_all(abi)))?;
    let ruleset = step("landlock: network access", ruleset.handle_access(AccessNet::from_all(abi)))?;
    let ruleset = step("landlock: scopes", ruleset.scope(Scope::from_all(abi)))?;
    let mut ruleset = step("landlock: creating the ruleset", ruleset.create())?;
    for (path, access) in landlock_rules(policy, also_readable, folders, abi) {
        let fd = step(format!("landlock: opening {}", path.display()), PathFd::new(path))?;
        ruleset = step("landlock: adding a rule", ruleset.add_rule(PathBeneath::new(fd, access)))?;
    }
    let status = step("landlock: restricting", ruleset.restrict_self())?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(format!("landlock ABI {} fully enforced", abi as u32)),
        RulesetStatus::PartiallyEnforced => Ok("landlock partially enforced (older kernel)".to_string()),
        RulesetStatus::NotEnforced => step(
            "landlock",
            Err(std::io::Error::other("not enforced by this kernel (needs Linux 5.13+ with Landlock enabled)")),
        ),
    }
}

/// The paths [`restrict_with_landlock`] allows, each with its rights (a file's limited to those of files).
fn landlock_rules<'p>(
    policy: &'p Policy,
    also_readable: &[&'p Path],
    folders: &'p [Mount],
    abi: ABI,
) -> Vec<(&'p Path, BitFlags<AccessFs>)> {
    let mut rules: Vec<(&Path, BitFlags<AccessFs>)> = Vec::new();
    for bind in &policy.binds {
        let access = match bind.access {
            BindAccess::Exec => AccessFs::from_read(abi),
            BindAccess::Read => AccessFs::ReadFile | AccessFs::ReadDir,
            BindAccess::Device { write: true } => AccessFs::from_file(abi) & !AccessFs::Execute,
            BindAccess::Device { write: false } => AccessFs::ReadFile.into(),
        };
        rules.push((&bind.path, access));
    }
    rules.extend(also_readable.iter().map(|path| (*path, BitFlags::from(AccessFs::ReadFile))));
    let scratch = AccessFs::from_all(abi) & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock);
    rules.push((&policy.scratch, scratch));
    for folder in folders {
        let access = if folder.writable { scratch } else { AccessFs::ReadFile | AccessFs::ReadDir };
        rules.push((&folder.path, access));
    }
    for (path, access) in &mut rules {
        if !std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
            *access &= AccessFs::from_file(abi);
        }
    }
    rules
}

/// Zygote mode, in place of [`confine`] and [`finish`]: execs the zygote in these namespaces and this root,
/// with what its forks apply to themselves (zygote.py) — the Landlock rules of a fresh start for this kernel's
/// ABI, its seccomp filters (for pid 1, no exec at all) — and fd 3, a handle on /proc with which they map the
/// ids of their own user namespaces. The zygote itself keeps no capability; its forks hold their own
/// namespaces' only.
fn exec_zygote(policy: &Policy, proc: OwnedFd) -> Result<Infallible, StepError> {
    step("entering the scratch directory", std::env::set_current_dir(&policy.scratch))?;
    // SAFETY: the version query of landlock_create_ruleset takes no ruleset.
    let version = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, 0usize, 0usize, 1u32) };
    if version < 1 {
        return step("landlock", Err(std::io::Error::other("not supported by this kernel (needs Linux 5.13+)")));
    }
    let abi = ABI::from(version.min(LANDLOCK_ABI as libc::c_long) as i32);
    let handled = AccessFs::from_all(abi);
    let rules: Vec<serde_json::Value> = landlock_rules(policy, &[Path::new(PASSWD), Path::new(GROUP)], &[], abi)
        .into_iter()
        .map(|(path, access)| serde_json::json!([hex(path.as_os_str().as_bytes()), (access & handled).bits()]))
        .collect();
    let target = seccomp::Target { pid: 1, exec_path: 0, deny_metadata: false };
    let filters = step("building the seccomp filters", seccomp::filters(target))?;
    let filters: Vec<String> = filters.iter().map(|filter| hex(&filter_bytes(filter))).collect();
    let confinement = serde_json::json!({
        "backend": "landlock",
        "scratch": hex(policy.scratch.as_os_str().as_bytes()),
        "sandbox_id": SANDBOX_ID,
        "proc_fd": ZYGOTE_PROC_FD,
        "landlock": {
            "fs": handled.bits(),
            "net": AccessNet::from_all(abi).bits(),
            "scoped": Scope::from_all(abi).bits(),
            "rules": rules,
        },
        "seccomp": filters,
    });
    let raw = std::os::fd::IntoRawFd::into_raw_fd(proc);
    // SAFETY: fd syscalls on our own table: /proc to fd 3 (inheritable), then nothing past it.
    unsafe {
        if raw != ZYGOTE_PROC_FD {
            check("keeping /proc", libc::dup2(raw, ZYGOTE_PROC_FD) as libc::c_long)?;
            libc::close(raw);
        }
        check("keeping /proc", libc::fcntl(ZYGOTE_PROC_FD, libc::F_SETFD, 0) as libc::c_long)?;
        check("closing inherited files", libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32))?;
        check("setting no_new_privs", libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
    }
    drop_capabilities()?;
    let mut zygote = policy.clone();
    zygote.args = crate::python::isolated_args(crate::protocol::ZYGOTE_SOURCE);
    zygote.args.extend(policy.args.iter().cloned());
    zygote.args.push(confinement.to_string());
    Exec::new(&zygote, Some(SANDBOX_USER))?.run()
}

/// Where the zygote finds its handle on /proc.
const ZYGOTE_PROC_FD: libc::c_int = 3;

/// A seccomp filter as the kernel reads it: `struct sock_filter`s.
fn filter_bytes(filter: &seccompiler::BpfProgram) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(filter.len() * 8);
    for instruction in filter {
        bytes.extend(instruction.code.to_ne_bytes());
        bytes.extend([instruction.jt, instruction.jf]);
        bytes.extend(instruction.k.to_ne_bytes());
    }
    bytes
}

fn drop_capabilities() -> Result<(), StepError> {
    // The bounding set shrinks only with CAP_SETPCAP (held in our own user namespace, or by root): without it
    // the drops fail, and the empty permitted set below is what counts.
    for cap in 0..=63 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability ends the loop.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            break;
        }
    }
    // SAFETY: prctl with integer arguments.
    check("clearing ambient capabilities", unsafe {
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) as libc::c_long
    })?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header { version: VERSION_3, pid: 0 };
    let data = [Data::default(); 2];
    // SAFETY: capset with a v3 header and two zeroed data structs, as the ABI requires.
    check("dropping capabilities", unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) })
}

/// The interpreter's exec, prepared before the seccomp filter so that its path has a fixed address.
struct Exec {
    path: CString,
    args: Vec<CString>,
    env: Vec<CString>,
}

impl Exec {
    /// The interpreter's command line and environment: `HOME` and `TMPDIR` (scratch), `MALLOC_ARENA_MAX`, and
    /// `LOGNAME` and `USER` (`getpass.getuser()`) when the user has a name.
    fn new(policy: &Policy, user_name: Option<&str>) -> Result<Exec, StepError> {
        let path = c_path(&policy.program)?;
        let mut args = vec![path.clone()];
        for arg in &policy.args {
            args.push(step("an argument", CString::new(arg.as_bytes()))?);
        }
        let scratch = policy.scratch.as_os_str().as_bytes();
        let mut vars =
            vec![("HOME", scratch), ("TMPDIR", scratch), (MALLOC_ARENA_MAX.0, MALLOC_ARENA_MAX.1.as_bytes())];
        if let Some(name) = user_name {
            vars.extend([("LOGNAME", name.as_bytes()), ("USER", name.as_bytes())]);
        }
        let env =
            vars.iter().map(|(k, v)| CString::new([k.as_bytes(), b"=", v].concat())).collect::<Result<Vec<_>, _>>();
        Ok(Exec { path, args, env: step("the environment", env)? })
    }

    fn run(&self) -> Result<Infallible, StepError> {
        let mut argv: Vec<*const libc::c_char> = self.args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const libc::c_char> = self.env.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        // SAFETY: NUL-terminated strings and null-terminated arrays that outlive the call.
        unsafe { libc::execve(self.path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        step("starting the interpreter", Err(std::io::Error::last_os_error()))
    }
}
