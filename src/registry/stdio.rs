//! Connecting to a `stdio` downstream: start its process with only the configured environment plus a
//! minimal safe set, and speak MCP over its stdin/stdout.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr, Command};

use crate::config::ServerConfig;

/// Variables a downstream inherits from the server's environment when set (as the official SDKs do);
/// everything else must be given in its `env`.
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];
/// Lines of a downstream's stderr kept to explain why it stopped.
const STDERR_TAIL_LINES: usize = 5;

/// A running downstream process. Dropping it kills the process and its process group.
pub struct StdioProcess {
    pub child: Child,
    pgid: Option<libc::pid_t>,
    stderr_tail: Arc<Mutex<Vec<String>>>,
    /// The task reading stderr; it ends at EOF, after the last line is in `stderr_tail`.
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

impl StdioProcess {
    pub fn spawn(config: &ServerConfig) -> Result<StdioProcess, String> {
        let command = config.command.as_deref().unwrap_or_default();
        let mut cmd = Command::new(command);
        cmd.args(&config.args)
            .env_clear()
            .envs(INHERITED_ENV.iter().filter_map(|name| std::env::var_os(name).map(|value| (name, value))))
            .envs(config.env.iter().map(|(k, v)| (k, v.as_text())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own group, so that helpers it starts (npx → node) go with it.
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| format!("could not start '{command}': {e}"))?;
        let pgid = child.id().map(|pid| pid as libc::pid_t);
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(follow_stderr(config.name.clone(), stderr, Arc::clone(&stderr_tail))));
        Ok(StdioProcess { child, pgid, stderr_tail, stderr_reader })
    }

    /// Why the process is gone (exit status and last stderr lines), waiting briefly for it to exit.
    pub async fn exit_reason(&mut self) -> String {
        let status = tokio::time::timeout(std::time::Duration::from_millis(500), self.child.wait()).await;
        let what = match status {
            Ok(Ok(status)) => {
                // Its last stderr lines may still be in the pipe: let the reader reach EOF (briefly).
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), reader).await;
                }
                format!("the process exited ({status})")
            }
            _ => "the connection was lost".to_string(),
        };
        match self.stderr_tail() {
            tail if tail.is_empty() => what,
            tail => format!("{what}; its stderr ended with: {tail}"),
        }
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr_tail.lock().unwrap_or_else(|e| e.into_inner()).join(" | ")
    }
}

impl Drop for StdioProcess {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            // SAFETY: plain syscall; ESRCH for a group already gone is fine.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

async fn follow_stderr(server: String, stderr: ChildStderr, tail: Arc<Mutex<Vec<String>>>) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server, "stderr: {line}");
        let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        if tail.len() == STDERR_TAIL_LINES {
            tail.remove(0);
        }
        tail.push(line.chars().take(300).collect());
    }
}
