//! Ending with the server. On Linux a child asks for SIGKILL when the thread that started it ends
//! (`PR_SET_PDEATHSIG`, set between fork and exec; runners start on a thread that lives as long as the server).
//! Other systems have no such signal, and a runner's own watch of its channel is only Python, which a program
//! can rebind: there a reaper process (see [`super::reaper`]) holds the list of live groups and kills them
//! when the server's end of its pipe closes, however the server ended.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use super::reaper::{FORGET, REAPER_SUBCOMMAND, WATCH};

/// In a child between fork and exec: on Linux, die with the server (async-signal-safe: one prctl).
pub fn die_with_server() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The `ptc-mcp` binary to start the reaper from (the reaper is one of its hidden subcommands), once it is
/// known; without it, systems without a parent-death signal keep runners only as long as their channel.
static HELPER: OnceLock<PathBuf> = OnceLock::new();
/// The reaper, started on first use: `None` if it could not be started (said once, in the log).
static REAPER: OnceLock<Option<Reaper>> = OnceLock::new();

/// Makes groups registered with [`DeathWatch::of`] die with this process, on systems without a
/// parent-death signal, through a reaper started from `helper` (this binary) when the first one registers.
pub fn use_reaper(helper: PathBuf) {
    let _ = HELPER.set(helper);
}

struct Reaper {
    to_reaper: Mutex<ChildStdin>,
    /// Never waited for: it outlives the server by design, and ends once it has done its work.
    _process: Child,
}

impl Reaper {
    fn start() -> Option<Reaper> {
        let helper = HELPER.get()?;
        tracing::debug!("starting the reaper that ends runners with the server");
        let mut command = Command::new(helper);
        command.arg(REAPER_SUBCOMMAND).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::inherit());
        // Its own group: a Ctrl-C at the terminal reaches the server's group, and the reaper must outlive it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        match command.spawn() {
            Ok(mut process) => {
                let to_reaper = process.stdin.take()?;
                Some(Reaper { to_reaper: Mutex::new(to_reaper), _process: process })
            }
            Err(e) => {
                tracing::warn!(
                    "cannot start the reaper that ends runners with the server ({e}): a runner of a server that is \
                     killed lives on until it reads the end of its channel"
                );
                None
            }
        }
    }

    fn tell(&self, verb: u8, pgid: libc::pid_t) {
        let mut to_reaper = self.to_reaper.lock().unwrap_or_else(|e| e.into_inner());
        // One write of a few bytes to a pipe: atomic, and never held up by a reader that keeps up.
        let _ = to_reaper.write_all(format!("{}{pgid}\n", verb as char).as_bytes());
    }
}

/// A process group that dies with the server: registered with the reaper while this value lives. Drop it
/// after the group is killed and before its leader is reaped (the group's id is free for reuse after that).
pub struct DeathWatch {
    pgid: Option<libc::pid_t>,
}

impl DeathWatch {
    /// Watches group `pgid` where the system has no parent-death signal (nothing to do on Linux).
    pub fn of(pgid: libc::pid_t) -> DeathWatch {
        // Not before the server has said where its binary is (nothing to start the reaper from).
        let needed = !cfg!(target_os = "linux") && HELPER.get().is_some();
        let reaper = if needed { REAPER.get_or_init(Reaper::start).as_ref() } else { None };
        match reaper {
            Some(reaper) => {
                reaper.tell(WATCH, pgid);
                DeathWatch { pgid: Some(pgid) }
            }
            None => DeathWatch { pgid: None },
        }
    }
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        if let (Some(pgid), Some(Some(reaper))) = (self.pgid, REAPER.get()) {
            reaper.tell(FORGET, pgid);
        }
    }
}
