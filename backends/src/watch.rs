//! Limits no kernel enforces for us here, enforced by watching: a runner's memory footprint on macOS (which
//! rejects or ignores memory rlimits) and the size of a scratch directory that is no size-limited tmpfs
//! (macOS, the `none` backend, landlock without namespaces). Past a limit the runner's whole group is killed,
//! and the run's end says which limit it passed and where that limit is set.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::task::JoinHandle;

/// How often the footprint is read: one cheap syscall. A program can allocate a few hundred MiB between two
/// looks; the limit is a bound on what a run keeps, not a hard ceiling.
const MEMORY_INTERVAL: Duration = Duration::from_millis(25);
/// How often the scratch directory is measured (a walk of it, off the runtime's thread).
const SCRATCH_INTERVAL: Duration = Duration::from_millis(250);
/// What an entry of the scratch directory costs at least: a program must not dodge the bound with many
/// empty files (each takes an inode and room in its directory).
const ENTRY_BYTES: u64 = 4096;
/// The deepest directory nesting measured; anything deeper counts as past the limit (paths that long cannot
/// even be named, and the walk holds a directory open per level).
pub(crate) const MAX_DEPTH: usize = 64;

/// What to watch for one runner.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watched {
    /// The footprint limit in bytes, if the kernel does not bound memory.
    pub memory_bytes: Option<u64>,
    /// The scratch directory and its limit in bytes, if nothing else bounds its size.
    pub scratch: Option<(PathBuf, u64)>,
}

impl Watched {
    fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.scratch.is_none()
    }
}

/// The watch of one runner; stopped when dropped.
pub(crate) struct LimitWatch {
    state: Arc<State>,
    task: JoinHandle<()>,
}

struct State {
    /// The group to kill, while its leader is unreaped (`None` after [`LimitWatch::stop`]).
    group: Mutex<Option<libc::pid_t>>,
    /// Which limit the runner passed, once it has.
    passed: OnceLock<String>,
}

impl LimitWatch {
    /// Watches the runner `pid`, leader of its own group; `None` when there is nothing to watch.
    pub(crate) fn start(pid: libc::pid_t, watched: Watched) -> Option<LimitWatch> {
        if watched.is_empty() {
            return None;
        }
        let state = Arc::new(State { group: Mutex::new(Some(pid)), passed: OnceLock::new() });
        let task = tokio::spawn(watch(pid, watched, Arc::clone(&state)));
        Some(LimitWatch { state, task })
    }

    /// Why the runner was killed, if a limit was passed.
    pub(crate) fn passed(&self) -> Option<&str> {
        self.state.passed.get().map(String::as_str)
    }

    /// No kill after this: call it before the leader is reaped (its group's id may then be reused).
    pub(crate) fn stop(&self) {
        self.state.group.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.task.abort();
    }
}

impl Drop for LimitWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn watch(pid: libc::pid_t, watched: Watched, state: Arc<State>) {
    let mut ticks = 0u64;
    let scratch_every = (SCRATCH_INTERVAL.as_millis() / MEMORY_INTERVAL.as_millis()).max(1) as u64;
    loop {
        tokio::time::sleep(MEMORY_INTERVAL).await;
        ticks += 1;
        if let Some(limit) = watched.memory_bytes
            && footprint(pid).is_some_and(|used| used > limit)
        {
            return end(
                &state,
                format!("its memory grew past {} MiB, the limit execution.limits.memory_mb sets", limit >> 20),
            );
        }
        if let Some((dir, limit)) = watched.scratch.clone().filter(|_| ticks.is_multiple_of(scratch_every)) {
            let measured = tokio::task::spawn_blocking(move || scratch_size(&dir, limit)).await;
            if let Ok(Err(past)) = measured {
                let why = match past {
                    PastLimit::Size => format!("its scratch directory grew past {} MiB", limit >> 20),
                    PastLimit::Depth => format!("its scratch directory nests deeper than {MAX_DEPTH} directories"),
                };
                return end(&state, format!("{why}, the limit execution.limits.scratch_mb sets"));
            }
        }
    }
}

fn end(state: &State, why: String) {
    let group = state.group.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pgid) = *group {
        let _ = state.passed.set(why);
        crate::lifecycle::signal_group(pgid, libc::SIGKILL);
    }
}

/// The memory a process uses as its system counts it against it: the physical footprint on macOS (what
/// Activity Monitor shows), the resident set elsewhere. `None` once the process is gone.
pub(crate) fn footprint(pid: libc::pid_t) -> Option<u64> {
    #[cfg(target_os = "macos")]
    {
        // SAFETY: an all-zero rusage_info_v2 is a valid value to be filled in.
        let mut info: libc::rusage_info_v2 = unsafe { std::mem::zeroed() };
        // SAFETY: proc_pid_rusage writes one rusage_info_v2 for the V2 flavor into the buffer it is given.
        let rc = unsafe { libc::proc_pid_rusage(pid, libc::RUSAGE_INFO_V2, (&raw mut info).cast()) };
        (rc == 0).then_some(info.ri_phys_footprint)
    }
    #[cfg(not(target_os = "macos"))]
    {
        let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
        let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        // SAFETY: sysconf with a valid name.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Some(resident_pages.saturating_mul(u64::try_from(page).ok()?))
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PastLimit {
    Size,
    Depth,
}

/// What `dir` holds, in bytes (allocated blocks, each entry at least [`ENTRY_BYTES`]), if within `limit`.
/// The walk never follows a symlink, stops as soon as the limit is passed, and goes by directory fds rather
/// than by path, so that no path is too long to measure.
pub(crate) fn scratch_size(dir: &std::path::Path, limit: u64) -> Result<u64, PastLimit> {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return Ok(0) };
    // SAFETY: open of a NUL-terminated path; the fd is owned by the walk.
    let fd =
        unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(0); // Gone already: the run is over.
    }
    let mut total = 0u64;
    walk(fd, 0, limit, &mut total)?;
    Ok(total)
}

