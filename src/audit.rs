//! The audit file (`logging.audit_file`): one JSON line per run, appended when the run ends.
//!
//! The file may sit in a directory other users can write to, and it may hold programs' text (secrets
//! included), so it is opened only when it is this user's alone: never through a symbolic link, never a file
//! another user owns or can write, never one with a second name (a hard link to some other file); it is
//! created 0600. Lines are written by a thread of their own, so a slow or full disk never holds up the runs;
//! each goes out in one `write`, and a write that comes up short is undone, so the file only ever holds whole
//! lines. It is reopened on request (SIGHUP), so the OS's log rotation can move it.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};

use crate::config::LoggingConfig;

/// A finished run as the audit file records it.
pub trait AuditRecord {
    /// Its line, newline included; with `with_code`, the program's text too.
    fn audit_line(&self, with_code: bool) -> Vec<u8>;
}

/// Lines waiting for the writer. A disk that cannot keep up loses lines past this (each one said in the log)
/// rather than the server's memory.
const QUEUE_LINES: usize = 1024;

#[derive(Debug, thiserror::Error)]
#[error("logging.audit_file: {path}: {problem}")]
pub struct AuditError {
    path: PathBuf,
    problem: Problem,
}

/// Why the audit file cannot be used.
#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("cannot open it for appending: {0}; fix the path or its permissions")]
    Open(#[source] io::Error),
    #[error(
        "it is a symbolic link, which ptc-mcp does not follow (whoever made it could point it at any file); \
         name the file itself"
    )]
    Symlink,
    #[error("cannot start the thread that writes it: {0}")]
    Writer(#[source] io::Error),
    #[error("it is not a regular file; name a file")]
    NotAFile,
    #[error(
        "it belongs to uid {owner}, not to this user (uid {me}), who could read the logged programs; remove it, \
         or choose a path in a directory only you can write to"
    )]
    ForeignOwner { owner: u32, me: u32 },
    #[error("other users can write to it (mode {mode:03o}); run chmod go-w on it")]
    WritableByOthers { mode: u32 },
    #[error(
        "it has {links} names (hard links), and another name may be a file that must not be written; remove it \
         and let ptc-mcp create it"
    )]
    HardLinked { links: u64 },
}

/// What the writer thread is asked to do, in order.
enum Job {
    Append(Vec<u8>),
    Reopen,
    /// Answered once everything asked before is done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

pub struct AuditLog {
    path: PathBuf,
    with_code: bool,
    jobs: SyncSender<Job>,
}

impl AuditLog {
    /// Opens the configured audit file and starts its writer; `None` when there is none.
    pub fn open(config: &LoggingConfig) -> Result<Option<AuditLog>, AuditError> {
        let Some(path) = &config.audit_file else { return Ok(None) };
        let file = open_append(path)?;
        let (jobs, queue) = mpsc::sync_channel(QUEUE_LINES);
        let writer = path.clone();
        std::thread::Builder::new()
            .name("ptc-audit".into())
            .spawn(move || write_lines(&writer, file, &queue))
            .map_err(|e| AuditError { path: path.clone(), problem: Problem::Writer(e) })?;
        Ok(Some(AuditLog { path: path.clone(), with_code: config.audit_code, jobs }))
    }

    /// Hands the run's line to the writer without waiting for it. A line that cannot be written is logged,
    /// never fatal to the run.
    pub fn append(&self, record: &dyn AuditRecord) {
        self.send(Job::Append(record.audit_line(self.with_code)), "a run's line was left out");
    }

    /// Opens the file at its path again (after the OS rotated it away); on failure, the writer keeps writing
    /// to the one it has.
    pub fn reopen(&self) {
        self.send(Job::Reopen, "it was not reopened");
    }

    /// Resolves once every line handed over before is written (or has failed), so that none is lost when the
    /// process exits.
    pub async fn flush(&self) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.send(Job::Flush(done), "its last lines may be lost") {
            let _ = written.await;
        }
    }

