//! The pool of ready runners: every run still gets a fresh interpreter, nothing passes between runs, and no
//! runner or scratch directory outlives its run or the server.

use std::path::Path;
use std::time::Duration;

use crate::common::*;

/// Processes whose `HOME` (the scratch directory) lies under `dir`: the runners of a server whose temp
/// directory is `dir`.
fn runners_under(dir: &Path) -> Vec<String> {
    let needle = format!("HOME={}", dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            let pid: i32 = e.file_name().to_string_lossy().parse().unwrap();
            is_running(pid)
                && std::fs::read(e.path().join("environ"))
                    .map(|env| env.split(|b| *b == 0).any(|var| var.starts_with(needle.as_bytes())))
                    .unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test]
async fn pooled_runs_each_get_a_fresh_interpreter_and_scratch_dir() {
    let ptc = Ptc::start(&config(&[], "  pool_size: 2\n")).await;
    // pid:string-hash names the interpreter on the host and in a container (where every runner is pid 1): string
    // hashes are salted afresh by every interpreter.
    let code = "import os, sys\nprint(f'{os.getpid()}:{hash(\"ptc\")}', os.listdir('.'), hasattr(sys, 'ptc_marker'))\n\
                sys.ptc_marker = 1\nopen('left-behind', 'w').close()";
    let mut pids = Vec::new();
    for _ in 0..4 {
        let text = ptc.execute(code).await.expect_ok();
        let line = text.lines().nth(1).unwrap().to_string();
        assert!(line.ends_with(" [] False"), "state leaked from an earlier run: {line}");
        pids.push(line.split(' ').next().unwrap().to_string());
    }
    pids.sort();
    pids.dedup();
    assert_eq!(pids.len(), 4, "every run had its own process");
}

#[tokio::test]
async fn no_runner_or_scratch_dir_survives_200_runs_and_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    let mut ptc = Ptc::start_with_env(&config(&[], "  pool_size: 3\n"), &[("TMPDIR", &tmp_path)]).await;
    for i in 0..200 {
        let run = ptc.execute(&format!("print({i})")).await;
        assert_eq!(run.expect_ok(), format!("[Script executed successfully]\n{i}"));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let waiting = runners_under(tmp.path());
    assert!(waiting.len() <= 3, "only the pool's ready runners remain: {waiting:?}");
    let dirs = std::fs::read_dir(tmp.path()).unwrap().count();
    assert!(dirs <= 3, "only the pool's runners hold scratch dirs: {dirs}");

    // Closing the session shuts the server down; it takes its pool with it.
    ptc.client.cancel().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), ptc.child.wait()).await.expect("the server exits");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runners_under(tmp.path()), Vec::<String>::new(), "runners outlived the server");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "scratch dirs outlived the server: {left:?}");
}