/// Adds what the directory open at `fd` holds to `total`; closes `fd`.
fn walk(fd: libc::c_int, depth: usize, limit: u64, total: &mut u64) -> Result<(), PastLimit> {
    // SAFETY: fdopendir takes over `fd` (closed by closedir below), or fails and leaves it to us.
    let dir = unsafe { libc::fdopendir(fd) };
    if dir.is_null() {
        // SAFETY: `fd` is still ours when fdopendir fails.
        unsafe { libc::close(fd) };
        return Ok(());
    }
    let result = walk_entries(dir, depth, limit, total);
    // SAFETY: `dir` came from fdopendir and is closed once.
    unsafe { libc::closedir(dir) };
    result
}

fn walk_entries(dir: *mut libc::DIR, depth: usize, limit: u64, total: &mut u64) -> Result<(), PastLimit> {
    // SAFETY: `dir` is an open directory stream.
    let dir_fd = unsafe { libc::dirfd(dir) };
    loop {
        // SAFETY: readdir on an open stream; the entry stays valid until the next readdir on it.
        let entry = unsafe { libc::readdir(dir) };
        if entry.is_null() {
            return Ok(());
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()) };
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        // SAFETY: an all-zero stat is a valid value to be filled in.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstatat relative to an open directory, not following symlinks, into a local struct.
        if unsafe { libc::fstatat(dir_fd, name.as_ptr(), &mut stat, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            continue; // Removed meanwhile.
        }
        let allocated = u64::try_from(stat.st_blocks).unwrap_or(0).saturating_mul(512);
        *total = total.saturating_add(allocated.max(ENTRY_BYTES));
        if *total > limit {
            return Err(PastLimit::Size);
        }
        if stat.st_mode & libc::S_IFMT == libc::S_IFDIR {
            if depth + 1 >= MAX_DEPTH {
                return Err(PastLimit::Depth);
            }
            let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
            // SAFETY: openat relative to an open directory; the new fd goes to `walk`, which closes it.
            let child = unsafe { libc::openat(dir_fd, name.as_ptr(), flags) };
            if child >= 0 {
                walk(child, depth + 1, limit, total)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_measured_by_what_it_holds_with_every_entry_counted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data"), vec![1u8; 1 << 20]).unwrap();
        for i in 0..10 {
            std::fs::write(dir.path().join(format!("empty{i}")), "").unwrap();
        }
        std::os::unix::fs::symlink("/", dir.path().join("root")).unwrap();
        let size = scratch_size(dir.path(), u64::MAX).unwrap();
        // 1 MiB of data, 10 empty files and a symlink at the minimum each; the symlink is not followed.
        assert!(((1 << 20) + 11 * ENTRY_BYTES..(1 << 20) + 64 * ENTRY_BYTES).contains(&size), "{size}");
        assert_eq!(scratch_size(dir.path(), 1 << 19), Err(PastLimit::Size));
    }

    #[test]
    fn nesting_past_the_deepest_level_is_past_the_limit_even_where_paths_are_too_long_to_name() {
        let dir = tempfile::tempdir().unwrap();
        // 200 bytes a level: paths past PATH_MAX, which can only be made (and walked) by directory fds.
        let name = "d".repeat(200);
        make_nested(dir.path(), &name, MAX_DEPTH - 1);
        assert!(scratch_size(dir.path(), u64::MAX).is_ok());
        make_nested(dir.path(), &name, MAX_DEPTH + 1);
        assert_eq!(scratch_size(dir.path(), u64::MAX), Err(PastLimit::Depth));
    }

    /// Makes `levels` directories named `name`, one inside the other, below `top`, by fds.
    fn make_nested(top: &std::path::Path, name: &str, levels: usize) {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::CString::new(name).unwrap();
        let top = std::ffi::CString::new(top.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain syscalls on fds this test owns and NUL-terminated names.
        unsafe {
            let mut fd = libc::open(top.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
            for _ in 0..levels {
                libc::mkdirat(fd, name.as_ptr(), 0o700);
                let next = libc::openat(fd, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                libc::close(fd);
                fd = next;
            }
            libc::close(fd);
        }
    }

    #[tokio::test]
    async fn a_process_past_its_memory_limit_is_killed_and_the_reason_kept() {
        let mut child = tokio::process::Command::new("python3")
            .args(["-c", "import time; x = bytearray(200 << 20); time.sleep(30)"])
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pid = child.id().unwrap() as libc::pid_t;
        let watch = LimitWatch::start(pid, Watched { memory_bytes: Some(64 << 20), scratch: None }).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
        assert_eq!(watch.passed(), Some("its memory grew past 64 MiB, the limit execution.limits.memory_mb sets"));
    }

    #[tokio::test]
    async fn a_stopped_watch_kills_nothing() {
        let mut child = tokio::process::Command::new("python3")
            .args(["-c", "import time; x = bytearray(200 << 20); time.sleep(1)"])
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let watch = LimitWatch::start(
            child.id().unwrap() as libc::pid_t,
            Watched { memory_bytes: Some(64 << 20), scratch: None },
        )
        .unwrap();
        watch.stop();
        assert!(child.wait().await.unwrap().success());
        assert_eq!(watch.passed(), None);
    }
}
