//! One runner in a pod: the interpreter exec'd in the runner container, its source sent on stdin once it runs,
//! its stdout the channel and its stderr the diagnostics tail; the exec stream's status says how it ended. What
//! owns the pod (the pod itself, or the claim it came from) is deleted when the runner is done with.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{AttachParams, DeleteParams, DynamicObject};
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::error::Elapsed;
use tokio_util::sync::CancellationToken;

use super::claim::Claims;
use super::ending::EndsWithStream;
use super::error::{KubeError, is_not_found, source_chain};
use super::pod::{CONTAINER, exec_command, framed};
use crate::tail::StderrTail;
use crate::{ExitInfo, RunnerControl, RunnerProcess};

/// How long deleting a pod (or claim) may take before we give up on it.
const DELETE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the bootstrap may take to say it runs once exec'd.
const STARTED_TIMEOUT: Duration = Duration::from_secs(60);
/// Bytes of the runner's output held between the exec stream and the server's reader.
const CHANNEL_BUFFER: usize = 64 * 1024;

/// What is deleted to end a runner: its pod, or the claim its pod came from (deleting the claim deletes the
/// sandbox and its pod).
#[derive(Clone)]
pub enum Owner {
    Pod { api: Api<Pod>, name: String },
    Claim { api: Api<DynamicObject>, name: String },
}

impl Owner {
    pub fn new_pod(client: &Client, namespace: &str, name: &str) -> Owner {
        Owner::Pod { api: Api::namespaced(client.clone(), namespace), name: name.to_string() }
    }

    pub fn new_claim(claims: &Claims, name: &str) -> Owner {
        Owner::Claim { api: claims.api(), name: name.to_string() }
    }

    fn name(&self) -> &str {
        match self {
            Owner::Pod { name, .. } | Owner::Claim { name, .. } => name,
        }
    }

    /// Deletes it now (no grace period: the runner is killed), tolerating that it is gone already.
    pub async fn delete(&self) {
        let params = DeleteParams::background().grace_period(0);
        let deleted = match self {
            Owner::Pod { api, name } => {
                tokio::time::timeout(DELETE_TIMEOUT, api.delete(name, &params)).await.map(|r| r.map(|_| ()))
            }
            Owner::Claim { api, name } => {
                tokio::time::timeout(DELETE_TIMEOUT, api.delete(name, &params)).await.map(|r| r.map(|_| ()))
            }
        };
        match deleted {
            Ok(Ok(())) => {}
            Ok(Err(e)) if is_not_found(&e) => {}
            Ok(Err(e)) => tracing::warn!("could not delete {}: {}", self.name(), source_chain(&e)),
            Err(_) => {
                tracing::warn!("could not delete {}: no answer within {} s", self.name(), DELETE_TIMEOUT.as_secs())
            }
        }
    }

    pub fn delete_in_background(&self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let owner = self.clone();
            runtime.spawn(async move { owner.delete().await });
        }
    }
}

/// Execs the bootstrap in `pod`'s runner container and sends it `source`; the runner's stdin/stdout are the
/// channel from then on. `refused` says why the API refused the exec.
pub async fn exec(
    pods: &Api<Pod>,
    pod: &str,
    container: Option<&str>,
    source: &str,
    owner: Owner,
    refused: impl FnOnce(kube::Error) -> KubeError,
) -> Result<RunnerProcess, KubeError> {
    let params = AttachParams::default()
        .container(container.unwrap_or(CONTAINER))
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .max_stdin_buf_size(CHANNEL_BUFFER)
        .max_stdout_buf_size(CHANNEL_BUFFER)
        .max_stderr_buf_size(16 * 1024);
    let failed = |why: String| KubeError::Exec { pod: pod.to_string(), why };
    let mut attached = pods.exec(pod, exec_command(), &params).await.map_err(|e| match e {
        kube::Error::Api(_) | kube::Error::HyperError(_) | kube::Error::Service(_) => refused(e),
        other => failed(source_chain(&other)),
    })?;
    let (Some(mut stdin), Some(stdout), Some(stderr), Some(status)) =
        (attached.stdin(), attached.stdout(), attached.stderr(), attached.take_status())
    else {
        return Err(failed("the exec stream has no stdin, stdout or stderr".to_string()));
    };
    let over = CancellationToken::new();
    let mut stdout = EndsWithStream::new(stdout, &over);
    let mut stderr = EndsWithStream::new(stderr, &over);
    let stderr_tail = StderrTail::default();
    let tail = stderr_tail.clone();
    // Read all along: the stream stalls while a channel's buffer is full.
    let stderr_task = tokio::spawn(async move {
        let mut buffer = vec![0; 8192];
        while let Ok(n @ 1..) = stderr.read(&mut buffer).await {
            tail.push(&buffer[..n]);
        }
    });
    let mut waiter = tokio::spawn(async move {
        let status = status.await;
        // The stream's task ends with the status, or without one (then its error says why).
        let ended = attached.join().await;
        over.cancel();
        let _ = stderr_task.await;
        exit_info(status, ended.err().map(|e| source_chain(&e)))
    });
    // The bootstrap says it runs before it is sent anything: kube's stream task gives up at a failed send
    // without reading what came, so data sent to an exec that could not start (its API closing the connection)
    // would lose the status saying why.
    match tokio::time::timeout(STARTED_TIMEOUT, stdout.read_exact(&mut [0; 1])).await {
        Ok(Ok(_)) => {}
        Ok(Err(_)) => return Err(failed(ended_early(tokio::time::timeout(DELETE_TIMEOUT, waiter).await))),
        Err(_) => return Err(failed(format!("it did not start within {} s", STARTED_TIMEOUT.as_secs()))),
    }
    let framed = framed(source);
    let sent = tokio::select! {
        sent = stdin.write_all(&framed) => sent.map_err(|e| format!("could not send the runner's source: {e}")),
        ended = &mut waiter => Err(ended_early(Ok(ended))),
    };
    sent.map_err(failed)?;
    let control = KubeControl { owner, waiter, exited: None, stderr_tail, deleted: false };
    Ok(RunnerProcess { to_runner: Box::pin(stdin), from_runner: Box::pin(stdout), control: Box::new(control) })
}

