//! What each sandbox (and each mode of `landlock`) guarantees, in one table: the README shows it (a test keeps
//! the two identical) and `--check-sandbox` prints the column of the mode it finds. Each line is what the escape
//! suite (`tests/integration/escape.rs`) checks in that mode; `seatbelt` only runs on macOS, outside this CI.

use crate::{Availability, SandboxKind};

/// A sandbox as far as its guarantees go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `landlock` with user, mount, pid, network, IPC and UTS namespaces.
    Landlock,
    /// `landlock` without user namespaces (`execution.allow_degraded`).
    LandlockDegraded,
    Docker,
    Seatbelt,
    None,
}

const MODES: [(Mode, &str); 5] = [
    (Mode::Landlock, "`landlock`"),
    (Mode::LandlockDegraded, "`landlock` degraded"),
    (Mode::Docker, "`docker`"),
    (Mode::Seatbelt, "`seatbelt`"),
    (Mode::None, "`none`"),
];

/// One guarantee, in the order of [`MODES`]; **bold** marks what a program can do.
struct Row {
    property: &'static str,
    cells: [&'static str; 5],
}

const ROWS: &[Row] = &[
    Row {
        property: "kernel it talks to",
        cells: [
            "the host's, through the seccomp deny list",
            "the host's, through the seccomp deny list",
            "the host's, through Docker's seccomp profile and the same deny list; with `docker.runtime: runsc`, \
             gVisor's user-space kernel, which alone (itself under seccomp) talks to the host's",
            "the host's, through the seatbelt profile",
            "**the host's, all of it**",
        ],
    },
    Row {
        property: "runs as",
        cells: [
            "uid 1000 (`ptc`) in its namespaces; outside, the server's uid (a root server's: 65534)",
            "the server's user",
            "uid 65534 (`ptc`) in the container",
            "the server's user",
            "the server's user",
        ],
    },
    Row {
        property: "network",
        cells: [
            "none: no socket but an AF_UNIX pair, no call that names an address",
            "none: no socket but an AF_UNIX pair, no call that names an address",
            "none (network `none`, and the same seccomp list)",
            "none",
            "**all your user has**",
        ],
    },
    Row {
        property: "new processes",
        cells: [
            "none: threads only, no exec after start",
            "none: threads only, no exec after start",
            "none: threads only, no exec",
            "none: no fork; **the interpreter may exec itself** (the same process and sandbox)",
            "**allowed**; killed with the run",
        ],
    },
    Row {
        property: "files it reads",
        cells: [
            "the interpreter and its standard library, system libraries, time zones, its own user database, \
             `/dev/null`, `/dev/zero`, `/dev/urandom`, scratch",
            "the same host paths (Landlock)",
            "the image's files (its `/etc` hidden), scratch",
            "the interpreter, its prefix (only its standard library if shared), the libraries it loads, system \
             libraries, time zones, devices, the names in `/`, scratch",
            "**all your user can**",
        ],
    },
    Row {
        property: "files it writes",
        cells: [
            "scratch only",
            "scratch only",
            "scratch only",
            "scratch only (no hard links or clones into it)",
            "**all your user can**",
        ],
    },
    Row {
        property: "whether a host file exists",
        cells: [
            "hidden: a minimal root",
            "**can be probed** (`stat`)",
            "hidden: the image's files only",
            "hidden outside the paths above, their parents and the root's links (`/etc`, `/tmp`, `/var`)",
            "**visible**",
        ],
    },
    Row {
        property: "modes, owners, times, xattrs",
        cells: [
            "changeable in scratch only (all else is mounted read-only)",
            "**unchangeable, in scratch too** (`shutil.copy` fails, `copyfile` works)",
            "changeable in scratch only",
            "changeable in scratch only (no file flags)",
            "**all your user owns**",
        ],
    },
    Row {
        property: "other processes",
        cells: [
            "invisible (pid namespace); signals, ptrace, rlimits, priorities only at itself",
            "signals, ptrace, rlimits, priorities only at itself; **their pids can be probed**",
            "invisible (the container holds the runner only)",
            "signals and process information only at itself; no process list",
            "**your user's, all of them**",
        ],
    },
    Row {
        property: "shared memory, IPC, file watches",
        cells: [
            "none: no SysV IPC, POSIX queues, memfds, shared anonymous memory, inotify, fanotify",
            "none: no SysV IPC, POSIX queues, memfds, shared anonymous memory, inotify, fanotify",
            "none: no SysV IPC, POSIX queues, memfds, inotify, fanotify (the cgroup counts shared memory)",
            "none: no POSIX or SysV IPC, no Mach services, no IOKit properties or NVRAM",
            "**allowed**",
        ],
    },
    Row {
        property: "tasks (threads and processes)",
        cells: [
            "`limits.tasks` (RLIMIT_NPROC in the run's user namespace; also `pids.max` where delegated)",
            "`limits.tasks` more than the user runs (RLIMIT_NPROC, shared with its processes); **root: not \
             bounded**",
            "`docker.pids` (default `limits.tasks`; under runsc, RLIMIT_NPROC in gVisor's kernel)",
            "**not bounded** (threads only)",
            "as degraded `landlock`, or `pids.max` where delegated",
        ],
    },
    Row {
        property: "memory",
        cells: [
            "`memory_mb` in use: `memory.max` where delegated, else RLIMIT_DATA and RLIMIT_AS with room for stacks",
            "`memory_mb` in use: `memory.max` where delegated, else RLIMIT_DATA and RLIMIT_AS with room for stacks",
            "the container's cgroup: `memory_mb` + scratch, no swap",
            "`memory_mb` of footprint, watched by the server (macOS enforces no memory rlimit)",
            "RLIMIT_DATA and RLIMIT_AS (**shared memory up to the address space**); macOS: as `seatbelt`",
        ],
    },
    Row {
        property: "scratch size",
        cells: [
            "`scratch_mb` (a tmpfs)",
            "`scratch_mb`, measured by the server",
            "`scratch_mb` (a tmpfs)",
            "`scratch_mb`, measured by the server",
            "`scratch_mb`, measured by the server",
        ],
    },
    Row {
        property: "end of the run",
        cells: [
            "killed at `timeout_seconds` with its process group and cgroup; dies with the server",
            "killed at `timeout_seconds` with its process group and cgroup; dies with the server",
            "the container is removed; it ends with the server's channel",
            "killed at `timeout_seconds` with its process group; dies with the server (a reaper process)",
            "killed with its process group, and its cgroup where there is one (new sessions too); dies with the \
             server",
        ],
    },
];

/// The table in Markdown, as the README shows it.
pub fn markdown() -> String {
    let mut out = String::from("| |");
    for (_, name) in MODES {
        out.push_str(&format!(" {name} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(MODES.len()));
    for row in ROWS {
        out.push_str(&format!("\n| {} |", row.property));
        for cell in row.cells {
            out.push_str(&format!(" {cell} |"));
        }
    }
    out.push('\n');
    out
}

/// The guarantees of one mode, as `property: guarantee` lines (Markdown bold dropped).
pub fn lines(mode: Mode) -> Vec<String> {
    let column = MODES.iter().position(|(m, _)| *m == mode).unwrap_or(0);
    ROWS.iter().map(|row| format!("{}: {}", row.property, row.cells[column].replace("**", ""))).collect()
}

/// The name of a mode's column.
pub fn name(mode: Mode) -> &'static str {
    MODES.iter().find(|(m, _)| *m == mode).map_or("", |(_, name)| name)
}

/// The mode a probed backend runs in; `None` for an unusable one (unless it is only refused for running
/// degraded: then its degraded mode).
pub fn mode_of(kind: SandboxKind, availability: &Availability) -> Option<Mode> {
    let kind = kind.resolve_auto();
    let degraded = match availability {
        Availability::Available { .. } => false,
        Availability::Degraded { .. } => true,
        Availability::Unavailable { reason } if kind == SandboxKind::Landlock && reason.contains("degraded") => true,
        Availability::Unavailable { .. } => return None,
    };
    match kind {
        SandboxKind::Landlock if degraded => Some(Mode::LandlockDegraded),
        SandboxKind::Landlock => Some(Mode::Landlock),
        SandboxKind::Docker => Some(Mode::Docker),
        SandboxKind::Seatbelt => Some(Mode::Seatbelt),
        SandboxKind::None => Some(Mode::None),
        // Not in the table: no cluster runs the escape suite here (README "The kubernetes sandbox").
        SandboxKind::Kubernetes | SandboxKind::Auto => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = include_str!("../../README.md");
    const START: &str = "<!-- guarantees: generated from backends/src/guarantees.rs -->\n";
    const END: &str = "<!-- end of guarantees -->";

    /// The README's table is this one. `PTC_UPDATE_README=1 cargo test -p ptc-backends guarantees` rewrites it.
    #[test]
    fn the_readme_shows_this_table() {
        let (before, rest) = README.split_once(START).expect("the README marks the guarantees table");
        let (shown, after) = rest.split_once(END).expect("the README marks the end of the guarantees table");
        let table = markdown();
        if shown != table && std::env::var_os("PTC_UPDATE_README").is_some() {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
            std::fs::write(path, format!("{before}{START}{table}{END}{after}")).unwrap();
            return;
        }
        assert_eq!(shown, table, "README.md's guarantees table differs (PTC_UPDATE_README=1 to rewrite it)");
    }

    #[test]
    fn every_mode_has_a_guarantee_in_every_row_and_a_refused_degraded_landlock_is_degraded() {
        assert!(ROWS.iter().all(|row| row.cells.iter().all(|cell| !cell.is_empty())));
        assert_eq!(lines(Mode::LandlockDegraded).len(), ROWS.len());
        let refused = Availability::Unavailable { reason: "only its degraded mode works here".into() };
        assert_eq!(mode_of(SandboxKind::Landlock, &refused), Some(Mode::LandlockDegraded));
        let broken = Availability::Unavailable { reason: "needs Linux".into() };
        assert_eq!(mode_of(SandboxKind::Landlock, &broken), None);
        let available = Availability::Available { detail: String::new() };
        assert_eq!(mode_of(SandboxKind::Landlock, &available), Some(Mode::Landlock));
        assert!(!lines(Mode::Landlock).iter().any(|l| l.contains("degraded")), "the probe's marker word");
    }
}
