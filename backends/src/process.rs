//! A runner that is a process on this host (the `none` backend now, `landlock` later): it leads its own
//! process group so that killing the group kills everything the program started.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStderr};

use crate::{ExitInfo, RunnerControl, RunnerProcess, SpawnError};

/// How much of the runner's stderr is kept for diagnostics.
const STDERR_TAIL_BYTES: usize = 4096;

/// Wraps a spawned child (started with `process_group(0)` and piped stdio) into a [`RunnerProcess`]. The
/// scratch directory lives as long as the runner and is removed after it is killed.
pub(crate) fn host_runner(mut child: Child, scratch: TempDir) -> Result<RunnerProcess, SpawnError> {
    let missing = |what: &str| SpawnError::Start {
        program: "runner".into(),
        source: std::io::Error::other(format!("{what} was not piped")),
    };
    let to_runner = child.stdin.take().ok_or_else(|| missing("stdin"))?;
    let from_runner = child.stdout.take().ok_or_else(|| missing("stdout"))?;
    let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;
    let tail = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(keep_stderr_tail(stderr, Arc::clone(&tail)));
    let pgid = child.id().map(|pid| pid as libc::pid_t);
    let control = HostControl { child, pgid, exited: None, stderr_tail: tail, _scratch: scratch };
    Ok(RunnerProcess { to_runner: Box::pin(to_runner), from_runner: Box::pin(from_runner), control: Box::new(control) })
}

async fn keep_stderr_tail(mut stderr: ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stderr.read(&mut buf).await {
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.extend_from_slice(&buf[..n]);
        let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
        tail.drain(..excess);
    }
}

struct HostControl {
    child: Child,
    /// The runner's process group (its own pid); `None` if it had already exited when spawned.
    pgid: Option<libc::pid_t>,
    exited: Option<ExitInfo>,
    stderr_tail: Arc<Mutex<Vec<u8>>>,
    /// Dropped (removed) after the control, i.e. after the group is killed.
    _scratch: TempDir,
}

impl HostControl {
    fn kill_group(&self) {
        if let Some(pgid) = self.pgid {
            // SAFETY: plain syscall; a group that no longer exists yields ESRCH, which is fine.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

#[async_trait]
impl RunnerControl for HostControl {
    async fn wait(&mut self) -> ExitInfo {
        if let Some(info) = &self.exited {
            return info.clone();
        }
        let info = match self.child.wait().await {
            Ok(status) => exit_info(status),
            Err(e) => ExitInfo::Unknown(format!("could not wait for the runner: {e}")),
        };
        // The leader is gone; whatever it left behind in its group goes too.
        self.kill_group();
        self.exited = Some(info.clone());
        info
    }

    async fn kill(&mut self) {
        self.kill_group();
        let _ = self.child.start_kill();
        self.wait().await;
    }

    fn stderr_tail(&self) -> String {
        let tail = self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&tail).into_owned()
    }
}

impl Drop for HostControl {
    fn drop(&mut self) {
        self.kill_group();
        // `kill_on_drop` on the child makes tokio kill and reap the leader if it is still there.
    }
}

fn exit_info(status: std::process::ExitStatus) -> ExitInfo {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitInfo::Code(code),
        (None, Some(signal)) => ExitInfo::Signal(signal),
        (None, None) => ExitInfo::Unknown(status.to_string()),
    }
}
