//! The seccomp-bpf layer of the landlock backend: small named rule sets composed into filters. Plain code
//! (compiled and unit-tested everywhere); only installing a filter needs Linux.
//!
//! Denied with EPERM: sockets of any family (socketpair only for AF_UNIX, which asyncio needs), new
//! processes (fork, vfork, clone without CLONE_THREAD), exec after the interpreter started, io_uring,
//! keys, bpf, perf, userfaultfd, ptrace and cross-process memory access, namespaces and mounts, kernel
//! and system administration, and signals/rlimits/priorities/pidfds aimed at any process but itself.
//! `clone3` fails with ENOSYS so the C library falls back to `clone`, whose flags can be checked. Other
//! architectures' syscall entry points (x86's `int 0x80`, x32) kill the process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// A syscall and the conditions under which it is denied (empty: always).
struct Deny {
    syscall: i64,
    when: Vec<Vec<(u8, SeccompCmpOp, u64)>>,
}

fn always(syscall: i64) -> Deny {
    Deny { syscall, when: vec![] }
}

/// Denied unless argument `arg` is one of `allowed`.
fn unless_arg_in(syscall: i64, arg: u8, allowed: &[u64]) -> Deny {
    Deny { syscall, when: vec![allowed.iter().map(|&v| (arg, SeccompCmpOp::Ne, v)).collect()] }
}

/// Sockets: none at all, except connected AF_UNIX pairs (asyncio's self-pipe), which reach nothing.
fn network() -> Vec<Deny> {
    vec![always(libc::SYS_socket), unless_arg_in(libc::SYS_socketpair, 0, &[libc::AF_UNIX as u64])]
}

/// New processes and programs: threads only, and no exec once the interpreter runs. `exec_path` is the
/// address of the interpreter's path in the helper, the one execve allowed: after that exec the address
/// means nothing the program could know or reproduce.
fn processes(exec_path: u64) -> Vec<Deny> {
    let mut rules = vec![
        Deny { syscall: libc::SYS_clone, when: vec![vec![(0, SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64), 0)]] },
        unless_arg_in(libc::SYS_execve, 0, &[exec_path]),
        always(libc::SYS_execveat),
    ];
    #[cfg(target_arch = "x86_64")]
    rules.extend([always(libc::SYS_fork), always(libc::SYS_vfork)]);
    rules
}

/// Kernel interfaces a program has no use for and that widen the attack surface.
fn danger_zone() -> Vec<Deny> {
    [
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
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
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
        libc::SYS_syslog,
        libc::SYS_vhangup,
        libc::SYS_tkill,
    ]
    .into_iter()
    .map(always)
    .collect()
}

/// Calls aimed at a process: allowed only at itself (`0` means the caller for most of them).
fn only_at_itself(pid: u64) -> Vec<Deny> {
    vec![
        unless_arg_in(libc::SYS_kill, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_tgkill, 0, &[pid]),
        unless_arg_in(libc::SYS_rt_sigqueueinfo, 0, &[pid]),
        unless_arg_in(libc::SYS_rt_tgsigqueueinfo, 0, &[pid]),
        unless_arg_in(libc::SYS_prlimit64, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_setpriority, 1, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setaffinity, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setparam, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setscheduler, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_sched_setattr, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_pidfd_open, 0, &[pid]),
        unless_arg_in(libc::SYS_move_pages, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_migrate_pages, 0, &[pid, 0]),
        unless_arg_in(libc::SYS_ioprio_set, 1, &[pid, 0]),
    ]
}

#[derive(Debug, thiserror::Error)]
#[error("seccomp filter: {0}")]
pub struct FilterError(#[from] seccompiler::BackendError);

fn target_arch() -> TargetArch {
    if cfg!(target_arch = "aarch64") { TargetArch::aarch64 } else { TargetArch::x86_64 }
}

fn compile(denies: Vec<Deny>, action: SeccompAction) -> Result<BpfProgram, FilterError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for deny in denies {
        let entry = rules.entry(deny.syscall).or_default();
        for conditions in deny.when {
            let conditions = conditions
                .into_iter()
                .map(|(arg, op, value)| SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value))
                .collect::<Result<Vec<_>, _>>()?;
            entry.push(SeccompRule::new(conditions)?);
        }
    }
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, target_arch())?;
    Ok(filter.try_into()?)
}

/// The filters to install, in order: the deny list (EPERM) and `clone3` → ENOSYS. (Both begin with
/// seccompiler's architecture check, which kills a process calling through another ABI's entry point.)
pub fn filters(pid: u32, exec_path: u64) -> Result<Vec<BpfProgram>, FilterError> {
    let mut denies = network();
    denies.extend(processes(exec_path));
    denies.extend(danger_zone());
    denies.extend(only_at_itself(u64::from(pid)));
    let eperm = compile(denies, SeccompAction::Errno(libc::EPERM as u32))?;
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

    #[test]
    fn the_filters_compile() {
        let filters = filters(4242, 0x7fff_dead_beef).unwrap();
        assert_eq!(filters.len(), 3);
        assert!(filters.iter().all(|f| f.len() < 4096), "BPF programs are limited to 4096 instructions");
        assert!(filters[0].len() > 50);
    }

    /// The docker backend confines its interpreter from inside the container with its own copy of this
    /// policy (`docker/confine.py`, which must work on any host); this keeps the two from drifting apart.
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
        let rules = network().into_iter().chain(processes(0)).chain(danger_zone()).chain(only_at_itself(4242));
        for deny in rules {
            match deny.when.as_slice() {
                [] => {
                    always.insert(deny.syscall);
                }
                [conditions] if conditions.iter().all(|(_, op, _)| *op == SeccompCmpOp::Ne) => {
                    let values: Vec<u64> = conditions.iter().map(|(_, _, v)| *v).collect();
                    conditional.insert(deny.syscall.to_string(), serde_json::json!([conditions[0].0, values]));
                }
                _ => {} // clone's flag test: both filters allow threads and deny processes
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
        let mut all: Vec<i64> = network()
            .into_iter()
            .chain(processes(1))
            .chain(danger_zone())
            .chain(only_at_itself(1))
            .map(|d| d.syscall)
            .collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "a syscall appears in two rule sets");
    }
}
