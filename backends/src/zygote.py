"""ptc-mcp runner, part 4: the zygote. Follows the runner source (with AS_ZYGOTE set, so the runner does not
start): one warm interpreter, the runner's modules and `execution.preload` imported, that forks each new
runner when the server asks; the fork takes on its run's own confinement before it says `ready`.

Started as `python -I -S -c <source> <runner options> <confinement>`; fd 0 is a SOCK_SEQPACKET socket to the
server (one JSON message per packet, fds alongside), fds 1 and 2 its diagnostics. Messages (ZYGOTE.md):
* server: {"fork": id, "rlimits": [[resource, value], ...], "env": {...}, "scratch": dir (hex) or null,
  "scratch_mb": n} with the run's stdin, stdout and stderr (and, where the run has a cgroup, an O_PATH handle
  on its directory and its cgroup.procs open for writing);
  {"reap": id}: the server has killed what was left of the run's group, the zygote may reap its leader.
* zygote: {"forked": id} with a pidfd of the run's leader, or {"failed": id, "error": why}; then
  {"exited": id, "code": n} or {"exited": id, "signal": n} once the leader exited (not yet reaped: its process
  group id stays reserved until the server has killed the group and sent `reap`).

The zygote runs no program and keeps no secret: a fork starts from its memory and owns nothing else of it.
Confinement `none`: its own process group, the run's cgroup, rlimits and working directory. `landlock` (the
zygote itself runs in the helper's namespaces with the minimal root): a user namespace of the run's own (so
RLIMIT_NPROC counts its tasks alone), new mount, pid, network, IPC and UTS namespaces, a fresh sized tmpfs
scratch, then in pid 1 of the new pid namespace: no_new_privs, Landlock, no capabilities and the same
seccomp filter as a fresh start (built by the helper); its parent only relays how it ended, as the helper's does.
Any failure ends the fork (exit status 125, the reason on the run's stderr) before any program byte arrives.
"""


def zygote_main():
    import json
    import select
    import signal
    import socket

    confinement = json.loads(sys.argv[2])
    del sys.argv[2:]
    options = runner_options()
    packages = prepare_packages(options)
    control = socket.socket(fileno=0)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children = {}  # pid -> [run id, exit reported, reap asked]
    libc = Libc()
    landlocked = confinement["backend"] == "landlock"

    def send(message, fds=()):
        socket.send_fds(control, [json.dumps(message).encode()], list(fds))

    def look_for_exits():
        for pid, child in list(children.items()):
            if child[1]:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
            if info is None:
                continue
            child[1] = True
            if child[2]:
                reap(pid)
            elif info.si_code == os.CLD_EXITED:
                send({"exited": child[0], "code": info.si_status})
            else:
                send({"exited": child[0], "signal": info.si_status})

    def reap(pid):
        children.pop(pid, None)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    while True:
        ready, _, _ = select.select([control, wake_read], [], [])
        if wake_read in ready:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
            look_for_exits()
        if control not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 16, 8)
        if not message:
            os._exit(0)  # the server is gone; the forks die with this process
        request = json.loads(message)
        if "reap" in request:
            for pid, child in list(children.items()):
                if child[0] == request["reap"]:
                    child[2] = True
                    if child[1]:
                        reap(pid)
            continue
        run = request["fork"]
        try:
            pid, in_cgroup = fork_into(libc, fds[3] if len(fds) > 3 else None)
        except OSError as e:
            for fd in fds:
                os.close(fd)
            send({"failed": run, "error": f"fork: {e}"})
            continue
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            become_runner(request, fds, in_cgroup, confinement, options, packages, libc, landlocked)
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever comes first, the group exists before `forked`
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        children[pid] = [run, False, False]
        try:
            leader = os.pidfd_open(pid)
        except OSError as e:
            os.kill(pid, signal.SIGKILL)
            send({"failed": run, "error": f"pidfd_open: {e}"})
            continue
        send({"forked": run}, [leader])
        os.close(leader)
        look_for_exits()


CLONE_INTO_CGROUP, CLONE3, CLONE_ARGS_WORDS = 0x200000000, 435, 11  # clone3's struct clone_args, version 2


