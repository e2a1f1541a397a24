"""ptc-mcp docker prologue: confines the interpreter inside its container, then the runner source follows.

The container already has no network, a read-only root, no capabilities, no_new_privs, a non-root user,
cgroup limits and Docker's own seccomp profile. What a container cannot express is added here, in the
interpreter itself before any program exists (single-threaded: the runner starts its threads later):
* an empty environment: Docker always sets PATH and HOSTNAME; only HOME, TMPDIR, LOGNAME and USER stay;
* a user database for the runner's user where /etc is the container's own (an empty tmpfs hiding the
  image's), so that `getpass` and `pwd` find it; an image's own /etc is left as it is;
* rlimits (address space, CPU time, file size, open files, no core dumps), the same as the host backends
  (Docker's ulimits cannot carry the address-space limit: it would apply to the runtime's own start-up);
* a seccomp-bpf filter stacked on Docker's profile, the same deny list as the landlock backend: no sockets
  (socketpair for AF_UNIX only, which asyncio needs) and no socket call that takes an address (connect,
  bind, sendto with one, sendmsg, sendmmsg), no new processes (fork, vfork, clone without CLONE_THREAD;
  clone3 fails with ENOSYS so the C library falls back to clone; no setsid or setpgid), no exec at all (the
  interpreter already runs), no io_uring, keys, bpf, perf, userfaultfd, ptrace, cross-process memory,
  namespaces, mounts or the mount table, no SysV IPC, POSIX message queues or memfds, no inotify or
  fanotify (their per-user quotas are shared with the host's user of the same uid), and signals, rlimits,
  priorities, scheduling and pidfds only at this process. Another architecture's syscall entry point kills
  the process.
Any failure ends the process before the runner starts (exit status 70, the reason on stderr): it never runs a
program unconfined. Stdlib only (ctypes); `confine(limits)` is called by the line after this source.
"""


