//! Zygotes (`none`, `landlock`): one warm interpreter per backend, the runner imported, that forks each new
//! runner; the fork takes on its run's confinement before it says `ready` (zygote.py). A runner then starts
//! in milliseconds instead of an interpreter's start-up and imports. The server keeps the zygote's socket,
//! hands each fork its stdio and cgroup, and learns its leader (a pidfd) and how it ended; the zygote keeps
//! an ended leader unreaped until the server has killed its process group (`reap`), so that the group's id
//! cannot name another group meanwhile. A zygote that fails to start or dies is started again on the next
//! run; while it cannot start, runners start fresh.

mod wire;

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::sync::oneshot;

use crate::ExitInfo;
use crate::tail::StderrTail;

/// How long a fork may take to be acknowledged before the zygote is thought stuck and replaced.
const FORK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long after a zygote failed to start runners start fresh before the next try.
const RETRY_AFTER: Duration = Duration::from_secs(30);

/// A started zygote process and the server's end of its socket.
pub(crate) struct ZygoteProcess {
    pub child: Child,
    pub socket: OwnedFd,
}

/// The socket's other end, for the zygote's stdin.
pub(crate) fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    wire::socket_pair()
}

/// What one fork is given: its rlimits, environment and working directory (`None`: the zygote's own
/// scratch), the size of its scratch tmpfs where it mounts one, and its cgroup.
pub(crate) struct ForkRequest {
    pub rlimits: Vec<crate::rlimits::Rlimit>,
    pub env: Vec<(String, String)>,
    pub scratch: Option<std::path::PathBuf>,
    pub scratch_mb: u64,
    pub cgroup: Option<CgroupHandles>,
}

/// A run's cgroup as a fork is given it: its directory (an `O_PATH` handle, to be forked into) and its
/// `cgroup.procs`, open for writing (to move into where the zygote may not fork into it).
pub(crate) struct CgroupHandles {
    pub dir: OwnedFd,
    pub procs: std::fs::File,
}

impl CgroupHandles {
    pub(crate) fn open(dir: &std::path::Path, procs: std::fs::File) -> std::io::Result<CgroupHandles> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(dir)?;
        Ok(CgroupHandles { dir: dir.into(), procs })
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ZygoteError {
    #[error("the zygote could not be started: {0}")]
    Start(String),
    #[error("the zygote is not available (it failed to start {0}s ago)")]
    Resting(u64),
    #[error("the zygote could not fork: {0}")]
    Fork(String),
}

/// The zygote of one backend, started on first use.
#[derive(Default)]
pub(crate) struct Zygote {
    live: tokio::sync::Mutex<Option<Arc<Live>>>,
    failed_at: Mutex<Option<Instant>>,
}

impl Zygote {
    /// A fork for one run, from the live zygote or one started now with `start`.
    pub(crate) async fn fork<F, Fut>(&self, request: ForkRequest, start: F) -> Result<Forked, ZygoteError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<ZygoteProcess, String>>,
    {
        let live = self.live(start).await?;
        match live.fork(request).await {
            Ok(forked) => Ok(forked),
            Err(e) => {
                // A zygote that cannot fork is of no more use: the next run starts another.
                live.end();
                self.live.lock().await.take_if(|current| Arc::ptr_eq(current, &live));
                Err(e)
            }
        }
    }

    async fn live<F, Fut>(&self, start: F) -> Result<Arc<Live>, ZygoteError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<ZygoteProcess, String>>,
    {
        let mut live = self.live.lock().await;
        if let Some(current) = live.as_ref().filter(|l| !l.has_ended()) {
            return Ok(Arc::clone(current));
        }
        if let Some(at) = *self.failed_at.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < RETRY_AFTER
        {
            return Err(ZygoteError::Resting(at.elapsed().as_secs()));
        }
        let started = match start().await {
            Ok(process) => Live::launch(process).map_err(|e| e.to_string()),
            Err(why) => Err(why),
        };
        match started {
            Ok(started) => {
                *live = Some(Arc::clone(&started));
                Ok(started)
            }
            Err(why) => {
                tracing::info!(
                    "the runner zygote could not start ({why}); runners start fresh for {}s",
                    RETRY_AFTER.as_secs()
                );
                *self.failed_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                Err(ZygoteError::Start(why))
            }
        }
    }

