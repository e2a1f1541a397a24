//! The scratch directories of runs on this host: all of one server's inside a directory of its own in the
//! system's temp directory, locked by the server for its life. A server that is killed cannot remove its runs'
//! directories (and a program may have filled one), so each server, when it starts its first run, removes
//! the directories of servers that are gone: those whose lock nobody holds.
//!
//! Every directory is created 0700: under `none` the runner writes in it as this user, and nobody else may
//! read a run's files. The temp directory is shared with other users, so the sweep opens nothing but a
//! directory or regular file of this user's, never through a symlink and never waiting (a FIFO planted as a
//! lock would otherwise hold it for good).

use std::ffi::CStr;
use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;

use tempfile::TempDir;

/// How a server's directory is named in the temp directory (then random characters).
const SERVER_DIR_PREFIX: &str = "ptc-mcp-";
/// The file in a server's directory that the server keeps locked.
const LOCK_FILE: &str = "lock";

/// This server's directory, and its lock (held while the file is open).
struct ServerDir {
    dir: TempDir,
    _lock: File,
}

static SERVER_DIR: Mutex<Option<ServerDir>> = Mutex::new(None);

/// A fresh scratch directory for one run, removed when dropped.
pub(crate) fn run_dir() -> io::Result<TempDir> {
    let mut server = SERVER_DIR.lock().unwrap_or_else(|e| e.into_inner());
    let server = match &mut *server {
        Some(server) => server,
        unset => {
            let created = ServerDir::create()?;
            let own = created.dir.path().to_path_buf();
            // Leftovers may be many and large: never hold up the run for them.
            let swept = std::thread::Builder::new()
                .name("ptc-sweep".into())
                .spawn(move || sweep(own.parent().unwrap_or(Path::new("/")), &own));
            if let Err(e) = swept {
                tracing::debug!("cannot start the sweep of scratch directories left by killed servers: {e}");
            }
            unset.insert(created)
        }
    };
    tempfile::Builder::new().prefix("ptc-run-").permissions(owner_only()).tempdir_in(server.dir.path())
}

fn owner_only() -> Permissions {
    Permissions::from_mode(0o700)
}

/// The path a run's scratch directory would have, with placeholders where a real one has random characters
/// (for showing a sandbox's rules without starting a server).
pub(crate) fn example_run_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{SERVER_DIR_PREFIX}XXXXXX")).join("ptc-run-XXXXXX")
}

/// Removes this server's directory with what is left in it (at shutdown, once its runs are over).
pub(crate) fn release() {
    SERVER_DIR.lock().unwrap_or_else(|e| e.into_inner()).take();
}

impl ServerDir {
    fn create() -> io::Result<ServerDir> {
        let dir = tempfile::Builder::new().prefix(SERVER_DIR_PREFIX).permissions(owner_only()).tempdir()?;
        // Locked under another name first: a sweep never finds the lock file free while the server starts.
        // std opens files close-on-exec: no runner inherits the lock and keeps it past the server.
        let unnamed = dir.path().join(".lock");
        let lock = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&unnamed)?;
        if !try_lock(&lock)? {
            return Err(io::Error::other("the new scratch directory's lock is held by someone else"));
        }
        std::fs::rename(unnamed, dir.path().join(LOCK_FILE))?;
        Ok(ServerDir { dir, _lock: lock })
    }
}

