//! Connecting to a `stdio` downstream: start its process in its own process group with only the configured
//! environment plus a minimal safe set and the proxy and CA variables, speak MCP over its stdin/stdout
//! ([`LineTransport`]), explain its end in words, and make sure nothing of its group outlives it.
//!
//! The group is always signalled before the leader is reaped: once the leader is reaped and the group is
//! empty, its id may belong to someone else.

mod calls;
mod large_texts;
mod stderr;
pub(super) mod tool_result;
mod transport;

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::limits::Limits;
use crate::config::ServerConfig;
use ptc_backends::lifecycle::{DeathWatch, ExitWatch, signal_group};
use stderr::LastLine;
pub use transport::{Answer, BadAnswer, LineTransport};

/// Variables a downstream inherits from the server's environment when set (as the official SDKs do);
/// everything else must be given in its `env`, which overrides these.
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"];
/// Inherited too: how this machine reaches the network (its proxy, the CAs it trusts), without which a
/// server that fetches its code (`npx -y`, `uvx`) or calls an API fails behind a corporate proxy, far from
/// the cause. `PIP_INDEX_URL` is not among them: it often carries a token, and where a server's packages
/// come from is that server's `env`'s choice.
const NETWORK_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
];
/// How long its last stderr line may take to arrive once the group is gone. Bounded: a process that left
/// the group can hold the pipe open for good.
const STDERR_DRAIN: Duration = Duration::from_millis(300);
/// How long a server being stopped may take to exit after its stdin closed.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long a server being stopped may take to exit after SIGTERM; also bounds reaping after SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(1);

pub type StdioTransport = LineTransport<ChildStdout, ChildStdin>;

/// Why a downstream process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("could not start '{command}': {source}")]
    Start { command: String, source: std::io::Error },
    #[error("'{command}' started without its stdio piped")]
    NotPiped { command: String },
}

/// A running downstream process, leader of its own process group. Dropping it kills the group.
pub struct StdioProcess {
    child: Child,
    pgid: libc::pid_t,
    exit: ExitWatch,
    /// Its group dies with the server, however the server ends (the reaper, where there is no parent-death
    /// signal); dropped before the leader is reaped.
    death: Option<DeathWatch>,
    /// Set once the leader is reaped (after its group was killed): the group id is no longer ours.
    reaped: bool,
    status: Option<ExitStatus>,
    last_stderr_line: LastLine,
    /// The task draining stderr; it ends at EOF, after the last line is in `last_stderr_line`.
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

impl StdioProcess {
    /// Starts the server and returns it with the transport over its stdin/stdout.
    pub fn spawn(config: &ServerConfig, limits: Limits) -> Result<(StdioProcess, StdioTransport), SpawnError> {
        let command = config.command.as_deref().unwrap_or_default();
        let mut cmd = Command::new(command);
        cmd.args(&config.args)
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .chain(NETWORK_ENV)
                    .filter_map(|name| std::env::var_os(name).map(|value| (name, value))),
            )
            .envs(config.env.iter().map(|(k, v)| (k, v.as_text())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so that helpers it starts (npx → node) go with it.
            .process_group(0);
        let mut child = cmd.spawn().map_err(|source| SpawnError::Start { command: command.to_string(), source })?;
        let (Some(pid), Some(stdout), Some(stdin)) = (child.id(), child.stdout.take(), child.stdin.take()) else {
            return Err(SpawnError::NotPiped { command: command.to_string() });
        };
        let pgid = pid as libc::pid_t;
        let last_stderr_line = LastLine::default();
        let stderr_reader = child
            .stderr
            .take()
            .map(|stderr| tokio::spawn(stderr::drain(config.name.clone(), stderr, last_stderr_line.clone())));
        let process = StdioProcess {
            child,
            pgid,
            exit: ExitWatch::new(pgid),
            death: Some(DeathWatch::of(pgid)),
            reaped: false,
            status: None,
            last_stderr_line,
            stderr_reader,
        };
        Ok((process, LineTransport::new(stdout, stdin, limits.max_message_bytes, limits.call_wait)))
    }

    /// Why the process ended, in words (`exited with status 1: <its last stderr line>`), if it exits
    /// within `wait`; then its group is killed and it is reaped. `None` if it is still running.
    pub async fn exit_reason(&mut self, wait: Duration) -> Option<String> {
        tokio::time::timeout(wait, self.exit.exited()).await.ok()?;
        let status = self.end_group().await;
        // Its last stderr lines may still be in the pipe: let the reader reach EOF (briefly).
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
        let what = match status {
            Some(status) => describe(status),
            None => "exited".to_string(),
        };
        Some(match self.last_stderr_line.get() {
            Some(line) => format!("{what}: {line}"),
            None => what,
        })
    }

    /// Stops the process politely, its stdin being closed already: it gets a moment to exit, then SIGTERM
    /// (the whole group), then another moment; whatever is left of the group is killed.
    pub async fn stop(&mut self) {
        if tokio::time::timeout(STOP_GRACE, self.exit.exited()).await.is_err() {
            self.signal_group(libc::SIGTERM);
            let _ = tokio::time::timeout(TERM_GRACE, self.exit.exited()).await;
        }
        self.end_group().await;
    }

    /// Kills what is left of the group (helpers outlive their leader), then reaps the leader.
    async fn end_group(&mut self) -> Option<ExitStatus> {
        if !self.reaped {
            self.signal_group(libc::SIGKILL);
            self.death = None;
            // SIGKILL cannot be caught: the wait is short; bounded all the same.
            if let Ok(waited) = tokio::time::timeout(TERM_GRACE, self.child.wait()).await {
                self.reaped = true;
                self.status = waited.ok();
            }
        }
        self.status
    }

    fn signal_group(&self, signal: libc::c_int) {
        // The leader is not reaped yet, so the group id is still ours.
        if !self.reaped {
            signal_group(self.pgid, signal);
        }
    }
}

impl Drop for StdioProcess {
    fn drop(&mut self) {
        // The leader is reaped only after this (tokio reaps a dropped child in the background).
        self.signal_group(libc::SIGKILL);
    }
}

/// An exit status in words.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "exited".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::TransportKind;

