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

/// The mask of signals process `pid` ignores: `SigIgn` in its status on Linux, `ps -o sigignore` elsewhere.
fn ignored_signals(pid: u32) -> u64 {
    let mask = if cfg!(target_os = "linux") {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find_map(|l| l.strip_prefix("SigIgn:").map(str::to_string)).unwrap_or_default()
    } else {
        let ps = Command::new("ps").args(["-o", "sigignore=", "-p", &pid.to_string()]).output().unwrap();
        String::from_utf8_lossy(&ps.stdout).into_owned()
    };
    u64::from_str_radix(mask.trim(), 16).unwrap_or(0)
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

/// A runner whose program rebinds `os._exit` (how the runner leaves when its channel closes) and sleeps through
/// every exception still
/// ends with a server that is killed without a chance to clean up: by the parent-death signal on Linux, by the
/// reaper elsewhere.
#[apply(integration_test!)]
async fn a_runner_dies_with_a_killed_server_even_when_its_program_rebinds_os_exit() {
    if sandbox_under_test() == "docker" {
        skip("under docker a runner is a container (docker::no_container_is_left_when_the_server_is_stopped_mid_run)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    let mut ptc = Ptc::start_with_env(&config(&[], "  pool_size: 1\n"), &[("TMPDIR", &tmp_path)]).await;
    let peer = ptc.client.peer().clone();
    let run = tokio::spawn(async move {
        let code = "import os, time\nos._exit = lambda *args: None\nos.nice(7)\n\
                    while True:\n    try:\n        time.sleep(600)\n    except BaseException:\n        pass\n";
        let arguments = serde_json::json!({ "code": code });
        let params = rmcp::model::CallToolRequestParams::new("execute_program")
            .with_arguments(arguments.as_object().cloned().unwrap());
        peer.call_tool(params).await
    });
    // The program itself runs (not just its runner's start): it has lowered its priority, a mark that shows
    // from outside every sandbox.
    let started =
        eventually(Duration::from_secs(30), || runners_under(tmp.path()).iter().any(|pid| nice(pid) == 7)).await;
    assert!(started, "the program never ran: {:?}", runners(tmp.path()));
    ptc.child.kill().await.unwrap(); // SIGKILL: no chance to clean up
    let gone = eventually(Duration::from_secs(10), || runners(tmp.path()).is_empty()).await;
    assert!(gone, "runners outlived their killed server: {:?}", runners(tmp.path()));
    run.abort();
}

/// The runners whose HOME is below `tmp`, with their nice values: from /proc on Linux, from `ps` elsewhere.
fn runners(tmp: &std::path::Path) -> Vec<(String, i64)> {
    if cfg!(target_os = "linux") {
        return runners_under(tmp).into_iter().map(|pid| (pid.clone(), nice(&pid))).collect();
    }
    let listing = Command::new("ps").args(["-axE", "-ww", "-o", "pid=,nice=,command="]).output().unwrap();
    let needle = format!("HOME={}", tmp.display());
    String::from_utf8_lossy(&listing.stdout)
        .lines()
        .filter(|line| line.contains(&needle) && !line.contains(" Z"))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some((fields.next()?.to_string(), fields.next()?.parse().ok()?))
        })
        .collect()
}

/// The nice value of process `pid` (field 19 of its stat; 0 if it cannot be read).
fn nice(pid: &str) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name.split_whitespace().nth(16).and_then(|n| n.parse().ok()).unwrap_or(0)
}
