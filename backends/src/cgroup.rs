//! A cgroup (v2) per run, where the server may create one: every process the run starts is in it, whatever
//! session or process group it moves to, so `cgroup.kill` ends them all; and where the server's cgroup delegates
//! the `pids` and `memory` controllers, the run's tasks and memory are bounded there (`pids.max`, `memory.max`,
//! no swap), counting what the run uses rather than what it reserves.
//!
//! The run's cgroups are children of the server's own cgroup, named `ptc-<server pid>-<n>`; those of a server
//! that died without removing them are killed and removed by the next server. Finding the place is plain code over
//! `/proc/self/mountinfo` and `/proc/self/cgroup` (tested everywhere); the rest needs Linux and permission to
//! write there (root, or a delegated subtree).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Limits;

/// Where this server makes the cgroups of its runs, and what they can bound.
#[derive(Debug)]
pub struct CgroupParent {
    dir: PathBuf,
    pids: bool,
    memory: bool,
}

/// Why runs get no cgroup of their own.
#[derive(Debug, thiserror::Error)]
pub enum NoCgroup {
    #[error("{path}: {source}")]
    Unreadable {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted")]
    NoHierarchy,
    #[error("cannot create cgroups in {}: {source}", dir.display())]
    NotPermitted {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The server's cgroup, looked for once.
pub fn parent() -> Result<&'static CgroupParent, &'static NoCgroup> {
    static PARENT: OnceLock<Result<CgroupParent, NoCgroup>> = OnceLock::new();
    PARENT.get_or_init(CgroupParent::find).as_ref()
}

/// A cgroup for one run, if this server can make one (a failure to make it is logged: the run goes on with
/// its rlimits).
pub fn for_run(limits: &Limits, memory_bytes: u64) -> Option<RunCgroup> {
    let parent = parent().ok()?;
    parent.create(limits, memory_bytes).map_err(|e| tracing::warn!("no cgroup for this run: {e}")).ok()
}

/// Whether a run's cgroup here would bound its tasks or memory (not only serve to kill it whole).
pub fn would_bound() -> bool {
    parent().is_ok_and(|parent| parent.pids || parent.memory)
}

/// One line for `--check-sandbox`: what a run's cgroup does here, or why there is none.
pub fn describe() -> String {
    match parent() {
        Ok(parent) => parent.describe(),
        Err(why) => format!("no cgroup per run ({why})"),
    }
}

impl CgroupParent {
    fn find() -> Result<CgroupParent, NoCgroup> {
        let read = |path| std::fs::read_to_string(path).map_err(|source| NoCgroup::Unreadable { path, source });
        let (mountinfo, cgroup) = (read("/proc/self/mountinfo")?, read("/proc/self/cgroup")?);
        let dir = own_cgroup_dir(&mountinfo, &cgroup).ok_or(NoCgroup::NoHierarchy)?;
        // May we make children here? (Root, or a subtree delegated to our user.)
        let probe = dir.join(format!("ptc-{}-probe", std::process::id()));
        if let Err(source) = std::fs::create_dir(&probe).and_then(|()| std::fs::remove_dir(&probe)) {
            return Err(NoCgroup::NotPermitted { dir, source });
        }
        remove_leftovers(&dir);
        let mut parent = CgroupParent { dir, pids: false, memory: false };
        for controller in ["pids", "memory"] {
            // Enabling a controller for children fails (EBUSY) where the cgroup holds processes and is not the
            // root: then the runs' cgroups kill, but do not bound.
            if !parent.delegates(controller) {
                let _ = write_file(&parent.dir.join("cgroup.subtree_control"), &format!("+{controller}"));
            }
        }
        parent.pids = parent.delegates("pids");
        parent.memory = parent.delegates("memory");
        Ok(parent)
    }

    fn delegates(&self, controller: &str) -> bool {
        std::fs::read_to_string(self.dir.join("cgroup.subtree_control"))
            .is_ok_and(|text| text.split_whitespace().any(|c| c == controller))
    }

    fn describe(&self) -> String {
        let bounds = match (self.pids, self.memory) {
            (true, true) => "bounding tasks (pids.max) and memory (memory.max, no swap)",
            (true, false) => "bounding tasks (pids.max; no memory controller delegated)",
            (false, true) => "bounding memory (memory.max, no swap; no pids controller delegated)",
            (false, false) => "for killing only (no pids or memory controller delegated)",
        };
        format!("a cgroup per run under {}, {bounds}", self.dir.display())
    }

    /// A new cgroup for one run: `tasks` tasks and `memory_bytes` of memory where those controllers are
    /// delegated.
    pub fn create(&self, limits: &Limits, memory_bytes: u64) -> std::io::Result<RunCgroup> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("ptc-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = self.dir.join(name);
        std::fs::create_dir(&dir)?;
        let cgroup = RunCgroup { dir, bounds_tasks: self.pids, bounds_memory: self.memory };
        if self.pids {
            write_file(&cgroup.dir.join("pids.max"), &limits.tasks.to_string())?;
        }
        if self.memory {
            write_file(&cgroup.dir.join("memory.max"), &memory_bytes.to_string())?;
            // Absent without swap accounting: then there is no swap to use.
            let swap = cgroup.dir.join("memory.swap.max");
            if swap.exists() {
                write_file(&swap, "0")?;
            }
        }
        Ok(cgroup)
    }
}

/// The cgroup of one run. Dropping it kills what is left in it and removes it.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    pub bounds_tasks: bool,
    pub bounds_memory: bool,
}

impl RunCgroup {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a process writes `0` to, to move itself in.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Kills every process in the cgroup (`cgroup.kill`, Linux 5.14+; before that, each listed process).
    pub fn kill(&self) {
        if write_file(&self.dir.join("cgroup.kill"), "1").is_ok() {
            return;
        }
        for pid in self.pids() {
            // SAFETY: plain syscall; a process that is gone yields ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    fn pids(&self) -> Vec<libc::pid_t> {
        let procs = std::fs::read_to_string(self.procs()).unwrap_or_default();
        procs.lines().filter_map(|l| l.trim().parse().ok()).collect()
    }

    /// Whether no process is left in it.
    pub fn is_empty(&self) -> bool {
        match std::fs::read_to_string(self.dir.join("cgroup.events")) {
            Ok(events) => events.lines().any(|l| l == "populated 0"),
            Err(_) => self.pids().is_empty(),
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.kill();
        if std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        // Killed processes leave the cgroup a moment later: remove it once they have (bounded).
        let dir = std::mem::take(&mut self.dir);
        let _ = std::thread::Builder::new().name("ptc-cgroup-cleanup".into()).spawn(move || {
            for _ in 0..200 {
                std::thread::sleep(Duration::from_millis(25));
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    return;
                }
            }
            tracing::warn!("could not remove the run's cgroup {}", dir.display());
        });
    }
}

fn write_file(path: &Path, text: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path)?.write_all(text.as_bytes())
}

/// Removes the run cgroups of servers that are gone, killing what is left in them: a server killed outright
/// (SIGKILL) cannot, and a process of its runs that left their process group (under `none`) outlives it until
/// the next server starts.
fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(server) = name.to_str().and_then(|n| n.strip_prefix("ptc-")).and_then(|n| n.split('-').next()) else {
            continue;
        };
        if server.parse::<u32>().is_ok() && !is_alive(server) {
            drop(RunCgroup { dir: entry.path(), bounds_tasks: false, bounds_memory: false });
        }
    }
}