def fork_into(libc, cgroup_dir):
    """os.fork(); with the run's cgroup (`cgroup_dir`, a handle on its directory) a clone3 that starts the fork
    in it (Linux 5.7+) with CPython's own steps around a fork. Moving a process into a cgroup waits for the
    kernel's RCU grace period (5-22 ms measured on a 2-core VM), starting in one does not. Where clone3 refuses
    (an older kernel, or a zygote not allowed to write the cgroup: a root server's runs nobody's), os.fork();
    the fork then moves itself in. Returns the pid (0 in the fork) and whether the fork is in the cgroup."""
    if cgroup_dir is None:
        return os.fork(), False
    c = libc.ctypes
    args = (c.c_uint64 * CLONE_ARGS_WORDS)()
    args[0], args[4], args[10] = CLONE_INTO_CGROUP, 17, cgroup_dir  # flags, exit_signal (SIGCHLD), cgroup
    api = c.pythonapi
    api.PyOS_BeforeFork()
    pid = libc.lib.syscall(c.c_long(CLONE3), args, c.c_size_t(c.sizeof(args)))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0, True
    api.PyOS_AfterFork_Parent()
    if pid > 0:
        return pid, True
    return os.fork(), False


def become_runner(request, fds, in_cgroup, confinement, options, packages, libc, landlocked):
    """In the fork: the run's confinement, then the runner. Never returns."""
    try:
        os.setpgid(0, 0)
        die_with_parent(libc)
        libc.prctl(Libc.PR_SET_NAME, libc.ctypes.c_char_p(b"ptc-runner"))  # what `ps` shows for the run
        stdio, procs = fds[:3], fds[4:]
        for fd in procs if not in_cgroup else ():
            os.write(fd, b"0")  # into the run's cgroup first: everything started from here is counted there
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        close_all_but(libc, [confinement["proc_fd"]] if landlocked else [])
        if landlocked:
            enter_namespaces(libc, confinement, request)
        scratch = bytes.fromhex(request["scratch"] or confinement["scratch"])  # paths come as hex: any bytes
        os.chdir(scratch)
        os.environ.clear()
        os.environ.update(request["env"])
        os.environb[b"HOME"] = os.environb[b"TMPDIR"] = scratch
        for resource_number, value in request["rlimits"]:
            resource.setrlimit(resource_number, (value, value))
        if landlocked:
            confine_with_landlock(libc, confinement)
    except BaseException as e:
        try:
            os.write(2, f"ptc-zygote: the fork could not be confined: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(125)
    serve(options, *packages)
    os._exit(0)


def close_all_but(libc, keep):
    """Closes every fd past stdio but `keep` (the zygote's socket and pipes, the fds it was sent)."""
    low = 3
    for fd in sorted(keep):
        close_range(libc, low, fd - 1)
        low = fd + 1
    close_range(libc, low, None)


def close_range(libc, low, high):
    """close_range(2) (Linux 5.9+, the same number everywhere), or one close per fd below the open-files limit."""
    c = libc.ctypes
    if high is not None and high < low:
        return
    if libc.lib.syscall(c.c_long(436), c.c_uint(low), c.c_uint(0xFFFFFFFF if high is None else high), c.c_uint(0)) != 0:
        os.closerange(low, resource.getrlimit(resource.RLIMIT_NOFILE)[0] if high is None else high + 1)


class Libc:
    """The few C library calls confinement needs, through ctypes (imported in the zygote, once)."""

    PR_SET_PDEATHSIG, PR_SET_NAME, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_SECCOMP = (
        1, 15, 38, 24, 47, 22)

    def __init__(self):
        import ctypes
        self.ctypes = ctypes
        self.lib = ctypes.CDLL(None, use_errno=True)
        self.lib.syscall.restype = ctypes.c_long

    def check(self, what, result):
        if result < 0:
            error = self.ctypes.get_errno()
            raise OSError(error, f"{what}: {os.strerror(error)}")
        return result

    def prctl(self, option, *args):
        c = self.ctypes
        args = [a if isinstance(a, c.c_char_p) else c.c_ulong(a) for a in args]
        return self.check(f"prctl({option})", self.lib.prctl(c.c_int(option), *args, *[c.c_ulong(0)] * (4 - len(args))))

    def syscall(self, what, number, *args):
        return self.check(what, self.lib.syscall(self.ctypes.c_long(number), *args))


def die_with_parent(libc):
    """SIGKILL when the parent (the zygote, or the relay) dies; ends now if it already has."""
    parent = os.getppid()
    libc.prctl(Libc.PR_SET_PDEATHSIG, 9)
    if os.getppid() != parent:
        os._exit(125)


CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (
    0x20000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000)
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8


def enter_namespaces(libc, confinement, request):
    """A user namespace of the run's own (its ids mapped to the zygote's, through the zygote's /proc handle),
    the other namespaces, the run's scratch tmpfs; then the fork that becomes pid 1. The process that forked
    stays outside the new pid namespace, relays how pid 1 ended, and never returns."""
    lib, proc, uid = libc.lib, confinement["proc_fd"], confinement["sandbox_id"]
    libc.check("unshare(user)", lib.unshare(CLONE_NEWUSER))
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1\n"), ("gid_map", f"{uid} {uid} 1\n")):
        fd = os.open(f"self/{name}", os.O_WRONLY, dir_fd=proc)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    die_with_parent(libc)  # a new user namespace changes the credentials, which clears the parent-death signal
    os.close(proc)
    libc.check("unshare", lib.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS))
    scratch = bytes.fromhex(confinement["scratch"])
    data = f"size={request['scratch_mb']}m,mode=700,uid={uid},gid={uid}".encode()
    libc.check("mounting the scratch tmpfs", lib.mount(b"tmpfs", scratch, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, data))
    first = os.fork()
    if first == 0:
        die_with_parent(libc)
        return
    relay(libc, first)