    fn send(&self, job: Job, otherwise: &str) -> bool {
        match self.jobs.try_send(job) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                tracing::warn!("the audit file {} is not keeping up: {otherwise}", self.path.display());
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

/// The writer thread: does the jobs in order until the log is dropped.
fn write_lines(path: &Path, mut file: File, jobs: &Receiver<Job>) {
    for job in jobs {
        match job {
            Job::Append(line) => {
                if let Err(e) = append_whole(&file, &line) {
                    tracing::warn!("a run's line was left out of the audit file {}: {e}", path.display());
                }
            }
            Job::Reopen => match open_append(path) {
                Ok(reopened) => {
                    file = reopened;
                    tracing::info!("audit file {} reopened", path.display());
                }
                Err(e) => tracing::warn!("{e}; still writing to the file opened before"),
            },
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Opens `path` for appending, creating it 0600, if it is this user's alone (see the module's comment). Never
/// waits: a FIFO planted there is opened without blocking, then refused.
fn open_append(path: &Path) -> Result<File, AuditError> {
    let refuse = |problem| AuditError { path: path.to_path_buf(), problem };
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            let symlink = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            refuse(if symlink { Problem::Symlink } else { Problem::Open(e) })
        })?;
    let metadata = file.metadata().map_err(|e| refuse(Problem::Open(e)))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !metadata.is_file() {
        Err(refuse(Problem::NotAFile))
    } else if metadata.uid() != me {
        Err(refuse(Problem::ForeignOwner { owner: metadata.uid(), me }))
    } else if metadata.mode() & 0o022 != 0 {
        Err(refuse(Problem::WritableByOthers { mode: metadata.mode() & 0o777 }))
    } else if metadata.nlink() > 1 {
        Err(refuse(Problem::HardLinked { links: metadata.nlink() }))
    } else {
        Ok(file)
    }
}

/// Appends `line` in one write, or not at all: a write that comes up short (a full disk, the file-size limit)
/// is undone. Other servers appending to the same file take the same lock, so an undo never cuts their lines.
fn append_whole(file: &File, line: &[u8]) -> io::Result<()> {
    let _locked = Exclusive::lock(file)?;
    let size = file.metadata()?.len();
    let written = (&*file).write(line);
    if matches!(written, Ok(n) if n == line.len()) {
        return Ok(());
    }
    file.set_len(size)?;
    Err(match written {
        Ok(n) => io::Error::other(format!("only {n} of its {} bytes could be written", line.len())),
        Err(e) => e,
    })
}

/// An exclusive `flock` on a file, released when dropped.
struct Exclusive<'a>(&'a File);

impl<'a> Exclusive<'a> {
    fn lock(file: &'a File) -> io::Result<Self> {
        loop {
            // SAFETY: flock on an fd the borrowed file keeps open.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(Exclusive(file));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // SAFETY: as in `lock`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;

    struct Line(&'static str);

    impl AuditRecord for Line {
        fn audit_line(&self, with_code: bool) -> Vec<u8> {
            format!("{{\"line\":\"{}\",\"code\":{with_code}}}\n", self.0).into_bytes()
        }
    }

    fn config(path: &Path, audit_code: bool) -> LoggingConfig {
        LoggingConfig { audit_file: Some(path.to_path_buf()), audit_code }
    }

    fn refusal(path: &Path) -> String {
        match AuditLog::open(&config(path, false)) {
            Ok(_) => panic!("{} was accepted", path.display()),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn the_file_is_created_0600_and_gets_whole_lines_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = AuditLog::open(&config(&path, true)).unwrap().unwrap();
        audit.append(&Line("one"));
        audit.append(&Line("two"));
        audit.flush().await;
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"line\":\"one\",\"code\":true}\n{\"line\":\"two\",\"code\":true}\n"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_symbolic_link_is_refused_and_its_target_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("root-only");
        std::fs::write(&target, "secret\n").unwrap();
        let link = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = refusal(&link);
        assert!(
            error.starts_with(&format!("logging.audit_file: {}: it is a symbolic link", link.display())),
            "{error}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret\n");
        std::os::unix::fs::symlink(dir.path().join("missing"), dir.path().join("dangling")).unwrap();
        assert!(refusal(&dir.path().join("dangling")).contains("symbolic link"));
        assert!(!dir.path().join("missing").exists(), "a dangling link does not create its target");
    }

    #[test]
    fn a_file_others_can_write_or_with_a_second_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared.jsonl");
        std::fs::write(&shared, "").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o620)).unwrap();
        assert!(refusal(&shared).ends_with("other users can write to it (mode 620); run chmod go-w on it"));
        let linked = dir.path().join("linked.jsonl");
        std::fs::write(&linked, "").unwrap();
        std::fs::hard_link(&linked, dir.path().join("other-name")).unwrap();
        assert!(refusal(&linked).contains("it has 2 names (hard links)"));
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("audit.jsonl");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // A reader that never reads: without O_NONBLOCK the open would succeed and writes would block.
        let _reader = OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        assert!(refusal(&fifo).ends_with("it is not a regular file; name a file"));
    }

    #[tokio::test]
    async fn appending_never_waits_for_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = AuditLog::open(&config(&path, false)).unwrap().unwrap();
        // Another server holds the file's lock: the writer waits for it, the caller does not.
        let holder = File::open(&path).unwrap();
        let held = Exclusive::lock(&holder).unwrap();
        audit.append(&Line("queued"));
        let flushed = tokio::time::timeout(Duration::from_millis(300), audit.flush()).await;
        assert!(flushed.is_err(), "the line waits for the lock");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        drop(held);
        audit.flush().await;
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"line\":\"queued\",\"code\":false}\n");
    }

    #[tokio::test]
    async fn reopening_follows_the_path_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = AuditLog::open(&config(&path, false)).unwrap().unwrap();
        let rotated = dir.path().join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).unwrap();
        audit.append(&Line("before"));
        audit.reopen();
        audit.append(&Line("after"));
        audit.flush().await;
        assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "{\"line\":\"before\",\"code\":false}\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"line\":\"after\",\"code\":false}\n");
    }
}