/// Whether process `pid` exists and has not exited (a zombie has: its parent has yet to reap it).
fn is_alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat")).unwrap_or_default();
    stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z'))
}

/// The directory of this process's cgroup in the cgroup v2 hierarchy, from `/proc/self/mountinfo` and
/// `/proc/self/cgroup`; `None` without a cgroup2 mount.
fn own_cgroup_dir(mountinfo: &str, cgroup: &str) -> Option<PathBuf> {
    let own = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if fs.split_whitespace().next() != Some("cgroup2") {
            return None;
        }
        let fields: Vec<&str> = mount.split_whitespace().collect();
        let (root, point) = (unescape(fields.get(3)?), unescape(fields.get(4)?));
        // The mount shows the hierarchy from `root`: our cgroup is below it (a cgroup namespace shows it as /).
        let relative = Path::new(own).strip_prefix(&root).or_else(|_| Path::new(own).strip_prefix("/")).ok()?;
        Some(Path::new(&point).join(relative))
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn the_own_cgroup_is_found_in_the_v2_hierarchy() {
        let cgroup = "8:pids:/\n4:memory:/process_api/x\n0::/system.slice/ptc.service\n";
        assert_eq!(
            own_cgroup_dir(HYBRID, cgroup),
            Some(PathBuf::from("/sys/fs/cgroup/unified/system.slice/ptc.service"))
        );
        let unified = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(own_cgroup_dir(unified, "0::/\n"), Some(PathBuf::from("/sys/fs/cgroup")));
        // A mount of a subtree (a container's cgroup namespace, seen from outside).
        let subtree = "29 23 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(own_cgroup_dir(subtree, "0::/docker/abc/run\n"), Some(PathBuf::from("/sys/fs/cgroup/run")));
        assert_eq!(own_cgroup_dir(HYBRID.lines().next().unwrap(), cgroup), None, "no cgroup2 mount");
        assert_eq!(own_cgroup_dir(HYBRID, "4:memory:/x\n"), None, "no v2 membership");
    }

    #[test]
    fn why_there_is_no_cgroup_names_the_place_and_the_cause() {
        let denied = NoCgroup::NotPermitted {
            dir: PathBuf::from("/sys/fs/cgroup/unified/"),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(
            denied.to_string(),
            "cannot create cgroups in /sys/fs/cgroup/unified/: Permission denied (os error 13)"
        );
        let unreadable =
            NoCgroup::Unreadable { path: "/proc/self/cgroup", source: std::io::Error::from_raw_os_error(libc::ENOENT) };
        assert_eq!(unreadable.to_string(), "/proc/self/cgroup: No such file or directory (os error 2)");
        assert_eq!(NoCgroup::NoHierarchy.to_string(), "no cgroup v2 hierarchy is mounted");
        // The cause stays an error of its own, not only words.
        let source = std::error::Error::source(&denied).and_then(|e| e.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(std::io::Error::kind), Some(std::io::ErrorKind::PermissionDenied));
    }

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape("/mnt/with\\040space"), "/mnt/with space");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\04"), "/trailing\\04");
    }
}
