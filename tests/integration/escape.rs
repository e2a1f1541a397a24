//! Sandbox escape suite: every attempt a program could make to get out of its sandbox (README, "Sandboxes"), one test per
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
//! PTC_TEST_SANDBOX=docker PTC_TEST_DOCKER_RUNTIME=runsc cargo test --test integration escape   # under gVisor
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
//! run a program. Where the target is the host's (a device node, a file, a SysV segment, a socket, another
//! process), the test also takes evidence on the host side before and after: a blocked attempt must leave it
//! unchanged, an escape must have changed it. An attempt whose escape would reach beyond the test (renicing every
//! process of the user) is not run under `none`, and says so.
//!
//! Attempts are OS-aware: raw syscalls (`syscall()`) use x86_64 Linux numbers and skip, with the reason, on any
//! other system or machine; attempts on Linux-only or macOS-only interfaces say so (`[linux_only]`,
//! `[macos_only]`) and skip elsewhere. Under `seatbelt` (macOS, run by `.github/workflows/macos.yml`, never on
//! these machines) a few attempts get through by design, each with the reason (`[seatbelt_gap: …]`), as the
//! README's sandbox table says.
//!
//! The landlock sandbox runs with namespaces, or degraded without them (`--check-sandbox landlock` says which;
//! `PTC_TEST_LANDLOCK_MODE=namespaces|degraded` makes the other fail). Degraded mode has documented gaps (marked
//! `[escapes_degraded]`): the existence of host files can be probed.

use crate::common::*;

mod mounts;

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
    /// Would escape, with effects beyond the test on the machine running it (e.g. renicing every process of the
    /// user): not run under `none`, which prints why.
    NotRun(&'static str),
}

/// What an attempt must do in each sandbox: blocked by every real sandbox, except the documented gaps of the
/// landlock sandbox's degraded mode (no namespaces: the existence of host files and processes) and of seatbelt;
/// and on which systems it can be made at all.
#[derive(Clone, Copy, Debug)]
struct Expect {
    none: UnderNone,
    escapes_degraded_landlock: bool,
    /// What gets through under seatbelt by design, and why.
    seatbelt_gap: Option<&'static str>,
    /// The only system (`std::env::consts::OS`) whose interfaces the attempt uses.
    only_on: Option<&'static str>,
}

impl From<UnderNone> for Expect {
    fn from(none: UnderNone) -> Expect {
        Expect { none, escapes_degraded_landlock: false, seatbelt_gap: None, only_on: None }
    }
}

/// The flags of `escape_attempt!` (`[name]` or `[name: "why"]` after the expectation).
impl Expect {
    fn escapes_degraded(self) -> Expect {
        Expect { escapes_degraded_landlock: true, ..self }
    }

    fn seatbelt_gap(self, why: &'static str) -> Expect {
        Expect { seatbelt_gap: Some(why), ..self }
    }

    fn linux_only(self) -> Expect {
        Expect { only_on: Some("linux"), ..self }
    }

    fn macos_only(self) -> Expect {
        Expect { only_on: Some("macos"), ..self }
    }
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
    """A raw x86_64 Linux system call: its result or OSError. ints go as longs, bytes as char *, None as NULL."""
    global _libc
    if sys.platform != 'linux' or platform.machine() != 'x86_64':
        raise Skip(f'the syscall numbers here are x86_64 Linux ones, this is {sys.platform} on {platform.machine()}')
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
    """The host home of the user we run as (HOME points at scratch), or /root when the host's user database is
    hidden (a sandbox's own gives scratch as the home)."""
    try:
        import pwd
        home = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError, OSError):
        return '/root'
    return '/root' if os.path.realpath(home) == os.path.realpath(os.getcwd()) else home


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


# What the docker sandbox's /etc files hold where the runtime cannot mask them (runsc ignores masked paths): the
# host name, resolver settings and loopback hosts file of the container's own, nothing of the host's.
DOCKER_OWN = {
    '/etc/hostname': b'sandbox\n',
    '/etc/resolv.conf': b'nameserver 127.0.0.1\noptions ndots:1\n',
    '/etc/hosts': b'127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n'
                  b'ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n',
}


def masked_or_docker_own(path, data):
    """Raises Blocked when what `path` read is nothing (masked) or the docker sandbox's own text."""
    if not data:
        raise Blocked(f'{path} reads empty (masked)')
    if DOCKER_OWN.get(path) == data:
        raise Blocked(f'{path} holds only the container\'s own text')


def create_file_in(directory):
    path = os.path.join(outside_scratch(directory), f'ptc-escape-probe-{os.getpid()}')
    with open(path, 'x') as f:
        f.write('escaped')
    os.remove(path)
    return f'created (and removed) {path}'


def runner_fds():
    """The runner's own fds: its channel (in, out), its reader thread's alarm (both ends) and the read end of the
    pipe behind fds 1/2."""
    import gc
    channel = next(o for o in gc.get_objects() if type(o).__name__ == 'Channel')
    drain = next(o for o in gc.get_objects() if type(o).__name__ == 'FdDrain')
    return channel._in, channel._out, channel._wake, channel._waken, drain._fd


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
async fn attempt(name: &str, expect: impl Into<Expect>, code: &str) -> Option<Outcome> {
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    attempt_in(&ptc, name, expect.into(), code).await
}

/// Runs one attempt and checks its verdict; `None` when it was skipped (the backend is unavailable, the attempt
/// cannot be made here, or it is not run under `none`).
async fn attempt_in(ptc: &Ptc, name: &str, expect: Expect, code: &str) -> Option<Outcome> {
    if let Some(os) = expect.only_on.filter(|os| *os != std::env::consts::OS) {
        skip(&format!("{name} uses interfaces of {os} only; this is {}", std::env::consts::OS));
        return None;
    }
    require_backend(ptc).await?;
    let sandbox = sandbox_under_test();
    if let ("none", UnderNone::NotRun(why)) = (sandbox.as_str(), expect.none) {
        skip(&format!("{name} is not run under none: {why}"));
        return None;
    }
    let run = ptc.execute(&format!("{PRELUDE}\n{code}")).await;
    let (outcome, detail) = verdict(&run)?;
    eprintln!("{name} [{sandbox}]: {outcome:?}: {detail}");
    let as_root = running_as_root();
    let expected = match (sandbox.as_str(), expect.none) {
        ("none", UnderNone::Escapes) => Outcome::Escaped,
        ("none", UnderNone::EscapesAsRoot | UnderNone::EscapesAsRootElseBySysctl) if as_root => Outcome::Escaped,
        ("none", UnderNone::EscapesAsRootElseBySysctl) => outcome,
        ("landlock", _) if expect.escapes_degraded_landlock && landlock_is_degraded() => Outcome::Escaped,
        ("seatbelt", _) if expect.seatbelt_gap.is_some() => Outcome::Escaped,
        _ => Outcome::Blocked,
    };
    assert_eq!(
        outcome, expected,
        "{name}: under sandbox {sandbox} this attempt should be {expected:?} but was {outcome:?}: {detail}"
    );
    // Whatever the attempt did (exec, tracing the server, mounting), the server still runs programs.
    assert_eq!(ptc.execute("print('still here')").await.expect_ok(), "[Script executed successfully]\nstill here");
    Some(outcome)
}

