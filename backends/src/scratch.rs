//! The scratch directories of runs on this host: all of one server's inside a directory of its own in the
//! system's temp directory, locked by the server for its life. A server that is killed cannot remove its runs'
//! directories (and a program may have filled one), so each server, when it starts its first run, removes
//! the directories of servers that are gone: those whose lock nobody holds.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
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
    tempfile::Builder::new().prefix("ptc-run-").tempdir_in(server.dir.path())
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
        let dir = tempfile::Builder::new().prefix(SERVER_DIR_PREFIX).tempdir()?;
        // Locked under another name first: a sweep never finds the lock file free while the server starts.
        // std opens files close-on-exec: no runner inherits the lock and keeps it past the server.
        let unnamed = dir.path().join(".lock");
        let lock = File::create(&unnamed)?;
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
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let path = entry.path();
        let a_servers = entry.file_name().to_str().is_some_and(|name| name.starts_with(SERVER_DIR_PREFIX));
        // Not a symlink, and this user's: in a sticky temp directory nobody else can swap it meanwhile. (Looked
        // at only for a server's name: the temp directory may hold many thousands of other entries.)
        let mine = || std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.uid() == me);
        if !a_servers || path == own || !mine() {
            continue;
        }
        // A directory without its lock is a server that is starting: left alone.
        let Ok(lock) = File::open(path.join(LOCK_FILE)) else { continue };
        if try_lock(&lock).unwrap_or(false) {
            match std::fs::remove_dir_all(&path) {
                Ok(()) => tracing::info!(dir = %path.display(), "removed the scratch of a server that is gone"),
                Err(e) => tracing::debug!(dir = %path.display(), "cannot remove a gone server's scratch: {e}"),
            }
        }
    }
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
    fn runs_get_their_directories_inside_the_servers_own() {
        let first = run_dir().unwrap();
        let second = run_dir().unwrap();
        let parent = first.path().parent().unwrap();
        assert_eq!(second.path().parent().unwrap(), parent);
        assert!(parent.file_name().unwrap().to_str().unwrap().starts_with(SERVER_DIR_PREFIX));
        let lock = File::open(parent.join(LOCK_FILE)).unwrap();
        assert!(!try_lock(&lock).unwrap(), "the server holds its directory's lock");
    }
}
