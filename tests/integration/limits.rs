//! Limits the server enforces itself where no kernel does: the size of a scratch directory that is no
//! size-limited tmpfs (`none`, `seatbelt`, `landlock` without namespaces) is measured while the run goes on,
//! and a run past `execution.limits.scratch_mb` is ended with words that name the limit. (A run's memory on
//! macOS is watched the same way; its unit test is in backends/src/watch.rs.)

use crate::common::*;

#[apply(integration_test!)]
async fn a_program_that_fills_scratch_past_its_limit_is_ended_and_told_which_limit() {
    let ptc = Ptc::start(&config(&[], "  limits:\n    scratch_mb: 16\n")).await;
    let Some(()) = require_backend(&ptc).await else { return };
    let code = "\
try:
    for i in range(64):
        with open(f'fill-{i}', 'wb') as f:
            f.write(b'x' * (1 << 20))
except OSError as e:
    print(f'refused by the file system: {e.strerror}')
else:
    import time
    time.sleep(10)  # the server looks every quarter second: what a run holds, not a burst, is bounded
    print('wrote 64 MiB and kept it')
";
    let run = ptc.execute(code).await;
    let text = run.text();
    // A tmpfs of the run's size (landlock with namespaces, docker) refuses the write itself.
    let tmpfs = sandbox_under_test() == "docker" || (sandbox_under_test() == "landlock" && !landlock_degraded());
    if tmpfs {
        assert!(text.contains("refused by the file system"), "{text}");
    } else {
        assert!(run.is_error(), "{text}");
        assert!(
            text.contains("its scratch directory grew past 16 MiB, the limit execution.limits.scratch_mb sets"),
            "{text}"
        );
    }
    assert_eq!(ptc.execute("print('still here')").await.expect_ok(), "[Script executed successfully]\nstill here");
}

/// Whether `--check-sandbox landlock` reports the degraded mode here.
fn landlock_degraded() -> bool {
    let output = std::process::Command::new(binary()).args(["--check-sandbox", "landlock"]).output().unwrap();
    String::from_utf8_lossy(&output.stdout).lines().next().unwrap_or_default().contains("degraded")
}
