//! Sandbox escape suite: every attempt a program could make to get out of its sandbox (SPEC §5), one test per
//! attempt, plus functional checks that ordinary programs keep working inside every sandbox.
//!
//! Each attempt is a short stdlib-only Python program (ctypes for raw x86_64 syscalls) run through
//! `execute_program`. It prints one verdict line: `BLOCKED: <how it failed>`, `ESCAPED: <what it got>` or, when it
//! cannot be made on this machine (raw syscalls on a non-x86_64 host), `SKIPPED: <why>`. A shared prelude
//! ([`PRELUDE`]) provides `probe()`, which runs the attempt and prints the verdict, and `syscall()`.
//!
//! The sandbox comes from `PTC_TEST_SANDBOX` (default `none`):
//!
//! ```text
//! cargo test --test integration escape                             # none: what it does NOT stop
//! PTC_TEST_SANDBOX=landlock cargo test --test integration escape   # every attempt must be BLOCKED
//! PTC_TEST_SANDBOX=docker   cargo test --test integration escape
//! PTC_TEST_SANDBOX=landlock PTC_REQUIRE_BACKENDS=landlock ...      # CI: fail instead of skipping
//! ```
//!
//! Every verdict is printed as it comes (the harness never captures output). Under a real sandbox (anything but `none`) every attempt must be
//! BLOCKED. `none` has no OS isolation, so each attempt records what `none` does today ([`UnderNone`]): most
//! escape, a few are stopped by its rlimits, and some escape only because the tests run as root (capabilities,
//! `CAP_SYS_PTRACE` over the non-dumpable server). A change either way fails the test, so this list stays the
//! truth about `none`; it holds both as root and as an ordinary user. An unavailable sandbox skips every test
//! (printing why) unless `PTC_REQUIRE_BACKENDS` names it.
//!
//! An interpreter killed by the sandbox (seccomp's SIGSYS, SIGKILL for memory, SIGXFSZ, SIGXCPU) counts as
//! BLOCKED. A run that hangs, crashes otherwise, prints no verdict or fails with anything but an OS error,
//! MemoryError or `Blocked` (a bug in the attempt, never a silent "blocked") fails the test. Attempts are harmless
//! when they succeed: they undo what they did (remove created files, unmount, set metadata to its current value,
//! use signal 0, attach to the server as a tracer without stopping it), and after each one the server must still
//! run a program.

use crate::common::*;

/// The `execution` keys of every test: attempts must finish well within this.
const EXECUTION: &str = "  timeout_seconds: 20\n";

/// What an attempt does under `none`, as observed; a real sandbox must always block it.
#[derive(Clone, Copy, Debug)]
enum UnderNone {
    /// `none` lets it through.
    Escapes,
    /// `none` stops it too (its rlimits, the server's own defences, kernel rules).
    Blocked,
    /// Escapes when the tests run as root (capabilities; `CAP_SYS_PTRACE` beats the server's non-dumpable mark),
    /// blocked by the kernel for an ordinary user.
    EscapesAsRoot,
    /// Escapes as root; for an ordinary user a sysctl decides (named in the attempt's doc), so only a run as root
    /// checks what `none` does.
    EscapesAsRootElseBySysctl,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    Escaped,
    Blocked,
}

/// Helpers prepended to every attempt.
const PRELUDE: &str = r#"
import ctypes, errno, os, platform, sys

# Errnos with which a sandbox refuses a call (seccomp, Landlock, missing capabilities, an invisible target, an
# address family turned off). Only attempts with strict=True read the errno: for them any other errno means the
# call got past the policy and failed on its arguments or the kernel's state, which is an escape too.
REFUSED = {errno.EPERM, errno.EACCES, errno.ENOSYS, errno.ESRCH, errno.EAFNOSUPPORT}


class Blocked(Exception):
    """Raised by an attempt that ran but got nothing (a limit stopped it, nothing to use)."""


class Skip(Exception):
    """The attempt cannot be made on this machine."""


def why(e):
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, str(e.errno))
    return str(e) if isinstance(e, Blocked) else f'{type(e).__name__}: {e}'


def probe(action, *targets, strict=False):
    """Try action(target) for each target (action() once without targets) and print the verdict: the first
    success is ESCAPED with what it got; when all fail, BLOCKED with every failure. Only OSError, MemoryError and
    Blocked are failures: any other exception is a bug in the attempt and ends the run without a verdict."""
    failures = []
    for target in targets or [None]:
        label = action.__name__ + ('()' if target is None else f'({target!r})')
        try:
            got = action() if target is None else action(target)
        except Skip as e:
            return print(f'SKIPPED: {label}: {e}')
        except OSError as e:
            if strict and e.errno not in REFUSED:
                return print(f'ESCAPED: {label}: not refused by a policy, failed with {why(e)}')
            failures.append(f'{label}: {why(e)}')
        except (MemoryError, Blocked) as e:
            failures.append(f'{label}: {why(e)}')
        else:
            return print(f'ESCAPED: {label}: {got}')
    print('BLOCKED: ' + '; '.join(failures))


_libc = None