    /// Ends the zygote (its forks die with it).
    pub(crate) async fn shutdown(&self) {
        if let Some(live) = self.live.lock().await.take() {
            live.end();
        }
    }
}

enum Waiter {
    Fork(oneshot::Sender<Result<OwnedFd, String>>),
    Exit(oneshot::Sender<ExitInfo>),
}

/// A running zygote: its socket, the runs waiting for an answer, its process.
struct Live {
    socket: AsyncFd<OwnedFd>,
    waiters: Mutex<HashMap<u64, Waiter>>,
    next: AtomicU64,
    child: Mutex<Option<Child>>,
    stderr: StderrTail,
    ended: tokio_util::sync::CancellationToken,
}

impl Live {
    fn launch(process: ZygoteProcess) -> std::io::Result<Arc<Live>> {
        let ZygoteProcess { mut child, socket } = process;
        let stderr = StderrTail::default();
        if let Some(pipe) = child.stderr.take() {
            tokio::spawn(crate::host::keep_stderr_tail(pipe, stderr.clone()));
        }
        let live = Arc::new(Live {
            // SAFETY: the `OwnedFd` stays open and refers to the same socket until it is dropped with the `AsyncFd`.
            socket: unsafe { AsyncFd::register(socket) }?,
            waiters: Mutex::default(),
            next: AtomicU64::new(1),
            child: Mutex::new(Some(child)),
            stderr,
            ended: Default::default(),
        });
        tokio::spawn(Arc::clone(&live).read_answers());
        Ok(live)
    }

    fn has_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kills the zygote; every run waiting for an answer gets one.
    fn end(&self) {
        self.ended.cancel();
        if let Some(mut child) = self.child.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = child.start_kill();
            tokio::spawn(async move { child.wait().await });
        }
        let why = format!("the zygote ended{}", detail(&self.stderr.text()));
        for (_, waiter) in self.waiters().drain() {
            match waiter {
                Waiter::Fork(answer) => drop(answer.send(Err(why.clone()))),
                Waiter::Exit(answer) => drop(answer.send(ExitInfo::Unknown(why.clone()))),
            }
        }
    }

    async fn read_answers(self: Arc<Self>) {
        let mut buffer = vec![0u8; wire::MAX_MESSAGE];
        loop {
            let received = tokio::select! {
                received = self.socket.async_io(tokio::io::Interest::READABLE, |fd| wire::receive(fd.as_fd(), &mut buffer)) => received,
                () = self.ended.cancelled() => return,
            };
            match received {
                Ok((0, _)) | Err(_) => break,
                Ok((len, fds)) => self.answer(&buffer[..len], fds),
            }
        }
        if !self.has_ended() {
            tracing::warn!("the runner zygote ended{}", detail(&self.stderr.text()));
        }
        self.end();
    }

    /// Passes one message from the zygote to the run it is for.
    fn answer(self: &Arc<Self>, message: &[u8], mut fds: Vec<OwnedFd>) {
        let Ok(answer) = serde_json::from_slice::<Answer>(message) else {
            tracing::warn!("the runner zygote sent a message the server does not know");
            return;
        };
        let mut waiters = self.waiters();
        match answer {
            Answer::Forked { forked } => {
                let delivered = match (waiters.remove(&forked), fds.pop()) {
                    (Some(Waiter::Fork(waiter)), Some(pidfd)) => waiter.send(Ok(pidfd)).is_ok(),
                    _ => false,
                };
                if !delivered {
                    // Its start was given up meanwhile: the fork finds its channel closed and ends.
                    drop(waiters);
                    self.reap_later(forked);
                }
            }
            Answer::Failed { failed, error } => {
                if let Some(Waiter::Fork(waiter)) = waiters.remove(&failed) {
                    let _ = waiter.send(Err(error));
                }
            }
            Answer::Exited { exited, code, signal } => {
                if let Some(Waiter::Exit(waiter)) = waiters.remove(&exited) {
                    let info = match (code, signal) {
                        (Some(code), _) => ExitInfo::Code(code),
                        (None, Some(signal)) => ExitInfo::Signal(signal),
                        (None, None) => ExitInfo::Unknown("the zygote did not say how the runner ended".into()),
                    };
                    let _ = waiter.send(info);
                }
            }
        }
    }

