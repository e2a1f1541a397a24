//! The seccomp-bpf layer of the landlock backend: small named rule sets composed into filters. Plain code
//! (compiled and unit-tested everywhere); only installing a filter needs Linux.
//!
//! Denied with EPERM: sockets of any family (socketpair only for AF_UNIX, which asyncio needs) and every
//! socket call that takes an address (connect, bind, sendto with one, sendmsg/sendmmsg, whose address the
//! filter cannot see); new processes (fork, vfork, clone without CLONE_THREAD, leaving the process group or
//! session), exec after the interpreter started; io_uring, keys, bpf, perf, userfaultfd, ptrace and
//! cross-process memory access, namespaces, mounts and the mount table; SysV IPC, POSIX message queues and
//! memfds and shared anonymous mappings (memory outside the limits); inotify and fanotify (per-user quotas shared with the host); kernel and
//! system administration; and signals, rlimits, priorities, scheduling and pidfds aimed at any process but
//! itself. Without namespaces (degraded mode), where every host file is on a writable mount, metadata changes
//! (modes, owners, times, extended attributes) are denied everywhere too. `clone3` fails with ENOSYS so the
//! C library falls back to `clone`, whose flags can be checked. Other architectures' syscall entry points
//! (x86's `int 0x80`, x32) kill the process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// A syscall and when it is denied.
struct Deny {
    syscall: i64,
    when: When,
}

enum When {
    Always,
    /// Unless every listed argument is one of its allowed values.
    Unless(Vec<(u8, Vec<u64>)>),
    /// When argument `arg` masked with `mask` equals `value`.
    Masked {
        arg: u8,
        mask: u64,
        value: u64,
    },
}

fn always(syscall: i64) -> Deny {
    Deny { syscall, when: When::Always }
}

/// Denied unless argument `arg` is one of `allowed`.
fn unless_arg_in(syscall: i64, arg: u8, allowed: &[u64]) -> Deny {
    unless_args_in(syscall, &[(arg, allowed)])
}

/// Denied unless each argument is one of its allowed values.
fn unless_args_in(syscall: i64, clauses: &[(u8, &[u64])]) -> Deny {
    Deny { syscall, when: When::Unless(clauses.iter().map(|&(arg, allowed)| (arg, allowed.to_vec())).collect()) }
}

/// Syscalls numbered after the `libc` crate's tables (the same number on every architecture since Linux 5.1).
mod newer {
    pub const STATMOUNT: i64 = 457;
    pub const LISTMOUNT: i64 = 458;
    pub const SETXATTRAT: i64 = 463;
    pub const REMOVEXATTRAT: i64 = 466;
    pub const OPEN_TREE_ATTR: i64 = 467;
    pub const FILE_SETATTR: i64 = 469;
}

/// Sockets: none at all, except connected AF_UNIX pairs (asyncio's self-pipe), which reach nothing as long as
/// no call can name another socket: connect, bind, sendto with an address and sendmsg/sendmmsg (their
/// address is behind a pointer the filter cannot follow) are denied. `send` is `sendto` without an address.
fn network() -> Vec<Deny> {
    vec![
        always(libc::SYS_socket),
        unless_arg_in(libc::SYS_socketpair, 0, &[libc::AF_UNIX as u64]),
        always(libc::SYS_connect),
        always(libc::SYS_bind),
        unless_arg_in(libc::SYS_sendto, 4, &[0]),
        always(libc::SYS_sendmsg),
        always(libc::SYS_sendmmsg),
    ]
}

/// New processes and programs: threads only, no leaving the process group or session (whose kill ends the
/// run), and no exec once the interpreter runs. `exec_path` is the address of the interpreter's path in the
/// helper, the one execve allowed: after that exec the address means nothing the program could know or
/// reproduce.
fn processes(exec_path: u64) -> Vec<Deny> {
    let mut rules = vec![
        Deny { syscall: libc::SYS_clone, when: When::Masked { arg: 0, mask: libc::CLONE_THREAD as u64, value: 0 } },
        unless_arg_in(libc::SYS_execve, 0, &[exec_path]),
        always(libc::SYS_execveat),
        always(libc::SYS_setsid),
        always(libc::SYS_setpgid),
    ];
    #[cfg(target_arch = "x86_64")]
    rules.extend([always(libc::SYS_fork), always(libc::SYS_vfork)]);
    rules
}