/// Runs one attempt with evidence taken on the host, before and after: a blocked attempt must leave it as it
/// was, and an escape must have changed it (so the evidence is known to see an escape).
async fn attempt_with_evidence<T: PartialEq + std::fmt::Debug>(
    name: &str,
    expect: impl Into<Expect>,
    code: &str,
    evidence: impl Fn() -> T,
) {
    let before = evidence();
    let outcome = attempt(name, expect, code).await;
    let after = evidence();
    match outcome {
        Some(Outcome::Blocked) => assert_eq!(after, before, "{name}: blocked, but the host-side evidence changed"),
        Some(Outcome::Escaped) => {
            assert_ne!(after, before, "{name}: escaped, but the host-side evidence did not change")
        }
        None => {}
    }
}

/// Whether the landlock sandbox runs degraded (without namespaces) here, as `--check-sandbox` reports it.
/// `PTC_TEST_LANDLOCK_MODE` (`namespaces` or `degraded`, set by CI) makes a different mode fail the tests.
fn landlock_is_degraded() -> bool {
    static DEGRADED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEGRADED.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, config_text_for_check()).unwrap();
        let output = std::process::Command::new(binary())
            .args(["--check-sandbox", "landlock", "--config"])
            .arg(&config)
            .output()
            .expect("ptc-mcp --check-sandbox runs");
        let report = String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or_default().to_string();
        let degraded = report.contains("degraded");
        let mode = if degraded { "degraded" } else { "namespaces" };
        if let Ok(expected) = std::env::var("PTC_TEST_LANDLOCK_MODE") {
            assert_eq!(mode, expected, "PTC_TEST_LANDLOCK_MODE says {expected}, but the sandbox runs: {report}");
        }
        degraded
    })
}

