//! The landlock helper. The server re-executes its own binary as `ptc-mcp __landlock-helper <policy>`; this
//! fresh, single-threaded process confines itself layer by layer and finally execs the interpreter, so no
//! confinement is ever applied inside the multi-threaded server. On any failure it exits with
//! [`HELPER_FAILED`] after one `ptc-landlock: <what failed>` line on stderr: it never runs the interpreter
//! with a layer missing that it meant to apply.

use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope,
};

use super::policy::{Bind, BindAccess, Policy, SANDBOX_ID};
use super::{DEGRADED_LAYER, LAYERS_PREFIX, seccomp};
use crate::rlimits;

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
    // SAFETY: plain id syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        // SAFETY: setgroups with an empty list.
        check("dropping supplementary groups", unsafe { libc::setgroups(0, std::ptr::null()) } as libc::c_long)?;
    }
    let mut layers = Vec::new();
    // SAFETY: unshare with flags only; this process has a single thread.
    let unshared = unsafe {
        libc::unshare(
            libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS,
        )
    } == 0;
    if unshared {
        // Our own ids are the only ones we may map. A root server's programs thus keep uid 0 outside, but
        // hold no capability outside their namespace and none inside once the interpreter is exec'd.
        map_ids(uid, gid)?;
        // Bind sources are opened inside the new mount namespace: mounts from another one cannot be bound.
        let sources: Vec<OwnedFd> = policy
            .binds
            .iter()
            .map(|b| step(format!("opening {}", b.path.display()), open_path(&b.path)))
            .collect::<Result<_, _>>()?;
        build_root(&policy, &sources)?;
        layers.push(format!(
            "user/mount/pid/net/ipc/uts namespaces with a minimal root and a {} MiB tmpfs scratch",
            policy.limits.scratch_mb
        ));
    } else {
        let why = std::io::Error::last_os_error();
        if !policy.allow_degraded {
            return step(
                "refusing to run degraded",
                Err(std::io::Error::other(format!(
                    "user namespaces are unavailable (unshare: {why}), so programs could learn which host files \
                     exist; enable them, or set execution.allow_degraded: true to run programs without them"
                ))),
            );
        }
        layers.push(format!("{DEGRADED_LAYER} (unshare: {why})"));
    }
    // The program's user: the sandbox's own (with an entry in the minimal root's user database), else ours
    // by name, looked up now (the host's user database is out of reach once Landlock applies).
    let user_name = if unshared { Some(SANDBOX_USER.to_string()) } else { host_user_name(uid) };
    step("entering the scratch directory", std::env::set_current_dir(&policy.scratch))?;
    // SAFETY: close_range on our own fd table; 0, 1 and 2 stay (the channel and diagnostics).
    check("closing inherited files", unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) })?;
    // SAFETY: prctl with integer arguments; set after the id changes above, which would clear it.
    check("setting the parent-death signal", unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) as libc::c_long
    })?;
    check("setting no_new_privs", unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long })?;
    let user_database: &[&Path] = if unshared { &[Path::new(PASSWD), Path::new(GROUP)] } else { &[] };
    layers.push(restrict_with_landlock(&policy, user_database)?);
    drop_capabilities(unshared)?;
    layers.push("capabilities dropped, no_new_privs".to_string());
    let exec = Exec::new(&policy, user_name.as_deref())?;
    step("setting resource limits", rlimits::apply(&rlimits::for_run(&policy.limits, policy.cpu_seconds)))?;
    // Without namespaces every host file is on its own writable mount: metadata changes are denied everywhere.
    let deny_metadata = !unshared;
    layers.push(if deny_metadata { "seccomp (metadata changes denied everywhere)" } else { "seccomp" }.to_string());
    if unshared {
        // Only the helper's first child is in the new pid namespace (as its pid 1): it goes on, and this
        // process stays behind to pass on how it ended.
        become_pid_1()?;
    }
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

/// Forks; returns in the child, pid 1 of the pid namespace unshared before, which goes on to exec the
/// interpreter. The parent never returns: it waits for the child and ends the same way (its exit status, or
/// killed by the same signal), so that the server sees the interpreter's end in the helper's. Everything else
/// is already in force in both (Landlock, capabilities, no_new_privs, rlimits, the parent-death signal), and
/// both stay in the helper's process group, which the server kills. The child cannot name the parent (it is
/// outside the child's pid namespace). The child dies with the parent: its parent-death signal is set, then it
/// checks the parent has not died in between.
fn become_pid_1() -> Result<(), StepError> {
    let mut pipe = [0; 2];
    // SAFETY: pipe2 into a local array.
    check("creating the parent-death pipe", unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } as _)?;
    let [read_end, write_end] = pipe;
    // SAFETY: fork in a single-threaded process; each side only makes syscalls afterwards.
    let child = unsafe { libc::fork() };
    check("forking pid 1 of the pid namespace", child as _)?;
    if child > 0 {
        // SAFETY: the parent keeps the write end (it closes when the parent dies) and no channel end.
        unsafe {
            libc::close(read_end);
            libc::close(0);
            libc::close(1);
        }
        relay_the_end_of(child)
    }
    // SAFETY: prctl with integer arguments; then a poll of our own pipe, closed after.
    unsafe {
        libc::close(write_end);
        check(
            "setting the parent-death signal",
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) as libc::c_long,
        )?;
        let mut poll = libc::pollfd { fd: read_end, events: libc::POLLIN, revents: 0 };
        let parent_gone = libc::poll(&mut poll, 1, 0) != 0;
        libc::close(read_end);
        if parent_gone {
            libc::_exit(HELPER_FAILED);
        }
    }
    Ok(())
}

