//! Why a sandboxed trial run failed, in words that name the fix: `sandbox-exec` reports a profile that does
//! not compile, an operation this macOS does not know, and a nested sandbox only on stderr.

use crate::ExitInfo;

/// The reason the trial interpreter under `sandbox-exec` did not print what it was asked to.
pub fn failure(exit: &ExitInfo, stderr: &str) -> String {
    let said = last_words(stderr);
    if stderr.contains("sandbox_apply: Operation not permitted") {
        return format!(
            "sandbox-exec cannot apply the profile because ptc-mcp itself runs inside another sandbox (macOS does \
             not nest them: {said}); start ptc-mcp outside it (not from a sandboxed app or agent), or set \
             execution.sandbox to docker"
        );
    }
    let lowered = stderr.to_ascii_lowercase();
    if ["unbound variable", "unknown operation", "unknown filter", "unknown modifier"]
        .iter()
        .any(|w| lowered.contains(w))
    {
        return format!(
            "this macOS does not know a rule of the seatbelt profile ({said}); ptc-mcp's profile needs macOS 12 or \
             later: update macOS, or set execution.sandbox to docker (`ptc-mcp sandbox-profile seatbelt` prints the \
             profile)"
        );
    }
    if lowered.contains("sandbox-exec:") {
        return format!(
            "the seatbelt profile did not compile ({said}); this is a bug in ptc-mcp: please report it with the \
             output of `ptc-mcp sandbox-profile seatbelt`"
        );
    }
    let said = if said.is_empty() { "nothing on stderr".to_string() } else { said };
    format!("the interpreter did not start under sandbox-exec ({exit}): {said}")
}

/// The last non-empty line of `stderr`, trimmed.
fn last_words(stderr: &str) -> String {
    stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nested_sandbox_says_where_to_start_ptc_mcp() {
        let why = failure(&ExitInfo::Code(71), "sandbox-exec: sandbox_apply: Operation not permitted\n");
        assert!(why.contains("inside another sandbox") && why.contains("sandbox_apply: Operation not permitted"));
    }

    #[test]
    fn an_unknown_operation_points_at_the_macos_version() {
        let why = failure(&ExitInfo::Code(65), "sandbox-exec: unbound variable: file-map-executable\n");
        assert!(why.contains("does not know a rule") && why.contains("file-map-executable"), "{why}");
    }

    #[test]
    fn another_compile_error_is_reported_as_our_bug_with_the_command_to_show_the_profile() {
        let why = failure(&ExitInfo::Code(65), "sandbox-exec: syntax error at line 3\n");
        assert!(why.contains("did not compile") && why.contains("ptc-mcp sandbox-profile seatbelt"), "{why}");
    }

    #[test]
    fn anything_else_gives_the_exit_and_the_last_line() {
        let why = failure(&ExitInfo::Signal(libc::SIGKILL), "dyld: Library not loaded\nReason: denied\n\n");
        assert_eq!(
            why,
            "the interpreter did not start under sandbox-exec (killed (SIGKILL, often the memory limit)): Reason: denied"
        );
        assert!(failure(&ExitInfo::Code(1), "").ends_with("nothing on stderr"));
    }
}
