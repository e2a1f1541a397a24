//! Waiting for a child process to exit without reaping it, so that its group can be killed first and the
//! leader reaped after.

use std::time::Duration;

/// How often the portable fallback looks for the exit.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Tells when one child process has exited, leaving it to be reaped by its owner.
pub enum ExitWatch {
    /// A pidfd (Linux 5.3+): readable once the process has exited.
    #[cfg(target_os = "linux")]
    Pidfd { pid: libc::pid_t, fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd> },
    /// Elsewhere (or where pidfds are unavailable): `waitid` with `WNOWAIT`, polled.
    Poll(libc::pid_t),
}

impl ExitWatch {
    /// Watches `pid`, a child of this process that has not been reaped.
    pub fn new(pid: libc::pid_t) -> ExitWatch {
        #[cfg(target_os = "linux")]
        if let Some(fd) = pidfd(pid) {
            return ExitWatch::Pidfd { pid, fd };
        }
        ExitWatch::Poll(pid)
    }

    /// Resolves once the process has exited; it stays unreaped (a zombie) until its owner waits for it.
    pub async fn exited(&self) {
        match self {
            #[cfg(target_os = "linux")]
            ExitWatch::Pidfd { pid, fd } => {
                // An error means the fd is unusable, never that the process still runs: poll instead.
                if fd.readable().await.is_err() {
                    poll_exit(*pid).await;
                }
            }
            ExitWatch::Poll(pid) => poll_exit(*pid).await,
        }
    }
}

#[cfg(target_os = "linux")]
fn pidfd(pid: libc::pid_t) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just opened for us and is owned by nothing else.
    let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: an `OwnedFd` stays open and refers to the same pidfd until it is dropped with the `AsyncFd`.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) }.ok()
}

async fn poll_exit(pid: libc::pid_t) {
    while !has_exited(pid) {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Whether child `pid` has exited, without reaping it. An error (no such child) counts as exited.
pub fn has_exited(pid: libc::pid_t) -> bool {
    // SAFETY: an all-zero siginfo_t is a valid value; waitid fills it in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall writing into `info`.
    let result = unsafe {
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
    };
    // With WNOHANG and nothing to report, the kernel leaves si_signo 0; an exited child gives SIGCHLD.
    result != 0 || info.si_signo == libc::SIGCHLD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_exit_is_seen_and_the_child_is_left_for_its_owner_to_reap() {
        let mut child = tokio::process::Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let pid = child.id().unwrap() as libc::pid_t;
        for watch in [ExitWatch::new(pid), ExitWatch::Poll(pid)] {
            tokio::time::timeout(Duration::from_secs(10), watch.exited()).await.unwrap();
        }
        assert_eq!(child.wait().await.unwrap().code(), Some(3), "still there to be reaped");
    }

    #[tokio::test]
    async fn a_running_child_is_not_reported_as_exited() {
        let mut child = tokio::process::Command::new("sleep").arg("30").kill_on_drop(true).spawn().unwrap();
        let watch = ExitWatch::new(child.id().unwrap() as libc::pid_t);
        assert!(tokio::time::timeout(Duration::from_millis(200), watch.exited()).await.is_err());
        child.kill().await.unwrap();
    }
}