def confine(limits):
    import errno
    import os
    import struct
    import sys

    def fail(why):
        sys.stderr.write(f"ptc-docker: cannot confine the interpreter: {why}\n")
        sys.stderr.flush()
        os._exit(70)

    try:
        import ctypes
        import resource
    except ImportError as e:
        fail(f"the image's Python lacks a standard module: {e}")

    for name in list(os.environ):
        if name not in ("HOME", "TMPDIR", "LOGNAME", "USER"):
            del os.environ[name]

    user_database(os.environ.get("USER", "ptc"), os.environ.get("HOME", "/"))

    for name, value in limits.items():
        try:
            which = getattr(resource, "RLIMIT_" + name)
            # Only ever lowered: a runtime's own limit at or below ours stays as it is (gVisor's
            # RLIMIT_SIGPENDING is 0, and it refuses to set that one at all).
            hard = resource.getrlimit(which)[1]
            if hard != resource.RLIM_INFINITY and hard <= value:
                continue
            resource.setrlimit(which, (value, value))
        except (AttributeError, ValueError, OSError) as e:
            fail(f"rlimit {name}: {e}")

    try:
        program = seccomp_program(os.uname().machine, os.getpid())
    except KeyError as e:
        fail(f"no seccomp rules for the {e} architecture")
    arch = ARCHES[os.uname().machine]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as e:
        fail(f"no C library through ctypes: {e}")
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    PR_SET_NO_NEW_PRIVS = 38
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        fail(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = b"".join(struct.pack("=HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    result = libc.syscall(ctypes.c_long(arch["seccomp"]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                          ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if result != 0:
        code = ctypes.get_errno()
        fail(f"seccomp(SECCOMP_SET_MODE_FILTER): {errno.errorcode.get(code, code)} {os.strerror(code)}")


def user_database(name, home):
    """/etc/passwd and /etc/group entries for this process's user where /etc is the container's own tmpfs: empty
    but for the files Docker adds. Any other /etc (the image's, or a host's) is left alone."""
    import os
    try:
        if set(os.listdir("/etc")) - {"hostname", "hosts", "resolv.conf"}:
            return
    except OSError:
        return
    uid, gid = os.getuid(), os.getgid()
    entries = {"/etc/passwd": f"{name}:x:{uid}:{gid}:ptc-mcp sandbox:{home}:/nonexistent\n",
               "/etc/group": f"{name}:x:{gid}:\n"}
    for path, entry in entries.items():
        try:
            with open(path, "x") as f:
                f.write(entry)
        except OSError:
            pass


# Per architecture: the audit arch value, the x32 bit (x86_64 only) and syscall numbers.
ARCHES = {
    "x86_64": {
        "audit": 0xC000003E, "x32_bit": 0x40000000, "seccomp": 317,
        "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "execveat": 322,
        "clone3": 435, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "keyctl": 250,
        "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "pidfd_send_signal": 424, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "name_to_handle_at": 303,
        "open_by_handle_at": 304, "reboot": 169, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "swapon": 167, "swapoff": 168,
        "acct": 163, "quotactl": 179, "syslog": 103, "vhangup": 153, "tkill": 200, "kill": 62, "tgkill": 234,
        "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "prlimit64": 302, "setpriority": 141,
        "sched_setaffinity": 203, "sched_setparam": 142, "sched_setscheduler": 144, "sched_setattr": 314,
        "pidfd_open": 434, "move_pages": 279, "migrate_pages": 256, "ioprio_set": 251,
        "connect": 42, "bind": 49, "sendto": 44, "sendmsg": 46, "sendmmsg": 307, "setsid": 112, "setpgid": 109,
        "open_tree_attr": 467, "statmount": 457, "listmount": 458, "quotactl_fd": 443, "uselib": 134,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
        "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
        "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
        "memfd_create": 319, "memfd_secret": 447, "inotify_init": 253, "inotify_init1": 294,
        "inotify_add_watch": 254, "inotify_rm_watch": 255, "fanotify_init": 300, "fanotify_mark": 301,
    },
    "aarch64": {
        "audit": 0xC00000B7, "x32_bit": None, "seccomp": 277,
        "socket": 198, "socketpair": 199, "clone": 220, "fork": None, "vfork": None, "execve": 221,
        "execveat": 281, "clone3": 435, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
        "userfaultfd": 282, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "pidfd_getfd": 438, "pidfd_send_signal": 424, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "name_to_handle_at": 264,
        "open_by_handle_at": 265, "reboot": 142, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "swapon": 224, "swapoff": 225,
        "acct": 89, "quotactl": 60, "syslog": 116, "vhangup": 58, "tkill": 130, "kill": 129, "tgkill": 131,
        "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "prlimit64": 261, "setpriority": 140,
        "sched_setaffinity": 122, "sched_setparam": 118, "sched_setscheduler": 119, "sched_setattr": 274,
        "pidfd_open": 434, "move_pages": 239, "migrate_pages": 238, "ioprio_set": 30,
        "connect": 203, "bind": 200, "sendto": 206, "sendmsg": 211, "sendmmsg": 269, "setsid": 157,
        "setpgid": 154, "open_tree_attr": 467, "statmount": 457, "listmount": 458, "quotactl_fd": 443,
        "uselib": None, "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193,
        "semctl": 191, "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187,
        "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182, "mq_timedreceive": 183, "mq_notify": 184,
        "mq_getsetattr": 185, "memfd_create": 279, "memfd_secret": 447, "inotify_init": None,
        "inotify_init1": 26, "inotify_add_watch": 27, "inotify_rm_watch": 28, "fanotify_init": 262,
        "fanotify_mark": 263,
    },
}
ARCHES["arm64"] = ARCHES["aarch64"]

# Denied with EPERM whatever the arguments.
ALWAYS = [
    "socket", "connect", "bind", "sendmsg", "sendmmsg", "fork", "vfork", "execve", "execveat", "setsid",
    "setpgid", "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "bpf",
    "perf_event_open", "userfaultfd", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "pidfd_send_signal", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "statmount",
    "listmount", "name_to_handle_at", "open_by_handle_at", "reboot", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    "syslog", "vhangup", "tkill", "uselib",
    "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv",
    "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
    "memfd_create", "memfd_secret",
    "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "fanotify_init", "fanotify_mark",
]
AF_UNIX = 1
CLONE_THREAD = 0x10000
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1


def unless_arg_in(pid):
    """Denied with EPERM unless (the low 32 bits of) each listed argument is one of its values:
    name -> [(arg, values), ...]. The kernel reads these arguments as 32-bit ints, so the low word decides."""
    return {
        "socketpair": [(0, [AF_UNIX])],
        "sendto": [(4, [0])],  # no address: send() on a connected socketpair
        "kill": [(0, [pid, 0])],
        "tgkill": [(0, [pid])],
        "rt_sigqueueinfo": [(0, [pid])],
        "rt_tgsigqueueinfo": [(0, [pid])],
        "prlimit64": [(0, [pid, 0])],
        "setpriority": [(0, [PRIO_PROCESS]), (1, [pid, 0])],
        "sched_setaffinity": [(0, [pid, 0])],
        "sched_setparam": [(0, [pid, 0])],
        "sched_setscheduler": [(0, [pid, 0])],
        "sched_setattr": [(0, [pid, 0])],
        "pidfd_open": [(0, [pid])],
        "move_pages": [(0, [pid, 0])],
        "migrate_pages": [(0, [pid, 0])],
        "ioprio_set": [(0, [IOPRIO_WHO_PROCESS]), (1, [pid, 0])],
    }


# Classic BPF opcodes and seccomp return values.
LD_W_ABS, JEQ_K, JSET_K, RET_K = 0x20, 0x15, 0x45, 0x06
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
NR, ARCH = 0, 4  # offsets in struct seccomp_data


def arg_low(index):
    """Offset of the low 32 bits of argument `index` (little-endian architectures)."""
    return 16 + 8 * index


def deny_list(machine, pid):
    """The policy as syscall numbers: those always denied, and those denied unless each argument `arg` is one
    of its `values` ({number: [[arg, values], ...]}). The landlock backend's Rust rules are tested against this."""
    arch = ARCHES[machine]
    always = sorted(arch[name] for name in ALWAYS if arch[name] is not None)
    conditional = {arch[name]: [[index, values] for index, values in clauses]
                   for name, clauses in unless_arg_in(pid).items()}
    return {"always": always, "conditional": conditional}


def seccomp_program(machine, pid):
    """The filter as (code, jt, jf, k) tuples: a linear chain, each syscall tested once."""
    arch = ARCHES[machine]
    program = [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ_K, 1, 0, arch["audit"]),
        (RET_K, 0, 0, RET_KILL_PROCESS),
        (LD_W_ABS, 0, 0, NR),
    ]
    if arch["x32_bit"]:
        program += [(JSET_K, 0, 1, arch["x32_bit"]), (RET_K, 0, 0, RET_KILL_PROCESS)]
    for name in ALWAYS:
        if arch[name] is not None:
            program += [(JEQ_K, 0, 1, arch[name]), (RET_K, 0, 0, RET_ERRNO | EPERM)]
    program += [(JEQ_K, 0, 1, arch["clone3"]), (RET_K, 0, 0, RET_ERRNO | ENOSYS)]
    # clone: a new thread (CLONE_THREAD set) is allowed, a new process is not.
    program += [
        (JEQ_K, 0, 4, arch["clone"]),
        (LD_W_ABS, 0, 0, arg_low(0)),
        (JSET_K, 1, 0, CLONE_THREAD),
        (RET_K, 0, 0, RET_ERRNO | EPERM),
        (RET_K, 0, 0, RET_ALLOW),
    ]
    for name, clauses in unless_arg_in(pid).items():
        # Per clause: load the argument; a match jumps over the denial to the next clause (or the final allow).
        block = []
        for index, values in clauses:
            block += [(LD_W_ABS, 0, 0, arg_low(index))]
            block += [(JEQ_K, len(values) - i, 0, value) for i, value in enumerate(values)]
            block += [(RET_K, 0, 0, RET_ERRNO | EPERM)]
        block += [(RET_K, 0, 0, RET_ALLOW)]
        program += [(JEQ_K, 0, len(block), arch[name])] + block
    program.append((RET_K, 0, 0, RET_ALLOW))
    return program
