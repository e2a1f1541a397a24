//! Starting a runner process (fork and exec, with the child's confinement before exec) blocks for
//! milliseconds. On the runtime's thread that would hold up everything else the server does meanwhile: the
//! answer of the run that just ended, while the pool starts its replacement. So runners start on a thread of
//! their own, which lives as long as the server: the parent-death signal fires when the thread that forked a
//! child ends, so it must never be a pooled thread that exits when idle.

use std::sync::{OnceLock, mpsc};

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

type Job = Box<dyn FnOnce() + Send>;

/// Spawns `command` on the spawner thread, registered with the caller's runtime.
pub(crate) async fn spawn(mut command: Command) -> std::io::Result<Child> {
    let runtime = tokio::runtime::Handle::current();
    let (done, spawned) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _runtime = runtime.enter();
        let _ = done.send(command.spawn());
    });
    if let Err(mpsc::SendError(job)) = spawner().send(job) {
        job(); // The thread could not be started: spawn here rather than not at all.
    }
    spawned.await.unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread ended")))
}

/// The spawner thread's queue, started on first use.
fn spawner() -> &'static mpsc::Sender<Job> {
    static QUEUE: OnceLock<mpsc::Sender<Job>> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let (queue, jobs) = mpsc::channel::<Job>();
        let started = std::thread::Builder::new().name("ptc-spawner".into()).spawn(move || {
            for job in jobs {
                // A job that panics must not end the thread: its end would kill, through the parent-death
                // signal, every runner it started. The job's caller sees its channel dropped.
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                    tracing::error!("a runner's start panicked; the spawner thread goes on");
                }
            }
        });
        if let Err(e) = started {
            tracing::warn!("cannot start the runner spawner thread ({e}); runners start on the runtime's");
        }
        queue
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_job_that_panics_leaves_the_thread_and_its_children_alive() {
        let mut survivor = spawn({
            let mut command = Command::new("sleep");
            command.arg("30").kill_on_drop(true);
            // As runners do: a child of the spawner thread dies with it.
            // SAFETY: the closure makes one async-signal-safe syscall.
            unsafe { command.pre_exec(crate::lifecycle::die_with_server) };
            command
        })
        .await
        .unwrap();
        let (done, ran) = oneshot::channel::<()>();
        let job: Job = Box::new(move || {
            let _done = done;
            panic!("a start that panics");
        });
        spawner().send(job).unwrap();
        assert!(ran.await.is_err(), "the panicking job dropped its channel");
        let mut command = Command::new("sh");
        command.args(["-c", "exit 5"]);
        assert_eq!(spawn(command).await.unwrap().wait().await.unwrap().code(), Some(5), "the thread still spawns");
        assert!(survivor.try_wait().unwrap().is_none(), "a child of the spawner thread outlived the panic");
        survivor.kill().await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_command_is_spawned_off_the_runtime_thread_and_its_child_awaited_on_it() {
        let mut command = Command::new("sh");
        command.args(["-c", "exit 7"]);
        let mut child = spawn(command).await.unwrap();
        assert_eq!(child.wait().await.unwrap().code(), Some(7));
        let missing = spawn(Command::new("/nonexistent/ptc-test-binary")).await;
        assert_eq!(missing.unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }
}