def syscall(number, *args):
    """A raw x86_64 system call: its result or OSError. ints go as longs, bytes as char *, None as NULL."""
    global _libc
    if platform.machine() != 'x86_64':
        raise Skip(f'the syscall numbers here are x86_64 ones, this is {platform.machine()}')
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    result = _libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def other_process(pid):
    """pid, unless it is not another process (0: the parent is outside our pid namespace)."""
    if pid in (0, os.getpid()):
        raise Blocked(f'pid {pid} is not another process')
    return pid


def real_home():
    """The home of the user we run as (HOME points at scratch), or /root when the user database is hidden."""
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return '/root'


def leads_to_our_files(path):
    """Whether path is, or is a parent of, the interpreter's files or scratch: a sandbox has to show those."""
    ours = {sys.executable, sys.prefix, sys.exec_prefix, sys.base_prefix, os.getcwd()}
    ours |= {os.path.realpath(p) for p in ours}
    return any(p == path or p.startswith(path.rstrip('/') + '/') for p in ours)


def outside_scratch(path):
    real, scratch = os.path.realpath(path), os.path.realpath(os.getcwd())
    if real == scratch or real.startswith(scratch + os.sep):
        raise Blocked(f'{path} is in the scratch dir')
    return path


def create_file_in(directory):
    path = os.path.join(outside_scratch(directory), f'ptc-escape-probe-{os.getpid()}')
    with open(path, 'x') as f:
        f.write('escaped')
    os.remove(path)
    return f'created (and removed) {path}'


def runner_fds():
    """The runner's own fds: its channel (in, out) and the read end of the pipe behind fds 1/2."""
    import gc
    channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')
    drain = next(o for o in gc.get_objects() if type(o).__name__ == 'FdDrain')
    return channel._in, channel._out, drain._fd


def exec_argv(what):
    """argv for a fresh interpreter that reports ESCAPED itself. An exec replaces the runner and closes its
    output pipe, so the new image writes an output line and `done` straight onto the channel (made inheritable)."""
    import json
    out = runner_fds()[1]
    os.set_inheritable(out, True)
    lines = ''.join(json.dumps(m) + '\n' for m in [{'type': 'output', 'data': f'ESCAPED: {what}\n'},
                                                   {'type': 'done', 'error': None}])
    return [sys.executable, '-I', '-S', '-c', f'import os; os.write({out}, {lines.encode()!r})']

"#;

/// Runs one attempt in a fresh server and checks its verdict against the sandbox under test.
async fn attempt(name: &str, under_none: UnderNone, code: &str) {
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    attempt_in(&ptc, name, under_none, code).await;
}

async fn attempt_in(ptc: &Ptc, name: &str, under_none: UnderNone, code: &str) {
    let Some(()) = require_backend(ptc).await else { return };
    let sandbox = sandbox_under_test();
    let run = ptc.execute(&format!("{PRELUDE}\n{code}")).await;
    let Some((outcome, detail)) = verdict(&run) else { return };
    eprintln!("{name} [{sandbox}]: {outcome:?}: {detail}");
    let as_root = running_as_root();
    let expected = match (sandbox.as_str(), under_none) {
        ("none", UnderNone::Escapes) => Outcome::Escaped,
        ("none", UnderNone::EscapesAsRoot | UnderNone::EscapesAsRootElseBySysctl) if as_root => Outcome::Escaped,
        ("none", UnderNone::EscapesAsRootElseBySysctl) => outcome,
        _ => Outcome::Blocked,
    };
    assert_eq!(
        outcome, expected,
        "{name}: under sandbox {sandbox} this attempt should be {expected:?} but was {outcome:?}: {detail}"
    );
    // Whatever the attempt did (exec, tracing the server, mounting), the server still runs programs.
    assert_eq!(ptc.execute("print('still here')").await.expect_ok(), "[Script executed successfully]\nstill here");
}

/// The verdict a run printed (`None` for SKIPPED). An interpreter killed by a sandbox or limit is BLOCKED.
fn verdict(run: &Run) -> Option<(Outcome, String)> {
    let structured = run.structured();
    let output = structured["output"].as_str().unwrap_or_default();
    let verdicts: Vec<&str> =
        output.lines().filter(|l| ["BLOCKED: ", "ESCAPED: ", "SKIPPED: "].iter().any(|v| l.starts_with(v))).collect();
    let line = match verdicts.as_slice() {
        [line] => *line,
        [] if run.is_error() && killed_by_the_sandbox(&run.text()) => {
            return Some((Outcome::Blocked, format!("the interpreter was killed: {}", run.text())));
        }
        _ => panic!("an attempt must print exactly one verdict line; got:\n{}", run.text()),
    };
    let (kind, detail) = line.split_once(": ").unwrap();
    match kind {
        "BLOCKED" => Some((Outcome::Blocked, detail.to_string())),
        "ESCAPED" => Some((Outcome::Escaped, detail.to_string())),
        _ => {
            skip(detail);
            None
        }
    }
}