/// Why a runner's exec stream ended before the runner got its source (e.g. the command is not in the image).
fn ended_early(ended: Result<Result<ExitInfo, JoinError>, Elapsed>) -> String {
    match ended {
        Ok(Ok(ExitInfo::Unknown(why))) => why,
        Ok(Ok(exit)) => format!("it ended ({exit}) before it got its source"),
        Ok(Err(e)) => format!("lost track of it: {e}"),
        Err(_) => format!("its exec stream ended, but no status came within {} s", DELETE_TIMEOUT.as_secs()),
    }
}

/// How the exec'd process ended, from the stream's status: `Success`, or `NonZeroExitCode` with the code as
/// its `ExitCode` cause (the runtime reports a process killed by signal N as 128 + N). Without a status,
/// `broken` is how the stream failed, if it did.
fn exit_info(status: Option<Status>, broken: Option<String>) -> ExitInfo {
    let Some(status) = status else {
        let why = broken.unwrap_or_else(|| "the pod was deleted?".to_string());
        return ExitInfo::Unknown(format!("the exec stream ended without an exit status ({why})"));
    };
    if status.status.as_deref() == Some("Success") {
        return ExitInfo::Code(0);
    }
    let code = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| causes.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|cause| cause.message.as_deref()?.parse::<i64>().ok());
    match code {
        Some(code @ 129..=159) => ExitInfo::Signal((code - 128) as i32),
        Some(code) => ExitInfo::Code(i32::try_from(code).unwrap_or(i32::MAX)),
        None => ExitInfo::Unknown(format!("the exec failed: {}", status.message.unwrap_or_default())),
    }
}

struct KubeControl {
    owner: Owner,
    /// Resolves when the exec'd process has ended (or its stream is gone), with how it ended.
    waiter: JoinHandle<ExitInfo>,
    exited: Option<ExitInfo>,
    stderr_tail: StderrTail,
    deleted: bool,
}

#[async_trait]
impl RunnerControl for KubeControl {
    async fn wait(&mut self) -> ExitInfo {
        if let Some(info) = &self.exited {
            return info.clone();
        }
        let info =
            (&mut self.waiter).await.unwrap_or_else(|e| ExitInfo::Unknown(format!("lost track of the runner: {e}")));
        self.exited = Some(info.clone());
        info
    }

    fn has_exited(&mut self) -> bool {
        self.exited.is_some() || self.waiter.is_finished()
    }

    async fn kill(&mut self) {
        if !self.deleted {
            self.deleted = true;
            self.owner.delete().await;
        }
        if self.exited.is_none() {
            let _ = tokio::time::timeout(DELETE_TIMEOUT, self.wait()).await;
        }
    }

    fn stderr_tail(&self) -> String {
        self.stderr_tail.text()
    }
}

impl Drop for KubeControl {
    fn drop(&mut self) {
        if !self.deleted {
            self.owner.delete_in_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    use super::*;

    fn failure(code: &str) -> Status {
        Status {
            status: Some("Failure".into()),
            reason: Some("NonZeroExitCode".into()),
            message: Some(format!("command terminated with non-zero exit code: exit status {code}")),
            details: Some(StatusDetails {
                causes: Some(vec![StatusCause {
                    reason: Some("ExitCode".into()),
                    message: Some(code.into()),
                    field: None,
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_exec_status_says_how_the_runner_ended() {
        let ended = |status| exit_info(Some(status), None);
        assert_eq!(ended(Status { status: Some("Success".into()), ..Default::default() }), ExitInfo::Code(0));
        assert_eq!(ended(failure("70")), ExitInfo::Code(70));
        assert_eq!(ended(failure("137")), ExitInfo::Signal(9));
        let broken = Status {
            status: Some("Failure".into()),
            message: Some("container not found".into()),
            ..Default::default()
        };
        assert_eq!(ended(broken), ExitInfo::Unknown("the exec failed: container not found".into()));
        let cut = ExitInfo::Unknown("the exec stream ended without an exit status (the pod was deleted?)".into());
        assert_eq!(exit_info(None, None), cut);
        let reset = exit_info(None, Some("connection reset".into()));
        assert_eq!(reset, ExitInfo::Unknown("the exec stream ended without an exit status (connection reset)".into()));
    }
}