def relay(libc, child):
    """Holds nothing of the run (no channel, no capability) and ends as `child` ended."""
    close_range(libc, 0, None)
    libc.prctl(Libc.PR_SET_NAME, libc.ctypes.c_char_p(b"ptc-relay"))
    libc.prctl(Libc.PR_SET_NO_NEW_PRIVS, 1)
    drop_capabilities(libc)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        import signal
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the same death, without a core
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def drop_capabilities(libc):
    c = libc.ctypes
    for cap in range(64):
        if libc.lib.prctl(c.c_ulong(Libc.PR_CAPBSET_DROP), c.c_ulong(cap), c.c_ulong(0), c.c_ulong(0), c.c_ulong(0)) != 0:
            break
    libc.prctl(Libc.PR_CAP_AMBIENT, 4)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = (c.c_uint32 * 2)(0x20080522, 0)  # version 3, this process
    data = (c.c_uint32 * 6)()
    libc.check("capset", libc.lib.capset(header, data))


def confine_with_landlock(libc, confinement):
    """no_new_privs, Landlock (the helper's rules), no capabilities, the helper's seccomp filters."""
    c = libc.ctypes
    libc.prctl(Libc.PR_SET_NO_NEW_PRIVS, 1)
    rules = confinement["landlock"]
    attr = (c.c_uint64 * 3)(rules["fs"], rules["net"], rules["scoped"])
    ruleset = libc.syscall("landlock_create_ruleset", 444, attr, c.c_size_t(c.sizeof(attr)), c.c_uint32(0))
    for path, access in rules["rules"]:
        fd = os.open(bytes.fromhex(path), os.O_PATH | os.O_CLOEXEC)
        rule = c.create_string_buffer(access.to_bytes(8, sys.byteorder) + fd.to_bytes(4, sys.byteorder, signed=True), 12)
        libc.syscall("landlock_add_rule", 445, c.c_int(ruleset), c.c_int(1), rule, c.c_uint32(0))
        os.close(fd)
    libc.syscall("landlock_restrict_self", 446, c.c_int(ruleset), c.c_uint32(0))
    os.close(ruleset)
    drop_capabilities(libc)

    class Program(c.Structure):
        _fields_ = [("len", c.c_ushort), ("filter", c.c_void_p)]

    for encoded in confinement["seccomp"]:  # hex of struct sock_filter arrays, in order
        code = bytes.fromhex(encoded)
        buffer = c.create_string_buffer(code, len(code))
        program = Program(len(code) // 8, c.cast(buffer, c.c_void_p))
        libc.prctl(Libc.PR_SET_SECCOMP, 2, c.addressof(program))  # SECCOMP_MODE_FILTER


zygote_main()