fn config_text_for_check() -> String {
    config(&[], EXECUTION)
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

/// One test per attempt: `escape_attempt!(name, under none: Expectation [flag]…, "python code")`, the flags
/// being the methods of [`Expect`] that mark a documented gap (`[escapes_degraded]`, `[seatbelt_gap: "why"]`)
/// or the one system an attempt applies to (`[linux_only]`, `[macos_only]`).
macro_rules! escape_attempt {
    ($(#[$doc:meta])* $name:ident, under none: $none:ident $([$flag:ident $(: $why:literal)?])*, $code:expr) => {
        $(#[$doc])*
        #[apply(integration_test!)]
        async fn $name() {
            let expect = Expect::from(UnderNone::$none)$(.$flag($($why)?))*;
            attempt(stringify!($name), expect, $code).await;
        }
    };
}

// ---------------------------------------------------------------------------------------------------------
// Degraded mode.

/// Without user namespaces the landlock sandbox cannot hide which host files exist: the server refuses programs
/// unless `execution.allow_degraded: true`, and says what is missing and how to opt in; so does
/// `--check-sandbox`. Runs where the landlock sandbox is degraded.
#[apply(integration_test!)]
async fn degraded_mode_is_refused_without_the_opt_in() {
    if sandbox_under_test() != "landlock" || !landlock_is_degraded() {
        skip("degraded_mode_is_refused_without_the_opt_in needs the landlock sandbox in degraded mode");
        return;
    }
    let config = format!("execution:\n  sandbox: landlock\n{EXECUTION}");
    let ptc = Ptc::start(&config).await;
    let text = ptc.execute("print('ran')").await.expect_error();
    let parts = ["SandboxError: ", "degraded", "user namespaces", "which host files", "allow_degraded: true"];
    for part in parts {
        assert!(text.contains(part), "the refusal should say {part:?}: {text}");
    }
    assert!(!text.contains("ran"), "{text}");
    let path = ptc.dir.path().join("config.yaml");
    let output = std::process::Command::new(binary())
        .args(["--check-sandbox", "landlock", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success() && report.contains("allow_degraded: true"), "{report}");
}

// ---------------------------------------------------------------------------------------------------------
// The file system: reads, writes and metadata outside scratch, existence probes.

escape_attempt!(reading_files_outside_scratch_is_blocked, under none: Escapes, r#"
def read(path):
    data = open(path, 'rb').read()
    masked_or_docker_own(path, data)
    return f'{len(data)} bytes'
probe(read, '/etc/os-release', '/etc/hostname', *(['/private/etc/hosts', '/private/etc/passwd'] if sys.platform == 'darwin' else []))
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
    the_existence_of_host_files_cannot_be_probed, under none: Escapes [escapes_degraded], r#"
def stat_result(path):
    try:
        os.stat(path)
        return 'exists'
    except OSError as e:
        return why(e)
def existence():
    control = stat_result('/ptc-no-such-dir/no-such-file')
    if sys.platform == 'darwin':  # /, /etc, /tmp, /var and the like are walkable by design (metadata only)
        paths = ['/Users', '/Applications', '/Library/Keychains', '/private/var/root', '/etc/sudoers', '/usr/bin/sudo']
    else:
        paths = ['/etc/shadow', '/etc/os-release', '/root', '/home', '/proc/1', '/var']
    paths = [p for p in paths if p != f'/proc/{os.getpid()}']  # the program itself (docker: the runner is pid 1)
    leaks = {p: r for p in paths if not leads_to_our_files(p) and (r := stat_result(p)) != control}
    if not leaks:
        raise Blocked(f'every probe failed like a missing path ({control})')
    return f'told apart from a missing path: {leaks}'
probe(existence)
"#);

escape_attempt!(
    /// Tolerated: parents of the interpreter's files and scratch, an /etc holding only what the dynamic loader
    /// and local time read, a user database naming only the program's own user, and files masked with /dev/null
    /// (a container runtime's), and a container's own /proc (no process but the program) and empty /sys.
    listing_the_root_directory_shows_no_host_entries, under none: Escapes [seatbelt_gap: "the names in / are readable: dyld reads the root directory on macOS 26"], r#"
import stat
def etc_is_ours(name):
    path = os.path.join('/etc', name)
    if name in {'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime'}:
        return True
    if name in {'passwd', 'group'}:
        ours = str(os.getuid() if name == 'passwd' else os.getgid())
        return all(line.split(':')[2] == ours for line in open(path).read().splitlines())
    if path in DOCKER_OWN and DOCKER_OWN[path] == open(path, 'rb').read():
        return True
    st = os.stat(path)
    return stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)  # masked: /dev/null
def list_root():
    entries = set(os.listdir('/'))
    host = entries & {'home', 'root', 'proc', 'sys', 'boot', 'var', 'srv', 'mnt', 'media', 'opt', 'run', 'snap'}
    host = {e for e in host if not leads_to_our_files('/' + e)}
    if 'proc' in host and {p for p in os.listdir('/proc') if p.isdigit()} <= {str(os.getpid())}:
        host.discard('proc')  # a container's own /proc, showing no process but the program
    if 'sys' in host and not os.listdir('/sys'):
        host.discard('sys')  # masked (empty)
    if 'etc' in entries and not all(etc_is_ours(name) for name in os.listdir('/etc')):
        host.add('etc')
    if not host:
        raise Blocked(f'/ holds only {sorted(entries)}')
    return f'host entries {sorted(host)}'
probe(list_root)
"#);

escape_attempt!(
    /// Only /dev/null, /dev/zero, /dev/urandom (and what a container runtime always adds) may be visible. gVisor
    /// (docker with runsc) always adds devices of its own kernel, which reach no host device: FUSE (inert without
    /// mount, which the seccomp list and the missing capability refuse) and TUN (inert without CAP_NET_ADMIN).
    host_devices_are_invisible, under none: Escapes, &HOST_DEVICES.replace("GVISOR_DEVICES", if under_gvisor() { "'fuse', 'net'" } else { "" }));

const HOST_DEVICES: &str = r#"
def list_dev():
    allowed = {'null', 'zero', 'urandom', 'random', 'full', 'fd', 'stdin', 'stdout', 'stderr', 'shm', 'mqueue',
               'pts', 'ptmx', 'tty', 'console', 'core', GVISOR_DEVICES}
    extra = sorted(set(os.listdir('/dev')) - allowed)
    if not extra:
        raise Blocked('only the allowed devices are there')
    return f'{len(extra)} other devices, e.g. {extra[:8]}'
probe(list_dev)
"#;

escape_attempt!(following_a_symlink_out_of_scratch_is_blocked, under none: Escapes, r#"
def through_symlink(target):
    link = 'link-' + os.path.basename(target)
    os.symlink(target, link)
    data = open(link, 'rb').read()
    masked_or_docker_own(target, data)
    return f'read {len(data)} bytes through scratch/{link}'
probe(through_symlink, '/etc/os-release', '/etc/hostname')
"#);

escape_attempt!(
    /// An ordinary user is stopped by `fs.protected_hardlinks` (the file is not theirs); root is not.
    hardlinking_a_host_file_into_scratch_is_blocked, under none: EscapesAsRoot, r#"
def hardlink(target):
    link = 'hardlink-' + os.path.basename(target)
    os.link(target, link)
    return f'linked; read {len(open(link, "rb").read())} bytes'
probe(hardlink, '/etc/hostname', '/etc/os-release')
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

/// Mode, owner, times, inode change time and extended attributes of a host path, as the host sees them.
fn host_metadata(path: &std::path::Path) -> (u32, u32, u32, i64, i64, i64, Vec<String>) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    // SAFETY: listxattr into a buffer of the given size (macOS takes options too: none).
    #[cfg(target_os = "macos")]
    let len = unsafe { libc::listxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len(), 0) };
    // SAFETY: as above.
    #[cfg(not(target_os = "macos"))]
    let len = unsafe { libc::listxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    names.truncate(len.max(0) as usize);
    let xattrs =
        names.split(|&b| b == 0).filter(|n| !n.is_empty()).map(|n| String::from_utf8_lossy(n).into()).collect();
    let mtime = meta.mtime() * 1_000_000_000 + meta.mtime_nsec();
    let ctime = meta.ctime() * 1_000_000_000 + meta.ctime_nsec();
    (meta.mode(), meta.uid(), meta.gid(), mtime, ctime, meta.atime(), xattrs)
}

/// A Python string literal for a host path (JSON strings are Python literals).
fn py_str(path: &std::path::Path) -> String {
    serde_json::to_string(&path.display().to_string()).unwrap()
}

/// /dev/null is the host's own device node, bound into the sandbox: its mode, owner and times must not change
/// (a server running as root made them changeable; any user may set the times of a file it can write). Only
/// values it already has are written, so an escape changes nothing but the inode change time, the host-side
/// evidence. A container's /dev/null is a node of its own (another inode), not the host's: changing it is no
/// escape. Writing to the device must still work (`devices_still_work`).
#[apply(integration_test!)]
async fn changing_the_metadata_of_dev_null_is_blocked() {
    use std::os::unix::fs::MetadataExt;
    let dev_null = std::path::Path::new("/dev/null");
    let host = std::fs::metadata(dev_null).unwrap();
    let code = format!(
        r#"
st = os.stat('/dev/null')
if (st.st_dev, st.st_ino) != ({dev}, {ino}):
    raise SystemExit(print('BLOCKED: /dev/null here is not the host\'s node'))
CHANGES = {{
    'chmod': lambda: os.chmod('/dev/null', st.st_mode & 0o7777),
    'chown': lambda: os.chown('/dev/null', st.st_uid, st.st_gid),
    'utime to now': lambda: os.utime('/dev/null'),
    'utime': lambda: os.utime('/dev/null', ns=(st.st_atime_ns, st.st_mtime_ns)),
}}
def change(what):
    CHANGES[what]()
    return f'{{what}} of /dev/null succeeded'
probe(change, *CHANGES)
"#,
        dev = host.dev(),
        ino = host.ino()
    );
    attempt_with_evidence("changing_the_metadata_of_dev_null_is_blocked", UnderNone::Escapes, &code, || {
        host_metadata(dev_null)
    })
    .await;
}

/// A file of the user the server runs as, outside scratch, whose mode, times and extended attributes the
/// program tries to change, by path and through an O_PATH descriptor, with the old calls and the newest ones
/// (fchmodat2, setxattrat). Landlock does not cover metadata: without namespaces only seccomp can refuse.
#[apply(integration_test!)]
async fn changing_the_metadata_of_the_users_own_files_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("own-file");
    std::fs::write(&file, "mine").unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let code = format!(
        r#"
import struct
TARGET = {target}
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
def path_fd():
    return os.open(TARGET, os.O_PATH)
value = ctypes.create_string_buffer(b'1')
xattr_args = ctypes.create_string_buffer(struct.pack('QII', ctypes.addressof(value), 1, 0))
epoch = ctypes.create_string_buffer(32)  # two zeroed struct timespec
CHANGES = {{
    'chmod': lambda: os.chmod(TARGET, 0o644),
    'fchmodat2': lambda: syscall(452, AT_FDCWD, TARGET.encode(), 0o644, 0),
    'fchmodat2 on an O_PATH fd': lambda: syscall(452, path_fd(), b'', 0o644, AT_EMPTY_PATH),
    'utime': lambda: os.utime(TARGET, (0, 0)),
    'utimensat on an O_PATH fd': lambda: syscall(280, path_fd(), b'', epoch, AT_EMPTY_PATH),
    'chown to our own ids': lambda: os.chown(TARGET, os.getuid(), os.getgid()),
    'setxattr': lambda: os.setxattr(TARGET, 'user.ptc_escape_probe', b'1'),
    'setxattrat': lambda: syscall(463, AT_FDCWD, TARGET.encode(), 0, b'user.ptc_escape_probe', xattr_args, 16),
}}
def change(what):
    CHANGES[what]()
    return f'{{what}} of {{TARGET}} succeeded'
probe(change, *CHANGES)
"#,
        target = py_str(&file)
    );
    attempt_with_evidence("changing_the_metadata_of_the_users_own_files_is_blocked", UnderNone::Escapes, &code, || {
        host_metadata(&file)
    })
    .await;
}

escape_attempt!(
    /// With namespaces the mount table is the sandbox's own; without, the host's. Either way programs have no
    /// use for it. Assumes Linux 6.8+ (listmount and statmount) where `none` is checked.
    listing_the_mount_table_is_blocked, under none: Escapes, r#"
import struct
LSMT_ROOT = 0xFFFFFFFFFFFFFFFF
def listmount():
    request = ctypes.create_string_buffer(struct.pack('IIQQQ', 32, 0, LSMT_ROOT, 0, 0))  # struct mnt_id_req
    ids = (ctypes.c_uint64 * 512)()
    count = syscall(458, request, ids, 512, 0)
    return f'{count} mounts listed'
def statmount():
    stx = ctypes.create_string_buffer(256)
    syscall(332, -100, b'/', 0, 0x4000, stx)  # statx(STATX_MNT_ID_UNIQUE) of /
    mount_id = struct.unpack_from('Q', stx, 0x90)[0]
    request = ctypes.create_string_buffer(struct.pack('IIQQ', 24, 0, mount_id, 1))  # STATMOUNT_SB_BASIC
    answer = ctypes.create_string_buffer(4096)
    syscall(457, request, answer, 4096, 0)
    return f'statmount of mount {mount_id} answered'
CALLS = {'listmount': listmount, 'statmount': statmount}
def mount_table(call):
    return CALLS[call]()
probe(mount_table, *CALLS, strict=True)
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

escape_attempt!(replacing_the_interpreter_with_execv_is_blocked, under none: Escapes [seatbelt_gap: "the interpreter may execute itself: the same process, in the same sandbox"], r#"
argv = exec_argv('execv replaced the runner')
def execv(path):
    os.execv(path, argv)
probe(execv, sys.executable)
"#);

escape_attempt!(
    /// A copy of the interpreter in a memfd, run with fexecve (glibc: execveat(fd, "", AT_EMPTY_PATH), or
    /// /proc/self/fd/N).
    executing_a_memfd_is_blocked, under none: Escapes [linux_only], r#"
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

escape_attempt!(creating_a_netlink_socket_is_blocked, under none: Escapes [linux_only], r#"
import socket
def netlink_socket():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).close()  # NETLINK_ROUTE
    return 'AF_NETLINK socket created'
probe(netlink_socket)
"#);

escape_attempt!(
    /// Needs CAP_NET_RAW.
    creating_a_packet_socket_is_blocked, under none: EscapesAsRoot [linux_only], r#"
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

/// A datagram socketpair is allowed (asyncio), and on a datagram socket `sendto`, `connect` and `sendmsg` can
/// name any other socket: the test binds two host sockets of its own (a path in a directory of the server's
/// user, and an abstract name) and counts what reaches them.
#[apply(integration_test!)]
async fn reaching_a_host_unix_socket_from_a_socketpair_is_blocked() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host.sock");
    let by_path = UnixDatagram::bind(&path).unwrap();
    let name = format!("ptc-escape-probe-{}", fastrand::u64(..));
    let by_name = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    for socket in [&by_path, &by_name] {
        socket.set_nonblocking(true).unwrap();
    }
    let code = format!(
        r#"
import socket
TARGETS = {{'path': {path}, 'abstract name': b'\0' + {name}.encode()}}
def send(how):
    method, kind = how.split(' to ')
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    target = TARGETS[kind]
    if method == 'sendto':
        a.sendto(b'escaped', target)
    elif method == 'connect':
        a.connect(target)
        a.send(b'escaped')
    else:
        a.sendmsg([b'escaped'], [], 0, target)
    return f'{{how}}: a datagram went to the host socket'
probe(send, *[f'{{m}} to {{k}}' for m in ('sendto', 'connect', 'sendmsg') for k in TARGETS])
"#,
        path = py_str(&path),
        name = serde_json::to_string(&name).unwrap()
    );
    // Datagrams received since the last look (none before the attempt).
    let received = || {
        let mut buf = [0u8; 64];
        [&by_path, &by_name].iter().map(|s| std::iter::from_fn(|| s.recv(&mut buf).ok()).count()).sum::<usize>()
    };
    let name = "reaching_a_host_unix_socket_from_a_socketpair_is_blocked";
    attempt_with_evidence(name, UnderNone::Escapes, &code, received).await;
}

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

escape_attempt!(reading_the_servers_environment_is_blocked, under none: EscapesAsRoot [linux_only], r#"
def environ(pid):
    data = open(f'/proc/{other_process(pid)}/environ', 'rb').read()
    names = [v.split(b'=')[0].decode() for v in data.split(b'\0') if v]
    return f'{len(names)} variables, e.g. {names[:3]}'
probe(environ, os.getppid())
"#);

escape_attempt!(reading_the_servers_memory_through_proc_is_blocked, under none: EscapesAsRoot [linux_only], r#"
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

/// A host process of the test's own, killed when dropped.
struct HostProcess(std::process::Child);

impl HostProcess {
    /// `sleep` in its own process group, as the user running the tests (the server's user).
    fn sleeping() -> HostProcess {
        use std::os::unix::process::CommandExt;
        HostProcess(std::process::Command::new("sleep").arg("120").process_group(0).spawn().unwrap())
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With a pid namespace no other process can be named: a host process of the server's user (alive throughout) must
/// look like a pid that does not exist to every call that takes a pid and needs no permission over it. Degraded
/// mode has no pid namespace (documented: `stat('/proc/<pid>')` tells the same).
#[apply(integration_test!)]
async fn host_processes_cannot_be_found_by_pid() {
    let host = HostProcess::sleeping();
    let code = format!(
        r#"
import struct
PID = {pid}
def capget():
    header = (ctypes.c_uint32 * 2)(0x20080522, PID)
    syscall(125, header, (ctypes.c_uint32 * 6)())
CALLS = {{
    'getpgid': lambda: os.getpgid(PID),
    'getsid': lambda: os.getsid(PID),
    'getpriority': lambda: os.getpriority(os.PRIO_PROCESS, PID),
    'sched_getscheduler': lambda: os.sched_getscheduler(PID),
    'sched_getaffinity': lambda: os.sched_getaffinity(PID),
    'capget': capget,
}}
def find(call):
    CALLS[call]()
    return f'{{call}}({{PID}}) found the host process'
probe(find, *CALLS)
"#,
        pid = host.pid()
    );
    let expect = Expect::from(UnderNone::Escapes).escapes_degraded();
    attempt("host_processes_cannot_be_found_by_pid", expect, &code).await;
    assert!(is_running(host.pid()), "the host process must stay alive for the attempt to mean something");
}

/// setpriority and ioprio_set aimed at the caller's own user or process group (id 0) reach every process of the
/// user, or of the group, that the caller can see; seccomp used to check only the id. Host evidence: the nice
/// value and I/O priority of a host process of the server's user. (I/O priorities are Linux's.)
#[cfg(target_os = "linux")]
#[apply(integration_test!)]
async fn renicing_other_processes_is_blocked() {
    let host = HostProcess::sleeping();
    let pid = host.pid();
    // SAFETY: plain syscalls reading another process's priorities.
    let priorities = || unsafe {
        (libc::getpriority(libc::PRIO_PROCESS, pid as libc::id_t), libc::syscall(libc::SYS_ioprio_get, 1, pid))
    };
    let code = r#"
def renice(what):
    call, kind = what.split()
    if call == 'setpriority':
        which = getattr(os, kind)
        os.setpriority(which, 0, min(os.getpriority(which, 0) + 1, 19))
    else:
        syscall(251, {'IOPRIO_WHO_USER': 3, 'IOPRIO_WHO_PGRP': 2}[kind], 0, 2 << 13 | 7)  # best effort, lowest
    return f'{what} of id 0 (our user, our group) succeeded'
probe(renice, 'setpriority PRIO_USER', 'ioprio_set IOPRIO_WHO_USER', 'setpriority PRIO_PGRP',
      'ioprio_set IOPRIO_WHO_PGRP')
"#;
    let none = UnderNone::NotRun("it would renice every process of the user running the tests");
    attempt_with_evidence("renicing_other_processes_is_blocked", none, code, priorities).await;
}

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

/// A SysV shared memory segment of the host's, removed when dropped.
struct HostSegment(i32);

impl HostSegment {
    fn holding(data: &[u8]) -> HostSegment {
        // SAFETY: shmget/shmat/shmdt of a fresh private segment, written within its size.
        unsafe {
            let id = libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600);
            assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
            let address = libc::shmat(id, std::ptr::null(), 0);
            assert_ne!(address as isize, -1, "shmat: {}", std::io::Error::last_os_error());
            std::ptr::copy_nonoverlapping(data.as_ptr(), address.cast(), data.len().min(4096));
            libc::shmdt(address);
            HostSegment(id)
        }
    }

    /// Who attached it last, how many are attached, when it was last attached.
    fn attachments(&self) -> (i32, u64, i64) {
        // SAFETY: IPC_STAT into a zeroed struct.
        let mut stat: libc::shmid_ds = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::shmctl(self.0, libc::IPC_STAT, &mut stat) }, 0);
        (stat.shm_lpid, stat.shm_nattch, stat.shm_atime)
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        // SAFETY: removes the segment created above.
        unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

/// A SysV shared memory segment the test creates on the host, holding a secret: the program knows its id (ids are
/// small and guessable) and tries to attach it and read the secret. Host evidence: the segment's last attach.
#[apply(integration_test!)]
async fn attaching_a_host_sysv_segment_is_blocked() {
    let segment = HostSegment::holding(b"ptc-host-secret");
    let code = format!(
        r#"
def attach(shmid):
    address = syscall(30, shmid, None, 0o10000)  # shmat(id, NULL, SHM_RDONLY)
    data = ctypes.string_at(address, 15)
    syscall(67, address)  # shmdt
    return f'read {{data!r}} from the host segment {{shmid}}'
probe(attach, {id})
"#,
        id = segment.0
    );
    attempt_with_evidence("attaching_a_host_sysv_segment_is_blocked", UnderNone::Escapes, &code, || {
        segment.attachments()
    })
    .await;
}

/// A POSIX message queue of the host's, removed when dropped.
/// POSIX message queues: Linux's (macOS has none).
#[cfg(target_os = "linux")]
struct HostQueue {
    name: std::ffi::CString,
    queue: libc::mqd_t,
}

#[cfg(target_os = "linux")]
impl HostQueue {
    fn create() -> HostQueue {
        let name = std::ffi::CString::new(format!("/ptc-escape-probe-{}", fastrand::u64(..))).unwrap();
        // SAFETY: mq_open of a new queue with default attributes.
        let queue = unsafe {
            libc::mq_open(name.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600, std::ptr::null::<u8>())
        };
        assert!(queue >= 0, "mq_open: {}", std::io::Error::last_os_error());
        HostQueue { name, queue }
    }

    fn messages(&self) -> i64 {
        // SAFETY: mq_getattr into a zeroed struct.
        let mut attr: libc::mq_attr = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::mq_getattr(self.queue, &mut attr) }, 0);
        attr.mq_curmsgs
    }
}

#[cfg(target_os = "linux")]
impl Drop for HostQueue {
    fn drop(&mut self) {
        // SAFETY: closes and removes the queue created above.
        unsafe {
            libc::mq_close(self.queue);
            libc::mq_unlink(self.name.as_ptr());
        }
    }
}

/// A POSIX message queue the test creates on the host: the program tries to open it by name and send to it.
/// Host evidence: the number of messages in the queue.
#[cfg(target_os = "linux")]
#[apply(integration_test!)]
async fn sending_to_a_host_message_queue_is_blocked() {
    let queue = HostQueue::create();
    let name = queue.name.to_str().unwrap().trim_start_matches('/').to_string();
    let code = format!(
        r#"
def send(name):
    fd = syscall(240, name.encode(), os.O_WRONLY, 0, None)  # mq_open
    syscall(242, fd, b'escaped', 7, 0, None)  # mq_timedsend
    return f'sent a message to the host queue {{name}}'
probe(send, {name})
"#,
        name = serde_json::to_string(&name).unwrap()
    );
    attempt_with_evidence("sending_to_a_host_message_queue_is_blocked", UnderNone::Escapes, &code, || queue.messages())
        .await;
}

/// inotify instances count against a per-user quota (fs.inotify.max_user_instances) shared with every process of
/// the same user outside the sandbox, also across user namespaces and containers: the program takes all it can and
/// holds them for a few seconds while the test, as the same user, keeps trying to get one. fanotify too.
#[apply(integration_test!)]
async fn exhausting_the_users_inotify_instances_is_blocked() {
    let code = r#"
import time
def hold_inotify_instances():
    held = []
    try:
        while len(held) < 200:
            held.append(syscall(294, 0o2000000))  # inotify_init1(IN_CLOEXEC)
    except OSError:
        if not held:
            raise
    time.sleep(4)  # while the host side tries to get one
    return f'held {len(held)} inotify instances for 4 s'
def fanotify_init():
    fd = syscall(300, 0x200, os.O_RDONLY)  # FAN_CLASS_NOTIF | FAN_REPORT_FID: allowed without privileges
    return f'fanotify fd {fd}'
CALLS = {'inotify': hold_inotify_instances, 'fanotify': fanotify_init}
def watch(kind):
    return CALLS[kind]()
probe(watch, *CALLS, strict=True)
"#;
    let none = UnderNone::NotRun("it would take every inotify instance of the user running the tests");
    attempt_watched_from_the_host("exhausting_the_users_inotify_instances_is_blocked", none, code, INOTIFY_WATCHER)
        .await;
}

/// Tries to get an inotify instance every 20 ms, for up to a minute, and says when it cannot.
const INOTIFY_WATCHER: &str = r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
end = time.monotonic() + 60
while time.monotonic() < end:
    fd = libc.inotify_init1(0o2000000)
    if fd >= 0:
        os.close(fd)
    elif ctypes.get_errno() == 24:  # EMFILE: the user's instances are all taken
        print('starved', flush=True)
        break
    time.sleep(0.02)
"#;

/// Queued signals count against a per-user quota (RLIMIT_SIGPENDING, checked against the receiving user's count in
/// each user namespace up to the host's): a program that queues real-time signals to itself, blocked so they stay
/// pending, would leave no room for the host user's own (timers, `sigqueue`). The runner's RLIMIT_SIGPENDING
/// caps what it can hold, under `none` too; the host side meanwhile keeps queueing one to itself.
#[apply(integration_test!)]
async fn exhausting_the_users_pending_signals_is_blocked() {
    let code = r#"
import signal, time
def hold_pending_signals():
    # Aimed at this thread, which blocks it: a signal aimed at the process would go to a thread that does not.
    libc = ctypes.CDLL(None)
    libc.pthread_self.restype = ctypes.c_ulong
    me = ctypes.c_ulong(libc.pthread_self())
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    held = 0
    while held < 1_000_000:
        error = libc.pthread_sigqueue(me, signal.SIGRTMIN, None)
        if error == errno.EAGAIN:
            break
        if error:
            raise OSError(error, 'pthread_sigqueue')
        held += 1
    if held <= 1024:
        raise Blocked(f'{held} signals queued, then EAGAIN')
    time.sleep(4)  # while the host side tries to queue one
    return f'held {held} pending signals for 4 s'
probe(hold_pending_signals, strict=True)
"#;
    attempt_watched_from_the_host(
        "exhausting_the_users_pending_signals_is_blocked",
        UnderNone::Blocked,
        code,
        SIGNAL_WATCHER,
    )
    .await;
}

/// Queues a real-time signal to itself (blocked) and takes it back every 20 ms, for up to a minute, and says when it
/// cannot.
const SIGNAL_WATCHER: &str = r#"
import ctypes, errno, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
end = time.monotonic() + 60
while time.monotonic() < end:
    if libc.sigqueue(os.getpid(), signal.SIGRTMIN, None) == 0:  # a single thread: it stays pending for it
        signal.sigtimedwait([signal.SIGRTMIN], 1)
    elif ctypes.get_errno() == errno.EAGAIN:  # the user's pending signals are all taken
        print('starved', flush=True)
        break
    time.sleep(0.02)
"#;

/// Runs an attempt on a per-user quota while `watcher` (Python that prints `starved` when it cannot get its share)
/// runs on the host as every user the quota might be counted for: the user running the tests (which also made the
/// run's user namespace, if any) and the host user the programs run as.
async fn attempt_watched_from_the_host(name: &str, none: UnderNone, code: &str, watcher: &str) {
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    let users = [None].into_iter().chain(programs_host_uid().map(Some));
    let watchers: Vec<HostProcess> = users
        .map(|uid| {
            let mut command = std::process::Command::new("python3");
            command.args(["-I", "-S", "-c", watcher]).stdout(std::process::Stdio::piped());
            if let Some(uid) = uid {
                use std::os::unix::process::CommandExt;
                command.uid(uid).gid(uid);
            }
            HostProcess(command.spawn().unwrap())
        })
        .collect();
    let outcome = attempt_in(&ptc, name, none.into(), code).await;
    let mut starved = false;
    for mut watcher in watchers {
        let _ = watcher.0.kill();
        let mut seen = String::new();
        std::io::Read::read_to_string(watcher.0.stdout.as_mut().unwrap(), &mut seen).unwrap();
        starved |= seen.contains("starved");
    }
    match outcome {
        Some(Outcome::Blocked) => assert!(!starved, "{name}: blocked, yet the host side was starved"),
        Some(Outcome::Escaped) => assert!(starved, "{name}: escaped, yet the host side always got its share"),
        None => {}
    }
}

/// The host uid programs of the sandbox under test run as, when it is not this process's: a root server's
/// landlock programs and docker's run as 65534.
fn programs_host_uid() -> Option<u32> {
    let sandbox = sandbox_under_test();
    let remapped = sandbox == "docker" || (sandbox == "landlock" && !landlock_is_degraded());
    (running_as_root() && remapped).then_some(65534)
}

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
    attempt_in(&ptc, "no_fds_are_inherited_beyond_the_runners_own", UnderNone::Blocked.into(), FOREIGN_FDS).await;
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
// macOS: what `(deny default)` does not cover there, and file operations only macOS has.

escape_attempt!(
    /// The process list (`kern.proc.all`), which also names the server and every downstream.
    listing_every_process_with_sysctl_is_blocked, under none: Escapes [macos_only], r#"
def process_list():
    libc = ctypes.CDLL(None, use_errno=True)
    size = ctypes.c_size_t(0)
    if libc.sysctlbyname(b'kern.proc.all', None, ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return f'the process list is readable ({size.value} bytes)'
probe(process_list)
"#);

escape_attempt!(
    /// Another process's arguments and environment (`KERN_PROCARGS2`): the server's, whose environment holds the
    /// tokens of downstream servers.
    reading_the_servers_arguments_and_environment_with_sysctl_is_blocked, under none: Escapes [macos_only], r#"
def procargs(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    mib = (ctypes.c_int * 3)(1, 49, other_process(pid))  # CTL_KERN, KERN_PROCARGS2
    size = ctypes.c_size_t(1 << 16)
    buffer = ctypes.create_string_buffer(size.value)
    if libc.sysctl(mib, 3, buffer, ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return f'read {size.value} bytes of the arguments and environment of process {pid}'
probe(procargs, os.getppid())
"#);

escape_attempt!(
    /// Process ids and another process's information through libproc (`process-info*`, which `(deny default)`
    /// does not cover).
    listing_and_inspecting_processes_with_libproc_is_blocked, under none: Escapes [macos_only], r#"
libc = ctypes.CDLL(None, use_errno=True)
def list_pids():
    count = libc.proc_listallpids(None, 0)
    if count < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    if count <= 1:
        raise Blocked(f'{count} process ids: only its own')
    return f'{count} process ids'
def bsd_info(pid):
    buffer = ctypes.create_string_buffer(136)  # struct proc_bsdinfo
    if libc.proc_pidinfo(other_process(pid), 3, ctypes.c_uint64(0), buffer, 136) <= 0:  # PROC_PIDTBSDINFO
        code = ctypes.get_errno()
        raise OSError(code or 1, os.strerror(code or 1))
    return f'read the information of process {pid}'
def either(what):
    return list_pids() if what == 'pids' else bsd_info(os.getppid())
probe(either, 'pids', 'info of the server')
"#);

/// IOKit and CoreFoundation through ctypes, for the two attempts below.
const IOKIT: &str = r#"
iokit = ctypes.CDLL('/System/Library/Frameworks/IOKit.framework/IOKit')
cf = ctypes.CDLL('/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation')
iokit.IOServiceMatching.restype = ctypes.c_void_p
iokit.IOServiceMatching.argtypes = [ctypes.c_char_p]
iokit.IOServiceGetMatchingService.restype = ctypes.c_uint32
iokit.IOServiceGetMatchingService.argtypes = [ctypes.c_uint32, ctypes.c_void_p]
iokit.IORegistryEntryFromPath.restype = ctypes.c_uint32
iokit.IORegistryEntryFromPath.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
iokit.IORegistryEntryCreateCFProperty.restype = ctypes.c_void_p
iokit.IORegistryEntryCreateCFProperty.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32]
iokit.IORegistryEntryCreateCFProperties.restype = ctypes.c_int
iokit.IORegistryEntryCreateCFProperties.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint32]
cf.CFStringCreateWithCString.restype = ctypes.c_void_p
cf.CFStringCreateWithCString.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32]
cf.CFDictionaryGetCount.restype = ctypes.c_long
cf.CFDictionaryGetCount.argtypes = [ctypes.c_void_p]
UTF8 = 0x08000100
"#;

escape_attempt!(
    /// The Mac's serial number, an IOKit property (`iokit-get-properties`, which `(deny default)` does not cover).
    reading_the_macs_serial_number_is_blocked, under none: Escapes [macos_only],
    &format!("{IOKIT}{}", r#"
def serial_number():
    service = iokit.IOServiceGetMatchingService(0, iokit.IOServiceMatching(b'IOPlatformExpertDevice'))
    if not service:
        raise Blocked('the platform expert service cannot be found')
    key = cf.CFStringCreateWithCString(None, b'IOPlatformSerialNumber', UTF8)
    if not iokit.IORegistryEntryCreateCFProperty(service, key, None, 0):
        raise Blocked('the serial number property cannot be read')
    return 'read the serial number'
probe(serial_number)
"#)
);

escape_attempt!(
    /// NVRAM variables (`nvram*`, which `(deny default)` does not cover).
    reading_nvram_is_blocked, under none: Escapes [macos_only],
    &format!("{IOKIT}{}", r#"
def nvram():
    options = iokit.IORegistryEntryFromPath(0, b'IODeviceTree:/options')
    if not options:
        raise Blocked('the NVRAM entry cannot be found')
    properties = ctypes.c_void_p()
    status = iokit.IORegistryEntryCreateCFProperties(options, ctypes.byref(properties), None, 0)
    if status != 0 or not properties:
        raise Blocked(f'IORegistryEntryCreateCFProperties returned {status:#x}')
    count = cf.CFDictionaryGetCount(properties)
    if count == 0:
        raise Blocked('no variable is visible')
    return f'read {count} NVRAM variables'
probe(nvram)
"#)
);

/// A file of the server's user outside scratch, on the same volume (hard links and clones cannot cross
/// volumes): linked or cloned into scratch it would become readable there. Host evidence: the file's inode
/// change time.
#[apply(integration_test!)]
async fn linking_or_cloning_a_host_file_into_scratch_is_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "a secret of the user's").unwrap();
    let code = format!(
        r#"
SECRET = {secret}
def link():
    os.link(SECRET, 'linked')
    data = open('linked', 'rb').read()
    os.remove('linked')
    return f'linked; read {{len(data)}} bytes'
def clone():
    if sys.platform != 'darwin':
        raise Skip('clonefile is macOS')
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.clonefile(SECRET.encode(), b'cloned', 0) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    data = open('cloned', 'rb').read()
    os.remove('cloned')
    return f'cloned; read {{len(data)}} bytes'
probe(lambda how: link() if how == 'link' else clone(), 'link', *(['clone'] if sys.platform == 'darwin' else []))
"#,
        secret = py_str(&secret)
    );
    use std::os::unix::fs::MetadataExt;
    // A link (made and removed) shows in the file's inode change time.
    let changed = || std::fs::metadata(&secret).map(|m| (m.ctime(), m.ctime_nsec())).unwrap();
    let name = "linking_or_cloning_a_host_file_into_scratch_is_blocked";
    attempt_with_evidence(name, UnderNone::Escapes, &code, changed).await;
}

escape_attempt!(
    /// An immutable flag on a scratch file would make scratch undeletable by the server (`file-write-flags`).
    setting_file_flags_in_scratch_is_blocked, under none: Escapes [macos_only], r#"
import stat
def immutable():
    open('flagged', 'w').close()
    os.chflags('flagged', stat.UF_IMMUTABLE)
    os.chflags('flagged', 0)
    os.remove('flagged')
    return 'set (and cleared) UF_IMMUTABLE on a scratch file'
probe(immutable)
"#);

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
    /// 32 MiB files stay under the file-size rlimit; where scratch is a plain directory (`none`, `seatbelt`,
    /// `landlock` degraded) the server measures it and ends the run past `scratch_mb`.
    filling_the_disk_with_many_files_is_stopped, under none: Blocked,
    &format!("{FILL_SCRATCH}probe(fill_scratch, 32)")
);

/// 20,000 threads at once, with small stacks so that no memory limit stops them first (one run held that many
/// before, on a machine with pid_max 32768): a run gets at most `limits.tasks` (64) threads and processes. In
/// degraded landlock RLIMIT_NPROC counts every task of the user, so a run's share moves with the user's other
/// tasks (documented): there it must stay within 4 × 64. Not run under `none`, where root's tasks are not bounded
/// (the kernel exempts root from RLIMIT_NPROC).
#[apply(integration_test!)]
async fn twenty_thousand_threads_are_refused() {
    let degraded = sandbox_under_test() == "landlock" && landlock_is_degraded();
    let code = format!("LIMIT = {}\n{THREADS}", if degraded { 4 * 64 } else { 64 });
    let ptc = Ptc::start(&config(&[], EXECUTION)).await;
    let name = "twenty_thousand_threads_are_refused";
    let none = UnderNone::NotRun(
        "as root nothing bounds the tasks of a run under none: it would take most of the machine's pids",
    );
    attempt_in(&ptc, name, none.into(), &code).await;
    // The server answers other requests as before.
    let (_, problems) = ptc.list_callable_tools().await;
    assert_eq!(problems, None);
}

const THREADS: &str = r#"
import threading
def start_threads():
    threading.stack_size(64 << 10)
    stop, threads = threading.Event(), []
    try:
        for _ in range(20_000):
            thread = threading.Thread(target=stop.wait)
            thread.start()
            threads.append(thread)
    except (RuntimeError, MemoryError) as e:
        error = e
    else:
        error = None
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    if len(threads) <= LIMIT:
        raise Blocked(f'{len(threads)} threads, then {error}')
    return f'{len(threads)} threads at once' + (f', then {error}' if error else '')
probe(start_threads)
"#;

/// Memory a program could hold beside its private memory, 512 MiB of each under `memory_mb: 256`: memfds and SysV
/// shared memory, in 64 MiB pieces written and left unmapped (no address-space limit counts them; freed at the
/// end), and shared anonymous memory and a shared mapping of /dev/zero, touched page by page. (Scratch files are
/// memory too where scratch is a tmpfs; `scratch_mb` bounds them.)
#[apply(integration_test!)]
async fn memory_outside_the_limit_cannot_be_held() {
    let code = r#"
import mmap
PIECE, PIECES = 64 << 20, 8
def memfd():
    fds, chunk = [], b'x' * (1 << 20)
    try:
        for _ in range(PIECES):
            fds.append(os.memfd_create('hoard'))
            for _ in range(PIECE // len(chunk)):
                os.write(fds[-1], chunk)
    finally:
        for fd in fds:
            os.close(fd)
def sysv():
    ids = []
    try:
        for _ in range(PIECES):
            ids.append(syscall(29, 0, PIECE, 0o1000 | 0o600))  # shmget(IPC_PRIVATE, IPC_CREAT | 0600)
            address = syscall(30, ids[-1], None, 0)
            ctypes.memset(address, 1, PIECE)
            syscall(67, address)  # shmdt: the segment stays
    finally:
        for shmid in ids:
            syscall(31, shmid, 0, None)  # IPC_RMID
def touch(buffer):
    for offset in range(0, len(buffer), 4096):
        buffer[offset] = 1
def shared_anonymous():
    touch(mmap.mmap(-1, PIECE * PIECES, mmap.MAP_SHARED))
def dev_zero():
    with open('/dev/zero', 'r+b') as f:
        touch(mmap.mmap(f.fileno(), PIECE * PIECES, mmap.MAP_SHARED))
HOARDS = {'memfd': memfd, 'SysV': sysv, 'shared anonymous': shared_anonymous, '/dev/zero': dev_zero}
def hoard(kind):
    HOARDS[kind]()
    return f'held {PIECE * PIECES >> 20} MiB of {kind} memory with memory_mb 256'
probe(hoard, *HOARDS)
"#;
    let execution = format!("{EXECUTION}  limits:\n    memory_mb: 256\n");
    let ptc = Ptc::start(&config(&[], &execution)).await;
    attempt_in(&ptc, "memory_outside_the_limit_cannot_be_held", UnderNone::Escapes.into(), code).await;
}

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
    devices_still_work,
    r#"
with open('/dev/null', 'w') as f:
    print(f.write('discarded'))
print(open('/dev/null', 'rb').read(), open('/dev/zero', 'rb').read(4), len(open('/dev/urandom', 'rb').read(4)))
"#,
    "9\nb'' b'\\x00\\x00\\x00\\x00' 4"
);

/// `shutil.copy` sets the copy's mode and `copy2` its times as well: metadata changes in scratch work, except in
/// the landlock sandbox's degraded mode, where they are denied everywhere (documented: `shutil.copyfile` works).
#[apply(integration_test!)]
async fn copying_files_with_shutil_still_works() {
    let code = r#"
import os, shutil
with open('a', 'w') as f:
    f.write('x')
shutil.copyfile('a', 'plain')
print(open('plain').read())
try:
    os.chmod('a', 0o640)
    shutil.copy('a', 'b')
    shutil.copy2('a', 'c')
    print(oct(os.stat('b').st_mode & 0o777), os.stat('c').st_mtime_ns == os.stat('a').st_mtime_ns)
except PermissionError as e:
    print('metadata changes denied:', e.strerror)
"#;
    let degraded = sandbox_under_test() == "landlock" && landlock_is_degraded();
    let expected = if degraded { "x\nmetadata changes denied: Operation not permitted" } else { "x\n0o640 True" };
    works(false, code, expected).await;
}

/// `getpass.getuser()` and `pwd.getpwuid(os.getuid())` find the program's user: a user database of the sandbox's
/// own (landlock with namespaces, docker) or the host's (`none`). Degraded landlock cannot read the host's, so
/// only `getpass` works there (through `LOGNAME`).
#[apply(integration_test!)]
async fn the_programs_user_has_a_name() {
    let code = r#"
import getpass, os
name = getpass.getuser()
print(bool(name), name == os.environ.get('LOGNAME', name))
try:
    import pwd
    entry = pwd.getpwuid(os.getuid())
    print(entry.pw_name == name, entry.pw_uid == os.getuid())
except KeyError:
    print('no user database entry')
"#;
    let degraded = sandbox_under_test() == "landlock" && landlock_is_degraded();
    let expected = if degraded { "True True\nno user database entry" } else { "True True\nTrue True" };
    works(false, code, expected).await;
}

/// The memory limit counts memory, not address space: after a 16-thread pool (each thread once had a malloc
/// arena and a stack reserved) a program can still allocate and touch 600 MiB under `memory_mb: 1024`.
#[apply(integration_test!)]
async fn a_program_that_ran_a_thread_pool_can_still_allocate_most_of_its_memory() {
    let code = r#"
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(16) as pool:
    sizes = list(pool.map(lambda i: len(bytearray(1 << 20)) * i, range(64)))
block = bytearray(600 << 20)
for offset in range(0, len(block), 4096):
    block[offset] = 1
print(len(sizes), len(block) >> 20, 'MiB')
"#;
    let servers: Vec<String> = vec![];
    let ptc = Ptc::start(&config(&servers, &format!("{EXECUTION}  limits:\n    memory_mb: 1024\n"))).await;
    let Some(()) = require_backend(&ptc).await else { return };
    assert_eq!(ptc.execute(code).await.expect_ok(), "[Script executed successfully]\n64 600 MiB");
}

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
