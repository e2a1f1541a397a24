//! The life of a child process group, for runners and downstream servers alike: knowing when the leader
//! has exited without reaping it (only then can its group be killed safely: once the leader is reaped and the
//! group is empty, its id may name an unrelated group), killing the group, and ending with the server even
//! when the server is killed without a chance to clean up.

mod exit_watch;
mod parent_death;
pub mod reaper;

pub use exit_watch::{ExitWatch, has_exited};
pub use parent_death::{DeathWatch, die_with_server, use_reaper};

/// Sends `signal` to every process of group `pgid`. A group that no longer exists is not an error.
pub fn signal_group(pgid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: plain syscall; a group that is gone yields ESRCH, which is fine.
    unsafe { libc::kill(-pgid, signal) };
}
