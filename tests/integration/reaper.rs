//! The reaper (`ptc-mcp __reaper`), which ends runners with the server on systems without a parent-death
//! signal (macOS): it kills the groups still listed when the server's end of its pipe closes, and nothing
//! else. Run here on Linux, where the server itself does not need it.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// A `sleep` leading a process group of its own.
fn group_leader() -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new("sleep").arg("60").process_group(0).spawn().unwrap()
}

/// The mask of signals process `pid` ignores (`SigIgn` in its status).
fn ignored_signals(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:")).unwrap_or("0").trim();
    u64::from_str_radix(mask, 16).unwrap_or(0)
}

#[apply(integration_test!)]
async fn the_reaper_kills_the_groups_still_listed_when_the_server_goes_and_outlives_terminal_signals() {
    let mut watched = group_leader();
    let mut forgotten = group_leader();
    let mut reaper =
        Command::new(binary()).arg("__reaper").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let mut to_reaper = reaper.stdin.take().unwrap();
    write!(to_reaper, "+{}\n+{}\n-{}\n", watched.id(), forgotten.id(), forgotten.id()).unwrap();
    to_reaper.flush().unwrap();
    // A Ctrl-C or a hang-up at the terminal reaches the server's group; the reaper must outlive the server.
    // (Once it has started: it ignores them from its first instructions on.)
    let ignores_terminal_signals = || ignored_signals(reaper.id()) & (1 << (libc::SIGTERM - 1)) != 0;
    assert!(eventually(Duration::from_secs(10), ignores_terminal_signals).await);
    for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM] {
        // SAFETY: signalling a child of this test.
        unsafe { libc::kill(reaper.id() as i32, signal) };
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(reaper.try_wait().unwrap().is_none(), "the reaper ended on a terminal's signal");
    assert!(watched.try_wait().unwrap().is_none(), "a group was killed while the server lives");
    drop(to_reaper); // The server is gone.
    let status = reaper.wait().unwrap();
    assert!(status.success(), "{status}");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(watched.wait().unwrap().signal(), Some(libc::SIGKILL));
    assert!(forgotten.try_wait().unwrap().is_none(), "a group the server had ended itself was killed");
    forgotten.kill().unwrap();
    forgotten.wait().unwrap();
}