/// Kernel interfaces a program has no use for and that widen the attack surface.
fn danger_zone() -> Vec<Deny> {
    let mut syscalls = vec![
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_kcmp,
        libc::SYS_pidfd_getfd,
        libc::SYS_pidfd_send_signal,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        newer::OPEN_TREE_ATTR,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        newer::STATMOUNT,
        newer::LISTMOUNT,
        libc::SYS_name_to_handle_at,
        libc::SYS_open_by_handle_at,
        libc::SYS_reboot,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_quotactl_fd,
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_tkill,
    ];
    #[cfg(target_arch = "x86_64")]
    syscalls.push(libc::SYS_uselib);
    syscalls.into_iter().map(always).collect()
}

/// Memory a program could hold outside its limits, and that without an IPC namespace is the host's: SysV
/// shared memory, semaphores and message queues, POSIX message queues, memfds, and shared anonymous mappings
/// (RLIMIT_DATA counts only private ones; `/dev/zero`, the other way to get them, is read-only here).
fn shared_memory() -> Vec<Deny> {
    const SHARED_ANONYMOUS: u64 = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u64;
    let mmap = Deny {
        syscall: libc::SYS_mmap,
        when: When::Masked { arg: 3, mask: SHARED_ANONYMOUS, value: SHARED_ANONYMOUS },
    };
    let mut rules: Vec<Deny> = [
        libc::SYS_shmget,
        libc::SYS_shmat,
        libc::SYS_shmctl,
        libc::SYS_shmdt,
        libc::SYS_semget,
        libc::SYS_semop,
        libc::SYS_semctl,
        libc::SYS_semtimedop,
        libc::SYS_msgget,
        libc::SYS_msgsnd,
        libc::SYS_msgrcv,
        libc::SYS_msgctl,
        libc::SYS_mq_open,
        libc::SYS_mq_unlink,
        libc::SYS_mq_timedsend,
        libc::SYS_mq_timedreceive,
        libc::SYS_mq_notify,
        libc::SYS_mq_getsetattr,
        libc::SYS_memfd_create,
        libc::SYS_memfd_secret,
    ]
    .into_iter()
    .map(always)
    .collect();
    rules.push(mmap);
    rules
}

/// File-system watches: their instances and watches count against per-user quotas shared with the host's
/// processes of the same user (also across user namespaces), so a program could exhaust them.
fn watches() -> Vec<Deny> {
    let mut syscalls = vec![
        libc::SYS_inotify_init1,
        libc::SYS_inotify_add_watch,
        libc::SYS_inotify_rm_watch,
        libc::SYS_fanotify_init,
        libc::SYS_fanotify_mark,
    ];
    #[cfg(target_arch = "x86_64")]
    syscalls.push(libc::SYS_inotify_init);
    syscalls.into_iter().map(always).collect()
}

/// Calls aimed at a process: allowed only at itself (`0` means the caller for most of them). Priorities name
/// their target kind too: only a process (not a process group or a user's every process).
fn only_at_itself(pid: u64) -> Vec<Deny> {
    const PRIO_PROCESS: u64 = 0;
    const IOPRIO_WHO_PROCESS: u64 = 1;
    vec![
        unless_arg_in(libc::SYS_kill, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_tgkill, 0, &[pid]),
        unless_arg_in(libc::SYS_rt_sigqueueinfo, 0, &[pid]),
        unless_arg_in(libc::SYS_rt_tgsigqueueinfo, 0, &[pid]),
        unless_arg_in(libc::SYS_prlimit64, 0, &[pid, 0]),
        unless_args_in(libc::SYS_setpriority, &[(0, &[PRIO_PROCESS]), (1, &[pid, 0])]),
        unless_arg_in(libc::SYS_sched_setaffinity, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setparam, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setscheduler, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setattr, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_pidfd_open, 0, &[pid]),
        unless_arg_in(libc::SYS_move_pages, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_migrate_pages, 0, &[pid, 0]),
        unless_args_in(libc::SYS_ioprio_set, &[(0, &[IOPRIO_WHO_PROCESS]), (1, &[pid, 0])]),
    ]
}