/// Waits for `child` and ends as it ended.
fn relay_the_end_of(child: libc::pid_t) -> ! {
    let mut status = 0;
    // SAFETY: waitpid of our own child into a local; EINTR is retried.
    while unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
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

fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: valid NUL-terminated path; the fd is owned right away.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nobody else.
    Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) })
}

/// Maps the sandbox's ids to ours (the one mapping an unprivileged process may write).
fn map_ids(uid: u32, gid: u32) -> Result<(), StepError> {
    let write = |file: &str, text: String| -> Result<(), StepError> {
        let result = File::options().write(true).open(file).and_then(|mut f| f.write_all(text.as_bytes()));
        step(format!("writing {file}"), result)
    };
    write("/proc/self/setgroups", "deny".to_string())?;
    write("/proc/self/uid_map", format!("{SANDBOX_ID} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{SANDBOX_ID} {gid} 1\n"))
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
const SANDBOX_USER: &str = "ptc";

/// Writes the minimal root's `/etc/passwd` and `/etc/group` (into `etc` of the staging root); the user's home
/// is the scratch directory.
fn write_user_database(etc: &Path, scratch: &Path) -> Result<(), StepError> {
    step("creating /etc", std::fs::create_dir_all(etc))?;
    let home = scratch.display();
    let passwd = format!("{SANDBOX_USER}:x:{SANDBOX_ID}:{SANDBOX_ID}:ptc-mcp sandbox:{home}:/nonexistent\n");
    step("writing /etc/passwd", std::fs::write(etc.join("passwd"), passwd))?;
    step("writing /etc/group", std::fs::write(etc.join("group"), format!("{SANDBOX_USER}:x:{SANDBOX_ID}:\n")))
}

/// The host's name for `uid`, if its user database has one.
fn host_user_name(uid: libc::uid_t) -> Option<String> {
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

/// Builds the minimal root: an empty tmpfs holding read-only binds of the interpreter's paths, the
/// devices, a sized tmpfs scratch, and nothing else; then makes it the root.
fn build_root(policy: &Policy, sources: &[OwnedFd]) -> Result<(), StepError> {
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

/// Landlock: read (and execute where needed) on the interpreter's paths, read-write on scratch, nothing
/// else; no TCP; signals and abstract sockets only within the sandbox. Refuses to go on unenforced.
fn restrict_with_landlock(policy: &Policy, also_readable: &[&Path]) -> Result<String, StepError> {
    let abi = LANDLOCK_ABI;
    let ruleset = Ruleset::default();
    let ruleset = step("landlock: filesystem access", ruleset.handle_access(AccessFs::from_all(abi)))?;
    let ruleset = step("landlock: network access", ruleset.handle_access(AccessNet::from_all(abi)))?;
    let ruleset = step("landlock: scopes", ruleset.scope(Scope::from_all(abi)))?;
    let mut ruleset = step("landlock: creating the ruleset", ruleset.create())?;
    let rule = |path: &Path, access: BitFlags<AccessFs>| -> Result<PathBeneath<PathFd>, StepError> {
        let fd = step(format!("landlock: opening {}", path.display()), PathFd::new(path))?;
        let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
        let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
        Ok(PathBeneath::new(fd, access))
    };
    for bind in &policy.binds {
        let access = match bind.access {
            BindAccess::Exec => AccessFs::from_read(abi),
            BindAccess::Read => AccessFs::ReadFile | AccessFs::ReadDir,
            BindAccess::Device { write: true } => AccessFs::from_file(abi) & !AccessFs::Execute,
            BindAccess::Device { write: false } => AccessFs::ReadFile.into(),
        };
        ruleset = step("landlock: adding a rule", ruleset.add_rule(rule(&bind.path, access)?))?;
    }
    for path in also_readable {
        ruleset = step("landlock: adding a rule", ruleset.add_rule(rule(path, AccessFs::ReadFile.into())?))?;
    }
    let scratch = AccessFs::from_all(abi) & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock);
    ruleset = step("landlock: adding the scratch rule", ruleset.add_rule(rule(&policy.scratch, scratch)?))?;
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

fn drop_capabilities(in_own_namespace: bool) -> Result<(), StepError> {
    if in_own_namespace {
        // The bounding set can only shrink with CAP_SETPCAP, which we hold in our own user namespace.
        for cap in 0..=63 {
            // SAFETY: prctl with integer arguments; EINVAL past the last capability ends the loop.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                break;
            }
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
    /// The interpreter's command line and environment: `HOME` and `TMPDIR` (scratch), and `LOGNAME` and
    /// `USER` (`getpass.getuser()`) when the user has a name.
    fn new(policy: &Policy, user_name: Option<&str>) -> Result<Exec, StepError> {
        let path = c_path(&policy.program)?;
        let mut args = vec![path.clone()];
        for arg in &policy.args {
            args.push(step("an argument", CString::new(arg.as_bytes()))?);
        }
        let scratch = policy.scratch.as_os_str().as_bytes();
        let mut vars = vec![("HOME", scratch), ("TMPDIR", scratch)];
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