fn killed_by_the_sandbox(text: &str) -> bool {
    let ended = "the interpreter ended before the program finished (";
    // SIGKILL (memory), SIGXCPU, SIGXFSZ are named; SIGSYS (31) is seccomp's kill action.
    ["killed (SIGKILL", "killed (SIGXCPU", "killed (SIGXFSZ", "killed by signal 31)"]
        .iter()
        .any(|how| text.contains(&format!("{ended}{how}")))
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// One test per attempt: `escape_attempt!(name, under none: Expectation, "python code")`.
macro_rules! escape_attempt {
    ($(#[$doc:meta])* $name:ident, under none: $none:ident, $code:expr) => {
        $(#[$doc])*
        #[apply(integration_test!)]
        async fn $name() {
            attempt(stringify!($name), UnderNone::$none, $code).await;
        }
    };
}

// ---------------------------------------------------------------------------------------------------------
// The file system: reads, writes and metadata outside scratch, existence probes.

escape_attempt!(reading_files_outside_scratch_is_blocked, under none: Escapes, r#"
def read(path):
    return f'{len(open(path, "rb").read())} bytes'
probe(read, '/etc/passwd', '/etc/hostname')
"#);

escape_attempt!(writing_into_tmp_is_blocked, under none: Escapes, r#"
probe(create_file_in, '/tmp', '/var/tmp', '/dev/shm')
"#);

escape_attempt!(writing_into_the_real_users_home_is_blocked, under none: Escapes, r#"
probe(create_file_in, real_home())
"#);

escape_attempt!(
    /// `stat` of host paths must fail exactly like `stat` of a path that does not exist (Landlock alone does not
    /// stop stat). Parents of the interpreter's files (e.g. /root for a pyenv in /root) are not asked about.
    the_existence_of_host_files_cannot_be_probed, under none: Escapes, r#"
def stat_result(path):
    try:
        os.stat(path)
        return 'exists'
    except OSError as e:
        return why(e)
def existence():
    control = stat_result('/ptc-no-such-dir/no-such-file')
    paths = ['/etc/shadow', '/etc/passwd', '/root', '/home', '/proc/1', '/var']
    paths = [p for p in paths if p != f'/proc/{os.getpid()}']  # the program itself (docker: the runner is pid 1)
    leaks = {p: r for p in paths if not leads_to_our_files(p) and (r := stat_result(p)) != control}
    if not leaks:
        raise Blocked(f'every probe failed like a missing path ({control})')
    return f'told apart from a missing path: {leaks}'
probe(existence)
"#);

escape_attempt!(
    /// Tolerated: parents of the interpreter's files and scratch, an /etc holding only what the dynamic loader
    /// and local time read, and a container's own /proc (no process but the program) and empty /sys.
    listing_the_root_directory_shows_no_host_entries, under none: Escapes, r#"
def list_root():
    entries = set(os.listdir('/'))
    host = entries & {'home', 'root', 'proc', 'sys', 'boot', 'var', 'srv', 'mnt', 'media', 'opt', 'run', 'snap'}
    host = {e for e in host if not leads_to_our_files('/' + e)}
    if 'proc' in host and {p for p in os.listdir('/proc') if p.isdigit()} <= {str(os.getpid())}:
        host.discard('proc')  # a container's own /proc, showing no process but the program
    if 'sys' in host and not os.listdir('/sys'):
        host.discard('sys')  # masked (empty)
    if 'etc' in entries and set(os.listdir('/etc')) - {'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime'}:
        host.add('etc')
    if not host:
        raise Blocked(f'/ holds only {sorted(entries)}')
    return f'host entries {sorted(host)}'
probe(list_root)
"#);

escape_attempt!(
    /// Only /dev/null, /dev/zero, /dev/urandom (and what a container runtime always adds) may be visible.
    host_devices_are_invisible, under none: Escapes, r#"
def list_dev():
    allowed = {'null', 'zero', 'urandom', 'random', 'full', 'fd', 'stdin', 'stdout', 'stderr', 'shm', 'mqueue',
               'pts', 'ptmx', 'tty', 'console', 'core'}
    extra = sorted(set(os.listdir('/dev')) - allowed)
    if not extra:
        raise Blocked('only the allowed devices are there')
    return f'{len(extra)} other devices, e.g. {extra[:8]}'
probe(list_dev)
"#);

escape_attempt!(following_a_symlink_out_of_scratch_is_blocked, under none: Escapes, r#"
def through_symlink(target):
    os.symlink(target, 'link')
    return f'read {len(open("link", "rb").read())} bytes through scratch/link'
probe(through_symlink, '/etc/passwd')
"#);

escape_attempt!(
    /// An ordinary user is stopped by `fs.protected_hardlinks` (the file is not theirs); root is not.
    hardlinking_a_host_file_into_scratch_is_blocked, under none: EscapesAsRoot, r#"
def hardlink(target):
    os.link(target, 'hardlink')
    return f'linked; read {len(open("hardlink", "rb").read())} bytes'
probe(hardlink, '/etc/passwd')
"#);

escape_attempt!(moving_a_scratch_file_out_is_blocked, under none: Escapes, r#"
def move_out(directory):
    open('f', 'w').write('escaped')
    destination = os.path.join(outside_scratch(directory), f'ptc-escape-probe-{os.getpid()}')
    os.rename('f', destination)
    os.remove(destination)
    return f'moved to (and removed) {destination}'
probe(move_out, '/tmp', real_home())
"#);

escape_attempt!(
    /// Targets: the interpreter's own binary, then the real user's home (theirs even when they are not root).
    changing_the_mode_of_a_file_outside_scratch_is_blocked, under none: Escapes, r#"
def chmod(path):
    os.chmod(path, os.stat(path).st_mode & 0o7777)
    return 'mode set (to its current value)'
probe(chmod, sys.executable, real_home())
"#);

escape_attempt!(changing_the_times_of_a_file_outside_scratch_is_blocked, under none: Escapes, r#"
def utime(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return 'times set (to their current values)'
probe(utime, sys.executable, real_home())
"#);

escape_attempt!(setting_an_xattr_on_a_file_outside_scratch_is_blocked, under none: Escapes, r#"
def setxattr(path):
    os.setxattr(path, 'user.ptc_escape_probe', b'1')
    os.removexattr(path, 'user.ptc_escape_probe')
    return 'set (and removed) user.ptc_escape_probe'
probe(setxattr, sys.executable, real_home())
"#);

// ---------------------------------------------------------------------------------------------------------
// New processes: fork, subprocess, exec.

escape_attempt!(forking_is_blocked, under none: Escapes, r#"
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return f'child {pid} ran'
probe(fork)
"#);

escape_attempt!(running_a_subprocess_is_blocked, under none: Escapes, r#"
import subprocess
def run(program):
    done = subprocess.run([program, '-c', 'print(6 * 7)'], capture_output=True, timeout=10)
    return f'exit {done.returncode}, printed {done.stdout!r}'
probe(run, '/bin/true', sys.executable)
"#);

escape_attempt!(replacing_the_interpreter_with_execv_is_blocked, under none: Escapes, r#"
argv = exec_argv('execv replaced the runner')
def execv(path):
    os.execv(path, argv)
probe(execv, sys.executable)
"#);

escape_attempt!(
    /// A copy of the interpreter in a memfd, run with fexecve (glibc: execveat(fd, "", AT_EMPTY_PATH), or
    /// /proc/self/fd/N).
    executing_a_memfd_is_blocked, under none: Escapes, r#"
argv = exec_argv('fexecve of a memfd copy of the interpreter')
def fexecve(path):
    fd = os.memfd_create('ptc-escape', 0)
    with open(path, 'rb') as source, open(fd, 'wb', closefd=False) as copy:
        copy.write(source.read())
    os.execve(fd, argv, {})
probe(fexecve, sys.executable)
"#);

escape_attempt!(
    /// 100 processes alive at once; a pids limit that stops it counts as blocked.
    a_fork_bomb_is_stopped, under none: Escapes, r#"
def fork_100():
    read_end, write_end = os.pipe()
    children = []
    try:
        for _ in range(100):
            pid = os.fork()
            if pid == 0:  # wait until the parent closes the pipe (or dies), then go
                os.close(write_end)
                os.read(read_end, 1)
                os._exit(0)
            children.append(pid)
    except OSError as e:
        raise Blocked(f'fork failed with {why(e)} after {len(children)} children')
    finally:
        os.close(write_end)
        for pid in children:
            os.waitpid(pid, 0)
    return f'{len(children)} children alive at once'
probe(fork_100)
"#);

// ---------------------------------------------------------------------------------------------------------
// The network: every address family, and the raw syscall.

/// Shared by the TCP attempts: creating the socket is the escape; connect's result is only reported.
const CONNECT: &str = r#"
import socket
def connect(address):
    s = socket.socket(socket.AF_INET6 if ':' in address[0] else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(address)
        return 'socket created and connected'
    except OSError as e:
        return f'socket created (connect: {why(e)})'
"#;

escape_attempt!(
    /// Port 9 normally has no listener: ECONNREFUSED still means the socket was created; only refusing it blocks.
    opening_a_tcp_connection_to_localhost_is_blocked, under none: Escapes,
    &format!("{CONNECT}probe(connect, ('127.0.0.1', 9))")
);

escape_attempt!(
    /// Assumes the kernel has IPv6 where `none` is checked (else EAFNOSUPPORT reads as blocked).
    opening_an_ipv6_tcp_connection_to_localhost_is_blocked, under none: Escapes,
    &format!("{CONNECT}probe(connect, ('::1', 9))")
);

escape_attempt!(
    /// socket(AF_UNIX) could reach host services (abstract names, paths); socketpair stays allowed: asyncio's
    /// event loop needs it and it only connects to itself.
    creating_a_unix_socket_is_blocked, under none: Escapes, r#"
import socket
def unix_socket():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    return 'AF_UNIX socket created'
probe(unix_socket)
"#);

escape_attempt!(creating_a_netlink_socket_is_blocked, under none: Escapes, r#"
import socket
def netlink_socket():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # NETLINK_ROUTE
    return 'AF_NETLINK socket created'
probe(netlink_socket)
"#);

escape_attempt!(
    /// Needs CAP_NET_RAW.
    creating_a_packet_socket_is_blocked, under none: EscapesAsRoot, r#"
import socket
def packet_socket():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)).close()  # ETH_P_ALL
    return 'AF_PACKET socket created'
probe(packet_socket)
"#);

escape_attempt!(
    /// The 64-bit `socket` syscall straight through libc's syscall(). The 32-bit `int 0x80` entry (socketcall)
    /// cannot be reached from Python without writing machine code; seccomp filters must check the arch.
    a_raw_socket_syscall_is_blocked, under none: Escapes, r#"
def socket_syscall():
    fd = syscall(41, 2, 1, 0)  # socket(AF_INET, SOCK_STREAM, 0)
    os.close(fd)
    return f'socket fd {fd}'
probe(socket_syscall, strict=True)
"#);

// ---------------------------------------------------------------------------------------------------------
// Other processes: signals, ptrace, rlimits, /proc. Under `none` the runner's parent is the server itself.

escape_attempt!(signalling_the_server_is_blocked, under none: Escapes, r#"
def signal_zero(pid):
    os.kill(other_process(pid), 0)
    return f'pid {pid} accepts our signals (signal 0 sent)'
probe(signal_zero, os.getppid(), strict=True)
"#);

escape_attempt!(signalling_pid_1_is_blocked, under none: EscapesAsRoot, r#"
def signal_zero(pid):
    os.kill(other_process(pid), 0)
    return f'pid {pid} accepts our signals (signal 0 sent)'
probe(signal_zero, 1, strict=True)
"#);

escape_attempt!(
    /// kill(-1, 0) succeeds when any other process accepts our signals: the server always does under `none`.
    signalling_every_process_is_blocked, under none: Escapes, r#"
def signal_everyone():
    os.kill(-1, 0)
    return 'kill(-1, 0) reached at least one other process'
probe(signal_everyone, strict=True)
"#);

escape_attempt!(
    /// PTRACE_SEIZE rather than PTRACE_ATTACH: the same permission check, without stopping the server. The
    /// server is non-dumpable, so only CAP_SYS_PTRACE (root) gets through under `none`. Our exit detaches.
    tracing_the_server_is_blocked, under none: EscapesAsRoot, r#"
def ptrace_seize(pid):
    syscall(101, 0x4206, other_process(pid), 0, 0)  # ptrace(PTRACE_SEIZE, pid, 0, 0)
    return f'attached to pid {pid} as its tracer'
probe(ptrace_seize, os.getppid(), strict=True)
"#);

escape_attempt!(
    /// Reads the server's RLIMIT_NOFILE and writes the same value back: a write that changes nothing.
    changing_the_servers_rlimits_is_blocked, under none: Escapes, r#"
import resource
def prlimit(pid):
    limits = resource.prlimit(other_process(pid), resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    return f'read and rewrote RLIMIT_NOFILE {limits} of pid {pid}'
probe(prlimit, os.getppid(), strict=True)
"#);

escape_attempt!(reading_the_servers_environment_is_blocked, under none: EscapesAsRoot, r#"
def environ(pid):
    data = open(f'/proc/{other_process(pid)}/environ', 'rb').read()
    names = [v.split(b'=')[0].decode() for v in data.split(b'\0') if v]
    return f'{len(names)} variables, e.g. {names[:3]}'
probe(environ, os.getppid())
"#);

escape_attempt!(reading_the_servers_memory_through_proc_is_blocked, under none: EscapesAsRoot, r#"
def proc_mem(pid):
    maps = open(f'/proc/{other_process(pid)}/maps').read().splitlines()
    start = next(int(line.split('-')[0], 16) for line in maps if line.split()[1].startswith('r'))
    with open(f'/proc/{pid}/mem', 'rb') as mem:
        mem.seek(start)
        return f'read {mem.read(16)!r} at {start:#x}'
probe(proc_mem, os.getppid())
"#);

escape_attempt!(
    /// EFAULT (a guessed address when /proc is hidden) still means the permission check passed.
    reading_the_servers_memory_with_process_vm_readv_is_blocked, under none: EscapesAsRoot, r#"
def process_vm_readv(pid):
    try:
        maps = open(f'/proc/{other_process(pid)}/maps').read().splitlines()
        address = next(int(line.split('-')[0], 16) for line in maps if line.split()[1].startswith('r'))
    except OSError:
        address = 0x400000
    buffer = ctypes.create_string_buffer(16)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 16)  # struct iovec
    remote = (ctypes.c_void_p * 2)(address, 16)
    count = syscall(310, pid, local, 1, remote, 1, 0)
    return f'read {buffer.raw[:count]!r} at {address:#x}'
probe(process_vm_readv, os.getppid(), strict=True)
"#);

// ---------------------------------------------------------------------------------------------------------
// Kernel interfaces the policy shuts off. Each call has valid arguments, so that success is real.

escape_attempt!(
    /// Assumes kernel.io_uring_disabled is 0 (the default) where `none` is checked.
    io_uring_is_blocked, under none: Escapes, r#"
def io_uring_setup():
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = syscall(425, 8, params)
    os.close(fd)
    return f'io_uring fd {fd}'
probe(io_uring_setup, strict=True)
"#);

escape_attempt!(keyctl_is_blocked, under none: Escapes, r#"
def keyctl():
    keyring = syscall(250, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of the user keyring, not creating it
    return f'user keyring {keyring}'
probe(keyctl, strict=True)
"#);

escape_attempt!(add_key_is_blocked, under none: Escapes, r#"
def add_key():
    key = syscall(248, b'user', b'ptc-escape-probe', b'x', 1, -2)  # into the process keyring: dies with us
    return f'key {key} added'
probe(add_key, strict=True)
"#);

escape_attempt!(
    /// For an ordinary user kernel.unprivileged_bpf_disabled decides (1 or 2, the usual defaults, refuse).
    bpf_is_blocked, under none: EscapesAsRootElseBySysctl, r#"
import struct
def bpf_map_create():
    attr = ctypes.create_string_buffer(128)
    struct.pack_into('IIII', attr, 0, 2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, 4-byte keys and values, 1 entry
    fd = syscall(321, 0, attr, 128)  # BPF_MAP_CREATE
    os.close(fd)
    return f'bpf map fd {fd}'
probe(bpf_map_create, strict=True)
"#);

escape_attempt!(
    /// A software clock counting only this process in user space. For an ordinary user
    /// kernel.perf_event_paranoid decides (up to 2 allows it; Debian's 3 refuses).
    perf_event_open_is_blocked, under none: EscapesAsRootElseBySysctl, r#"
import struct
def perf_event_open():
    attr = ctypes.create_string_buffer(128)
    struct.pack_into('IIQ', attr, 0, 1, 128, 0)  # PERF_TYPE_SOFTWARE, size, PERF_COUNT_SW_CPU_CLOCK
    struct.pack_into('Q', attr, 40, 1 | 1 << 5 | 1 << 6)  # disabled, exclude_kernel, exclude_hv
    fd = syscall(298, attr, 0, -1, -1, 0)  # this process, any cpu
    os.close(fd)
    return f'perf event fd {fd}'
probe(perf_event_open, strict=True)
"#);

escape_attempt!(userfaultfd_is_blocked, under none: Escapes, r#"
def userfaultfd():
    fd = syscall(323, os.O_CLOEXEC | 1)  # UFFD_USER_MODE_ONLY: allowed without privileges since 5.11
    os.close(fd)
    return f'userfaultfd {fd}'
probe(userfaultfd, strict=True)
"#);

escape_attempt!(
    /// Affects only the calling thread. CLONE_NEWUSER fails with EINVAL in any multi-threaded process (the
    /// runner has threads), hence the other namespaces, which need CAP_SYS_ADMIN.
    unsharing_namespaces_is_blocked, under none: EscapesAsRoot, r#"
FLAGS = {'CLONE_NEWUSER': 0x10000000, 'CLONE_NEWNS': 0x20000, 'CLONE_NEWUTS': 0x4000000, 'CLONE_NEWIPC': 0x8000000,
         'CLONE_NEWNET': 0x40000000, 'CLONE_NEWCGROUP': 0x2000000}
def unshare(flag):
    syscall(272, FLAGS[flag])
    return f'entered a new namespace'
probe(unshare, *FLAGS)
"#);

escape_attempt!(
    /// Joins pid 1's UTS namespace (or our own): harmless, but needs CAP_SYS_ADMIN.
    joining_a_namespace_with_setns_is_blocked, under none: EscapesAsRoot, r#"
def setns(path):
    fd = os.open(path, os.O_RDONLY)
    syscall(308, fd, 0x4000000)  # CLONE_NEWUTS
    return 'joined it'
probe(setns, '/proc/1/ns/uts', '/proc/self/ns/uts')
"#);

escape_attempt!(
    /// A tmpfs on scratch/m, unmounted at once.
    mounting_is_blocked, under none: EscapesAsRoot, r#"
def mount_tmpfs():
    os.mkdir('m')
    syscall(165, b'none', b'm', b'tmpfs', 0, None)
    try:
        syscall(166, b'm', 2)  # umount2(MNT_DETACH)
    except OSError as e:
        return f'mounted a tmpfs on scratch/m (and could not unmount it: {why(e)})'
    return 'mounted a tmpfs on scratch/m (and unmounted it)'
probe(mount_tmpfs, strict=True)
"#);

// ---------------------------------------------------------------------------------------------------------
// Privileges and what the process inherited.

escape_attempt!(
    /// Any effective or permitted capability (even one only valid in a user namespace) is an escape.
    the_process_has_no_capabilities, under none: EscapesAsRoot, r#"
def capget():
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # 2 x {effective, permitted, inheritable}
    syscall(125, header, data)
    effective, permitted = data[0] | data[3] << 32, data[1] | data[4] << 32
    if not effective and not permitted:
        raise Blocked('no effective or permitted capability')
    return f'capabilities: effective {effective:#x}, permitted {permitted:#x}'
probe(capget, strict=True)
"#);

escape_attempt!(
    /// Without no_new_privs a setuid binary would run with its owner's privileges.
    no_new_privs_is_set, under none: Escapes, r#"
def no_new_privs():
    if syscall(157, 39, 0, 0, 0, 0) == 1:  # prctl(PR_GET_NO_NEW_PRIVS)
        raise Blocked('no_new_privs is set')
    return 'no_new_privs is off'
probe(no_new_privs, strict=True)
"#);

/// The runner holds its two channel fds and the read end of its output pipe (besides 0-2); any other fd (one the
/// server holds, a directory, a socket) would be a way out. To be sure there is something to leak, the test plants
/// one: the server inherits a directory fd (a temp dir with a file in it) without close-on-exec, as from a careless MCP
/// client. Every backend closes everything but stdio before the interpreter starts, `none` included.
#[apply(integration_test!)]
async fn no_fds_are_inherited_beyond_the_runners_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("server-secret.txt"), "hunter2").unwrap();
    let path = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: open with a valid C string; the fd is closed below. Without O_CLOEXEC every process this test binary
    // starts meanwhile inherits it (other tests' servers too, which never look).
    let planted = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(planted >= 0, "cannot open {}", dir.path().display());
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    // SAFETY: closes the fd opened above.
    unsafe { libc::close(planted) };
    attempt_in(&ptc, "no_fds_are_inherited_beyond_the_runners_own", UnderNone::Blocked, FOREIGN_FDS).await;
}

const FOREIGN_FDS: &str = r#"
import stat
def describe(fd):
    mode = os.fstat(fd).st_mode
    kind = next((k for k in ['FIFO', 'SOCK', 'REG', 'DIR', 'CHR', 'BLK'] if getattr(stat, 'S_IS' + k)(mode)), '?')
    try:
        kind += ' ' + os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        pass
    if stat.S_ISDIR(mode):
        kind += f' holding {sorted(os.listdir(fd))[:3]}'
    return f'{fd} ({kind})'
own = set(runner_fds())
def foreign_fds():
    found = []
    for fd in sorted(set(range(3, 1024)) - own):
        try:
            found.append(describe(fd))
        except OSError:
            pass
    if not found:
        raise Blocked(f'only the runner\'s own fds {sorted(own)}')
    return 'also open: ' + ', '.join(found)
probe(foreign_fds)
"#;

// ---------------------------------------------------------------------------------------------------------
// Resource exhaustion.

escape_attempt!(
    /// 8 GiB in 64 MiB pieces, each touched; `none`'s address-space rlimit (1 GiB) stops it.
    a_memory_bomb_is_stopped, under none: Blocked, r#"
def allocate_8_gib():
    pieces = []
    try:
        for _ in range(128):
            pieces.append(bytearray(64 << 20))  # zero-filled: the pages are really used
    except MemoryError:
        raise Blocked(f'MemoryError after {len(pieces) * 64} MiB')
    return f'allocated {len(pieces) * 64} MiB'
probe(allocate_8_gib)
"#);

/// Shared by the two disk-fill attempts: writes in 1 MiB chunks, `file_mib` per file, until an error or just past
/// 1 GiB: stopped before 1 GiB is blocked. (Going on to 2 GiB would change no verdict, and takes long enough on a
/// busy machine to risk the run's timeout.)
const FILL_SCRATCH: &str = r#"
def fill_scratch(file_mib):
    chunk, written, goal = b'x' * 2**20, 0, 2**30 + 2**20
    try:
        while written < goal:
            with open(f'fill-{written // (file_mib * 2**20)}', 'ab', buffering=0) as f:
                while written < goal and f.tell() < file_mib * 2**20:
                    written += f.write(chunk)
    except OSError as e:
        if written < 2**30:
            raise Blocked(f'{why(e)} after {written >> 20} MiB')
        return f'{written >> 20} MiB written, then {why(e)}'
    return f'{written >> 20} MiB written'
"#;

escape_attempt!(
    /// `none`'s file-size rlimit (64 MiB) stops a single file with EFBIG.
    filling_the_disk_with_one_file_is_stopped, under none: Blocked,
    &format!("{FILL_SCRATCH}probe(fill_scratch, 2048)")
);

escape_attempt!(
    /// 32 MiB files stay under the file-size rlimit: `none` does not limit scratch in total.
    filling_the_disk_with_many_files_is_stopped, under none: Escapes,
    &format!("{FILL_SCRATCH}probe(fill_scratch, 32)")
);

#[apply(integration_test!)]
async fn an_output_flood_is_cut_at_max_output_bytes_and_the_server_stays_usable() {
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    let Some(()) = require_backend(&ptc).await else { return };
    // About 25 MB through print and 25 MB straight into fd 1.
    let code = "import os, sys\nline = 'x' * 999 + '\\n'\nfor _ in range(25_000):\n    sys.stdout.write(line)\n\
                block = line.encode() * 64\nfor _ in range(400):\n    os.write(1, block)\nprint('end')";
    let run = ptc.execute(code).await;
    run.expect_ok();
    let output = run.structured()["output"].as_str().unwrap().to_string();
    let Some((head, rest)) = output.split_once("[output truncated: ") else { panic!("no marker: {}", run.text()) };
    let (marker, tail) = rest.split_once('\n').unwrap();
    // The marker line starts on a line of its own (one separating newline).
    assert!(head.len() + tail.len() <= 65536 + 1, "kept {} bytes", head.len() + tail.len());
    assert!(marker.len() < 300 && marker.contains("max_output_bytes (65536)"), "{marker}");
    assert!(tail.ends_with("end\n"), "the last line survives the flood");
    assert_eq!(ptc.execute("print('still here')").await.expect_ok(), "[Script executed successfully]\nstill here");
}

// ---------------------------------------------------------------------------------------------------------
// What must keep working inside every sandbox.

/// Runs `code` (with the mock downstream when `with_mock`) and checks the whole success text.
async fn works(with_mock: bool, code: &str, expected: &str) {
    let servers = if with_mock { vec![mock_server("mock", &[])] } else { vec![] };
    let ptc = Ptc::start(&config(&servers, EXECUTION)).await;
    let Some(()) = require_backend(&ptc).await else { return };
    let text = ptc.execute(code).await.expect_ok();
    assert_eq!(without_call_time(&text), format!("[Script executed successfully]\n{expected}"));
}

/// One test per functional check: `still_works!(name, "python code", "expected output")`; `with mock` before the
/// code adds the mock downstream server.
macro_rules! still_works {
    ($name:ident, with mock, $code:expr, $expected:expr) => {
        still_works!(@test $name, true, $code, $expected);
    };
    (@test $name:ident, $mock:expr, $code:expr, $expected:expr) => {
        #[apply(integration_test!)]
        async fn $name() {
            works($mock, $code, $expected).await;
        }
    };
    ($name:ident, $code:expr, $expected:expr) => {
        still_works!(@test $name, false, $code, $expected);
    };
}

still_works!(
    threads_still_work,
    r#"
import threading
results = [0] * 4
def work(i):
    results[i] = sum(range(i * 1000))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(results)
"#,
    "[0, 499500, 1999000, 4498500]"
);

still_works!(
    asyncio_still_works,
    r#"
import asyncio
async def double(x):
    await asyncio.sleep(0.01)
    return 2 * x
print(await asyncio.gather(*(double(i) for i in range(5))))
"#,
    "[0, 2, 4, 6, 8]"
);

still_works!(
    sqlite_in_memory_and_in_scratch_still_works,
    r#"
import sqlite3
for target in [':memory:', 'db.sqlite']:
    db = sqlite3.connect(target)
    db.execute('create table t (x integer)')
    db.executemany('insert into t values (?)', [(i,) for i in range(10)])
    db.commit()
    print(target, db.execute('select sum(x) from t').fetchone()[0])
    db.close()
"#,
    ":memory: 45\ndb.sqlite 45"
);

still_works!(
    zlib_and_hashlib_still_work,
    r#"
import hashlib, zlib
data = b'ptc' * 1000
print(len(zlib.compress(data)) < 100, zlib.decompress(zlib.compress(data)) == data)
print(hashlib.sha256(b'abc').hexdigest())
"#,
    "True True\nba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
);

still_works!(
    scratch_files_still_work,
    r#"
import os, tempfile
os.makedirs('sub/dir')
with open('sub/dir/a.txt', 'w') as f:
    f.write('hello')
print(open('sub/dir/a.txt').read(), os.listdir('sub/dir'), os.path.getsize('sub/dir/a.txt'))
os.rename('sub/dir/a.txt', 'b.txt')
with tempfile.NamedTemporaryFile('w+') as t:
    t.write('temp')
    t.seek(0)
    print(t.read(), os.path.dirname(t.name) == os.getcwd())
print(sorted(os.listdir('.')))
"#,
    "hello ['a.txt'] 5\ntemp True\n['b.txt', 'sub']"
);

still_works!(
    urandom_still_works,
    r#"
import os, secrets
print(len(os.urandom(16)), os.urandom(16) != os.urandom(16), len(secrets.token_hex(8)))
"#,
    "16 True 16"
);

still_works!(
    zoneinfo_still_works,
    r#"
from datetime import datetime, timezone
from zoneinfo import ZoneInfo
for month in (1, 7):
    print(datetime(2024, month, 1, 12, tzinfo=timezone.utc).astimezone(ZoneInfo('Europe/Paris')).isoformat())
"#,
    "2024-01-01T13:00:00+01:00\n2024-07-01T14:00:00+02:00"
);

still_works!(
    json_decimal_and_re_still_work,
    r#"
import decimal, json, re
print(json.dumps({'b': [1, 2.5, None], 'a': 'é'}, sort_keys=True, ensure_ascii=False))
print(decimal.Decimal('0.1') + decimal.Decimal('0.2'))
print(re.findall(r'\d+', 'a1b22c333'))
"#,
    "{\"a\": \"é\", \"b\": [1, 2.5, null]}\n0.3\n['1', '22', '333']"
);

still_works!(tool_calls_still_work, with mock, "print(await mcp__mock__echo(x=1))", "{'x': 1}\n[tool calls: 1; Ts]");

still_works!(
    clocks_still_work,
    r#"
import time
t0, m0 = time.time(), time.monotonic()
time.sleep(0.05)
t1, m1 = time.time(), time.monotonic()
print(t0 > 1.7e9, 0.04 < m1 - m0 < 5, t1 >= t0)
"#,
    "True True True"
);