/// Changes of modes, owners, times and extended attributes, by path and by fd. Landlock does not cover them;
/// with namespaces every path outside scratch is on a read-only mount, which refuses them. Without (degraded
/// mode) the host's files are on their own writable mounts, so they are denied everywhere, scratch included.
fn metadata() -> Vec<Deny> {
    let mut syscalls = vec![
        libc::SYS_fchmod,
        libc::SYS_fchmodat,
        libc::SYS_fchmodat2,
        libc::SYS_fchown,
        libc::SYS_fchownat,
        libc::SYS_utimensat,
        libc::SYS_setxattr,
        libc::SYS_lsetxattr,
        libc::SYS_fsetxattr,
        libc::SYS_removexattr,
        libc::SYS_lremovexattr,
        libc::SYS_fremovexattr,
        newer::SETXATTRAT,
        newer::REMOVEXATTRAT,
        newer::FILE_SETATTR,
    ];
    #[cfg(target_arch = "x86_64")]
    syscalls.extend([
        libc::SYS_chmod,
        libc::SYS_chown,
        libc::SYS_lchown,
        libc::SYS_utime,
        libc::SYS_utimes,
        libc::SYS_futimesat,
    ]);
    syscalls.into_iter().map(always).collect()
}

/// What the filter is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The process the program runs as, as it sees itself (1 in its own pid namespace).
    pub pid: u32,
    /// The address of the interpreter's path, the one exec allowed.
    pub exec_path: u64,
    /// Every host path is on a writable mount (no namespaces): metadata changes are denied everywhere.
    pub deny_metadata: bool,
}

/// Every rule for `target`, by rule set.
fn rules(target: Target) -> Vec<Deny> {
    let mut denies = network();
    denies.extend(processes(target.exec_path));
    denies.extend(danger_zone());
    denies.extend(shared_memory());
    denies.extend(watches());
    denies.extend(only_at_itself(u64::from(target.pid)));
    if target.deny_metadata {
        denies.extend(metadata());
    }
    denies
}