    const LIMITS: Limits = Limits { max_message_bytes: 1000, call_wait: Duration::from_secs(60) };

    fn server(script: &str) -> ServerConfig {
        ServerConfig {
            name: "t".into(),
            transport: TransportKind::Stdio,
            command: Some("sh".into()),
            args: vec!["-c".into(), script.into()],
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            auth: None,
            connect_timeout_seconds: 60.0,
        }
    }

    #[tokio::test]
    async fn an_exit_is_explained_by_its_status_and_last_stderr_line() {
        let (mut process, _transport) = StdioProcess::spawn(
            &server("echo 'Traceback:' >&2; echo 'ValueError: boom' >&2; echo >&2; exit 3"),
            LIMITS,
        )
        .unwrap();
        let reason = process.exit_reason(Duration::from_secs(10)).await;
        assert_eq!(reason.as_deref(), Some("exited with status 3: ValueError: boom"));
    }

    /// A byte that is not UTF-8, then more than a pipe holds: the server neither blocks nor loses its stderr.
    #[tokio::test]
    async fn stderr_is_drained_whatever_its_bytes_and_its_last_line_still_explains_the_exit() {
        let script = "printf 'bad \\377 byte\\n' >&2; head -c 1000000 /dev/zero | tr '\\0' x >&2; echo >&2; \
                      echo 'ValueError: boom' >&2; exit 3";
        let (mut process, _transport) = StdioProcess::spawn(&server(script), LIMITS).unwrap();
        let reason = process.exit_reason(Duration::from_secs(10)).await;
        assert_eq!(reason.as_deref(), Some("exited with status 3: ValueError: boom"));
    }

    #[tokio::test]
    async fn once_the_leader_exits_the_rest_of_its_group_is_killed() {
        let (mut process, _transport) =
            StdioProcess::spawn(&server("sleep 60 & echo $! >&2; sleep 0.5; exit 0"), LIMITS).unwrap();
        let helper = helper_pid(&process).await;
        assert_eq!(process.exit_reason(Duration::from_millis(50)).await, None, "it is still running");
        let reason = process.exit_reason(Duration::from_secs(10)).await.unwrap_or_default();
        assert!(reason.starts_with("exited with status 0"), "{reason}");
        assert!(ends(helper).await, "the helper outlived its group");
    }

    #[tokio::test]
    async fn stop_ends_the_whole_group_even_members_that_ignore_sigterm() {
        let (mut process, transport) =
            StdioProcess::spawn(&server("trap '' TERM; sleep 60 & echo $! >&2; wait"), LIMITS).unwrap();
        let helper = helper_pid(&process).await;
        drop(transport); // closes its stdin, which this one ignores
        process.stop().await;
        assert!(process.reaped, "the leader was reaped");
        assert!(ends(helper).await, "the helper outlived its group");
    }

    /// The pid a test script printed to its stderr.
    async fn helper_pid(process: &StdioProcess) -> u32 {
        loop {
            if let Some(pid) = process.last_stderr_line.get().and_then(|l| l.parse().ok()) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether a process ends (or is a zombie: its new parent may not reap it at once) within a few
    /// seconds; a signalled process takes a moment to go.
    async fn ends(pid: u32) -> bool {
        for _ in 0..250 {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.rsplit_once(") ").is_none_or(|(_, rest)| rest.starts_with('Z')) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }
}