    /// Tells the zygote it may reap run `id`'s leader once it has ended; no answer is awaited any more.
    fn reap_later(self: &Arc<Self>, id: u64) {
        let zygote = Arc::clone(self);
        // Without a runtime (the server is going away) the zygote's end takes the leader with it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                zygote.waiters().remove(&id);
                let _ = zygote.send(&serde_json::json!({"reap": id}), &[]).await;
            });
        }
    }

    async fn send(&self, message: &serde_json::Value, fds: &[RawFd]) -> std::io::Result<()> {
        let bytes = message.to_string();
        self.socket.async_io(tokio::io::Interest::WRITABLE, |fd| wire::send(fd.as_fd(), bytes.as_bytes(), fds)).await
    }

    async fn fork(self: &Arc<Self>, request: ForkRequest) -> Result<Forked, ZygoteError> {
        let fail = |e: std::io::Error| ZygoteError::Fork(e.to_string());
        let (stdin_read, stdin_write) = pipe_pair().map_err(fail)?;
        let (stdout_read, stdout_write) = pipe_pair().map_err(fail)?;
        let (stderr_read, stderr_write) = pipe_pair().map_err(fail)?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        let (exit, exited) = oneshot::channel();
        self.waiters().insert(id, Waiter::Fork(answer));
        let mut fds = vec![stdin_read.as_raw_fd(), stdout_write.as_raw_fd(), stderr_write.as_raw_fd()];
        if let Some(cgroup) = &request.cgroup {
            fds.extend([cgroup.dir.as_raw_fd(), cgroup.procs.as_raw_fd()]);
        }
        let message = serde_json::json!({
            "fork": id,
            "rlimits": request.rlimits.iter().map(|&(resource, value)| [resource as u64, value]).collect::<Vec<_>>(),
            "env": request.env.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect::<serde_json::Map<_, _>>(),
            "scratch": request.scratch.as_ref().map(|dir| hex(dir.as_os_str().as_encoded_bytes())),
            "scratch_mb": request.scratch_mb,
        });
        let sent = self.send(&message, &fds).await;
        // Only the fork holds these now.
        drop((stdin_read, stdout_write, stderr_write, request.cgroup));
        if let Err(e) = sent {
            self.waiters().remove(&id);
            return Err(fail(e));
        }
        let pidfd = match tokio::time::timeout(FORK_TIMEOUT, answered).await {
            Ok(Ok(Ok(pidfd))) => pidfd,
            Ok(Ok(Err(why))) => return Err(ZygoteError::Fork(why)),
            Ok(Err(_)) => return Err(ZygoteError::Fork("the zygote ended".into())),
            Err(_) => return Err(ZygoteError::Fork(format!("no answer within {}s", FORK_TIMEOUT.as_secs()))),
        };
        self.waiters().insert(id, Waiter::Exit(exit));
        let pid = pid_of(&pidfd).map_err(fail)?;
        let to_runner = pipe::Sender::from_owned_fd(stdin_write).map_err(fail)?;
        let from_runner = pipe::Receiver::from_owned_fd(stdout_read).map_err(fail)?;
        let stderr = pipe::Receiver::from_owned_fd(stderr_read).map_err(fail)?;
        Ok(Forked {
            pid,
            pidfd,
            streams: Some((to_runner, from_runner, stderr)),
            exited: Some(exited),
            status: None,
            zygote: Arc::clone(self),
            id,
            reaped: false,
        })
    }
}

/// Bytes (paths, which need not be UTF-8, and seccomp filters) as the zygote reads them: hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn detail(stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() { String::new() } else { format!(": {stderr}") }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Answer {
    Forked { forked: u64 },
    Failed { failed: u64, error: String },
    Exited { exited: u64, code: Option<i32>, signal: Option<i32> },
}

/// A pipe (read end, write end), both close-on-exec.
pub(crate) fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 into a local array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: two fresh fds owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The pid (in the server's pid namespace) a pidfd refers to, from its fdinfo.
fn pid_of(pidfd: &OwnedFd) -> std::io::Result<libc::pid_t> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))?;
    info.lines()
        .find_map(|line| line.strip_prefix("Pid:"))
        .and_then(|pid| pid.trim().parse().ok())
        .filter(|pid: &libc::pid_t| *pid > 0)
        .ok_or_else(|| std::io::Error::other("the zygote's pidfd names no live process"))
}

/// One forked runner's leader, as the zygote reported it: its pid (also its process group's id), its stdio,
/// and how it ended once the zygote says.
pub(crate) struct Forked {
    pub pid: libc::pid_t,
    pidfd: OwnedFd,
    streams: Option<(pipe::Sender, pipe::Receiver, pipe::Receiver)>,
    exited: Option<oneshot::Receiver<ExitInfo>>,
    /// How it ended, once the zygote said.
    status: Option<ExitInfo>,
    zygote: Arc<Live>,
    id: u64,
    reaped: bool,
}

impl Forked {
    /// Its stdin, stdout and stderr (once).
    pub(crate) fn take_streams(&mut self) -> Option<(pipe::Sender, pipe::Receiver, pipe::Receiver)> {
        self.streams.take()
    }

    /// How the leader ended (waits for it; cancellation-safe); the zygote then reaps it, so call it once its
    /// group is killed.
    pub(crate) async fn status(&mut self) -> ExitInfo {
        if let Some(exited) = &mut self.exited {
            let info = exited.await.unwrap_or_else(|_| ExitInfo::Unknown("the zygote ended".into()));
            self.exited = None;
            self.status = Some(info);
        }
        self.reap();
        self.status.clone().unwrap_or_else(|| ExitInfo::Unknown("the zygote ended".into()))
    }

    /// Whether the leader has exited (a pidfd becomes readable then), or is about to: its zygote ended, and a
    /// zygote's forks die with it (a moment later on a busy machine).
    pub(crate) fn has_exited(&self) -> bool {
        if self.zygote.has_ended() {
            return true;
        }
        let mut poll = libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: poll of one fd we own, without waiting.
        unsafe { libc::poll(&mut poll, 1, 0) != 0 }
    }

    /// SIGKILL to the leader itself, through its pidfd (never another process).
    pub(crate) fn start_kill(&self) {
        // SAFETY: pidfd_send_signal with a pidfd we own and no siginfo.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32) };
    }

    fn reap(&mut self) {
        if !std::mem::replace(&mut self.reaped, true) {
            self.zygote.reap_later(self.id);
        }
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        self.reap();
    }
}