#[derive(Debug, thiserror::Error)]
#[error("seccomp filter: {0}")]
pub struct FilterError(#[from] seccompiler::BackendError);

fn target_arch() -> TargetArch {
    if cfg!(target_arch = "aarch64") { TargetArch::aarch64 } else { TargetArch::x86_64 }
}

fn compile(denies: Vec<Deny>, action: SeccompAction) -> Result<BpfProgram, FilterError> {
    let condition =
        |arg: u8, op: SeccompCmpOp, value: u64| SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for deny in denies {
        let entry = rules.entry(deny.syscall).or_default();
        match deny.when {
            When::Always => {}
            // Denied when any clause fails: one rule per clause, matching when the argument is none of its values.
            When::Unless(clauses) => {
                for (arg, allowed) in clauses {
                    let conditions = allowed
                        .into_iter()
                        .map(|value| condition(arg, SeccompCmpOp::Ne, value))
                        .collect::<Result<Vec<_>, _>>()?;
                    entry.push(SeccompRule::new(conditions)?);
                }
            }
            When::Masked { arg, mask, value } => {
                entry.push(SeccompRule::new(vec![condition(arg, SeccompCmpOp::MaskedEq(mask), value)?])?)
            }
        }
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, target_arch())?;
    Ok(filter.try_into()?)
}

/// The filters to install, in order: the deny list (EPERM) and `clone3` → ENOSYS. (Both begin with
/// seccompiler's architecture check, which kills a process calling through another ABI's entry point.)
pub fn filters(target: Target) -> Result<Vec<BpfProgram>, FilterError> {
    let eperm = compile(rules(target), SeccompAction::Errno(libc::EPERM as u32))?;
    let enosys = compile(vec![always(libc::SYS_clone3)], SeccompAction::Errno(libc::ENOSYS as u32))?;
    Ok(vec![eperm, enosys, x32_guard()])
}

/// Kills a process that uses the x32 syscall ABI (syscall numbers with bit 30 set), which the per-number
/// rules above would not match. Empty where there is no such ABI.
fn x32_guard() -> BpfProgram {
    use seccompiler::sock_filter;
    if !cfg!(target_arch = "x86_64") {
        return Vec::new();
    }
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code: u32, k: u32| sock_filter { code: code as u16, jt: 0, jf: 0, k };
    vec![
        // A = seccomp_data.nr
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        // if (A & X32_SYSCALL_BIT) kill, else allow
        sock_filter { code: (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16, jt: 0, jf: 1, k: X32_SYSCALL_BIT },
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_KILL_PROCESS),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: Target = Target { pid: 4242, exec_path: 0x7fff_dead_beef, deny_metadata: false };

    #[test]
    fn the_filters_compile() {
        for deny_metadata in [false, true] {
            let filters = filters(Target { deny_metadata, ..TARGET }).unwrap();
            assert_eq!(filters.len(), 3);
            assert!(filters.iter().all(|f| f.len() < 4096), "BPF programs are limited to 4096 instructions");
            assert!(filters[0].len() > 50);
        }
    }

    /// The docker backend confines its interpreter from inside the container with its own copy of this
    /// policy (`docker/confine.py`, which must work on any host); this keeps the two from drifting apart.
    /// A container shows no host file, so the metadata rules of degraded mode are not part of it.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_docker_prologue_denies_exactly_the_same_syscalls() {
        use std::collections::{BTreeMap, BTreeSet};
        let source = include_str!("../docker/confine.py");
        let script = format!("{source}\nimport json\nprint(json.dumps(deny_list('x86_64', 4242)))");
        let output = std::process::Command::new("python3").args(["-I", "-S", "-c", &script]).output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let python: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();

        let mut always = BTreeSet::new();
        let mut conditional = BTreeMap::new();
        for deny in rules(Target { pid: 4242, exec_path: 0, deny_metadata: false }) {
            match deny.when {
                When::Always => {
                    always.insert(deny.syscall);
                }
                When::Unless(clauses) => {
                    conditional.insert(deny.syscall.to_string(), serde_json::json!(clauses));
                }
                // clone's flag test (both filters allow threads and deny processes), and shared anonymous
                // mappings, which only the landlock backend denies: a container's cgroup counts them.
                When::Masked { .. } => {}
            }
        }
        // In a container the interpreter is already running: exec is denied outright there.
        let exec = conditional.remove(&libc::SYS_execve.to_string());
        assert!(exec.is_some());
        always.insert(libc::SYS_execve);
        let python_always: BTreeSet<i64> = serde_json::from_value(python["always"].clone()).unwrap();
        assert_eq!(always, python_always);
        assert_eq!(serde_json::Value::Object(conditional.into_iter().collect()), python["conditional"]);
    }

    #[test]
    fn every_rule_set_names_distinct_syscalls() {
        let mut all: Vec<i64> = rules(Target { deny_metadata: true, ..TARGET }).iter().map(|d| d.syscall).collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "a syscall appears in two rule sets");
    }

    #[test]
    fn metadata_changes_are_denied_only_without_namespaces() {
        let denied =
            |deny_metadata| rules(Target { deny_metadata, ..TARGET }).iter().any(|d| d.syscall == libc::SYS_fchmodat);
        assert!(denied(true) && !denied(false));
    }
}
