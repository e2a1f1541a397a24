//! Scratch directories on the host (`none`, `landlock`, `seatbelt`): one per server in the temp directory,
//! one per run inside it, and each this user's alone, so that no other user can read a live run's files.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::common::*;

#[apply(integration_test!)]
async fn scratch_directories_are_open_to_their_user_only() {
    if sandbox_under_test() == "docker" {
        return skip("docker keeps a run's scratch in its container, not on the host");
    }
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    let keys = format!("  pool_size: 1\n{}", host_scratch_keys());
    let ptc = Ptc::start_with_env(&config(&[], &keys), &[("TMPDIR", &tmp_path)]).await;
    let run = ptc.execute("open('notes.txt', 'w').write('a secret')\nprint('written')").await;
    if run.is_error() && sandbox_unusable(&run.text()).is_none() {
        return;
    }
    run.expect_ok();
    // The pool's next runner waits in a directory of its own.
    assert!(eventually(Duration::from_secs(30), || !scratch_dirs_under(tmp.path()).is_empty()).await);
    let servers: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().path()).collect();
    let mode = |path: &Path| format!("{:o}", std::fs::metadata(path).unwrap().mode() & 0o777);
    for dir in servers.iter().chain(&scratch_dirs_under(tmp.path())) {
        assert_eq!(mode(dir), "700", "{}", dir.display());
    }
}