/// Removes, in `temp`, the server directories of this user whose lock is free (their server is gone), but
/// never `own`.
fn sweep(temp: &Path, own: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        // (Only a server's name is looked at further: the temp directory may hold many thousands of entries.)
        let a_servers = entry.file_name().to_str().is_some_and(|name| name.starts_with(SERVER_DIR_PREFIX));
        if !a_servers || path == own {
            continue;
        }
        // This user's directory, and in it this user's lock file. (In a sticky temp directory nobody else can
        // swap the directory meanwhile.) A directory without its lock is a server that is starting: left alone.
        let Some(dir) = open_own(libc::AT_FDCWD, path.as_os_str().as_bytes(), Kind::Directory) else { continue };
        let Some(lock) = open_own(dir.as_raw_fd(), LOCK_FILE.as_bytes(), Kind::File) else { continue };
        if try_lock(&lock).unwrap_or(false) {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => tracing::info!(dir = %path.display(), "removed the scratch of a server that is gone"),
                Err(e) => tracing::debug!(dir = %path.display(), "cannot remove a gone server's scratch: {e}"),
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Directory,
    File,
}

/// Opens `name` (relative to the directory `at`, or a path with `AT_FDCWD`) for reading if it is a `kind`
/// owned by this user: never through a symlink, and without waiting (a FIFO opens at once, then is refused).
fn open_own(at: RawFd, name: &[u8], kind: Kind) -> Option<File> {
    let mut name = name.to_vec();
    name.push(0);
    let name = CStr::from_bytes_with_nul(&name).ok()?;
    let directory = if kind == Kind::Directory { libc::O_DIRECTORY } else { 0 };
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | directory;
    // SAFETY: openat with a NUL-terminated name and a directory fd the caller keeps open (or AT_FDCWD).
    let fd = unsafe { libc::openat(at, name.as_ptr(), flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh fd that nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    let metadata = file.metadata().ok()?;
    let right_kind = match kind {
        Kind::Directory => metadata.is_dir(),
        Kind::File => metadata.is_file(),
    };
    // SAFETY: geteuid has no preconditions.
    (right_kind && metadata.uid() == unsafe { libc::geteuid() }).then_some(file)
}

/// Takes an exclusive lock on `file` without waiting: false when someone else holds one.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on an fd this function borrows; it only changes the lock on the open file.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.kind() == io::ErrorKind::WouldBlock { Ok(false) } else { Err(error) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_removes_the_directories_of_gone_servers_only() {
        let temp = tempfile::tempdir().unwrap();
        let server = |name: &str, held: bool| {
            let dir = temp.path().join(name);
            std::fs::create_dir_all(dir.join("ptc-run-x")).unwrap();
            std::fs::write(dir.join("ptc-run-x/left"), "x").unwrap();
            let lock = File::create(dir.join(LOCK_FILE)).unwrap();
            assert!(try_lock(&lock).unwrap());
            (dir, held.then_some(lock))
        };
        let (gone, _) = server("ptc-mcp-gone", false);
        let (alive, _held) = server("ptc-mcp-alive", true);
        let (own, _own_lock) = server("ptc-mcp-own", false);
        let starting = temp.path().join("ptc-mcp-starting");
        std::fs::create_dir(&starting).unwrap();
        let other = temp.path().join("ptc-run-unrelated");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join(LOCK_FILE), "").unwrap();

        sweep(temp.path(), &own);
        assert!(!gone.exists(), "a directory whose lock nobody holds is removed");
        assert!(alive.join("ptc-run-x/left").exists(), "a live server's directory is kept");
        assert!(own.join("ptc-run-x/left").exists(), "the sweeping server's own directory is kept");
        assert!(starting.exists() && other.exists(), "directories without a lock, or not a server's, are kept");
    }

    #[test]
    fn the_sweep_never_waits_on_a_fifo_and_opens_no_lock_that_is_not_a_plain_file() {
        let temp = tempfile::tempdir().unwrap();
        let fifo = temp.path().join("ptc-mcp-fifo");
        std::fs::create_dir(&fifo).unwrap();
        let name = std::ffi::CString::new(fifo.join(LOCK_FILE).as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        // A lock that leads elsewhere, to a file nobody holds, is not the directory's lock.
        let linked = temp.path().join("ptc-mcp-linked");
        std::fs::create_dir(&linked).unwrap();
        std::fs::write(temp.path().join("free"), "").unwrap();
        std::os::unix::fs::symlink(temp.path().join("free"), linked.join(LOCK_FILE)).unwrap();

        let (done, swept) = std::sync::mpsc::channel();
        let dir = temp.path().to_path_buf();
        std::thread::spawn(move || {
            sweep(&dir, Path::new("/nonexistent"));
            let _ = done.send(());
        });
        assert!(swept.recv_timeout(std::time::Duration::from_secs(10)).is_ok(), "the sweep is stuck on the FIFO");
        assert!(fifo.exists() && linked.exists(), "neither is a gone server's directory");
    }

    #[test]
    fn runs_get_their_directories_inside_the_servers_own() {
        let first = run_dir().unwrap();
        let second = run_dir().unwrap();
        let parent = first.path().parent().unwrap();
        assert_eq!(second.path().parent().unwrap(), parent);
        assert!(parent.file_name().unwrap().to_str().unwrap().starts_with(SERVER_DIR_PREFIX));
        let lock = File::open(parent.join(LOCK_FILE)).unwrap();
        assert!(!try_lock(&lock).unwrap(), "the server holds its directory's lock");
        let mode = |path: &Path| format!("{:o}", std::fs::metadata(path).unwrap().mode() & 0o777);
        assert_eq!(
            [mode(parent), mode(first.path()), mode(second.path()), mode(&parent.join(LOCK_FILE))],
            ["700", "700", "700", "600"],
            "nobody else may look inside"
        );
    }
}
