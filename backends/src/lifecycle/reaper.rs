//! The reaper: a small process (`ptc-mcp __reaper`) that the server starts on systems without a
//! parent-death signal. The server writes one line per change, `+<pgid>` for a group to kill should the
//! server die and `-<pgid>` for a group it has ended itself; when the pipe closes — the server exited or was
//! killed — the reaper kills every group still listed, then exits. It ignores the signals a terminal sends,
//! so that it outlives the server it watches.

use std::collections::BTreeSet;
use std::io::BufRead;

/// The hidden subcommand of the `ptc-mcp` binary that runs the reaper.
pub const REAPER_SUBCOMMAND: &str = "__reaper";
pub(super) const WATCH: u8 = b'+';
pub(super) const FORGET: u8 = b'-';

/// Runs the reaper on stdin and exits; never returns.
pub fn main() -> ! {
    for signal in [libc::SIGINT, libc::SIGHUP, libc::SIGTERM, libc::SIGQUIT, libc::SIGPIPE] {
        // SAFETY: setting a signal's disposition to ignore, in a single-threaded process.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let groups = listed_groups(std::io::stdin().lock());
    for pgid in groups {
        super::signal_group(pgid, libc::SIGKILL);
    }
    std::process::exit(0)
}

/// The groups still listed when `commands` ends (a read error counts as the end). Lines that are not a
/// command are ignored; so is a group id below 2 (never a runner's: 0 and 1 would name other groups).
fn listed_groups(commands: impl BufRead) -> BTreeSet<libc::pid_t> {
    let mut groups = BTreeSet::new();
    for line in commands.split(b'\n') {
        let Ok(line) = line else { break };
        let Some((&verb, pgid)) = line.split_first() else { continue };
        let Some(pgid) = std::str::from_utf8(pgid).ok().and_then(|p| p.parse::<libc::pid_t>().ok()) else { continue };
        if pgid < 2 {
            continue;
        }
        match verb {
            WATCH => groups.insert(pgid),
            FORGET => groups.remove(&pgid),
            _ => false,
        };
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_left_are_those_watched_and_not_forgotten() {
        let commands: &[u8] = b"+100\n+200\n-100\n+300\ngarbage\n+1\n+0\n+-5\n-999\n+400";
        assert_eq!(listed_groups(commands), BTreeSet::from([200, 300, 400]));
    }
}
