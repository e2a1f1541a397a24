//! The pool of ready runners: every run still gets a fresh interpreter, nothing passes between runs, and no
//! runner or scratch directory outlives its run or the server.

use std::time::Duration;

use crate::common::*;

#[apply(integration_test!)]
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
    // Under landlock every runner is pid 1 of its own pid namespace, and the forks of its zygote share the
    // zygote's hash salt: the marker and the empty scratch above are what show a fresh start there.
    if sandbox_under_test() != "landlock" {
        assert_eq!(pids.len(), 4, "every run had its own process");
    }
}

#[apply(integration_test!)]
async fn no_runner_or_scratch_dir_survives_200_runs_and_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    let mut ptc = Ptc::start_with_env(&config(&[], "  pool_size: 3\n"), &[("TMPDIR", &tmp_path)]).await;
    for i in 0..200 {
        let run = ptc.execute(&format!("print({i})")).await;
        assert_eq!(run.expect_ok(), format!("[Script executed successfully]\n{i}"));
    }
    // Finished runs are cleaned up in the background: only the pool's ready runners remain, soon.
    let settled = eventually(Duration::from_secs(30), || {
        runners_under(tmp.path()).len() <= 3 && scratch_dirs_under(tmp.path()).len() <= 3
    })
    .await;
    assert!(settled, "more than the pool's 3 runners remain: {:?}", runners_under(tmp.path()));

    // Closing the session shuts the server down; it takes its pool with it before it exits.
    ptc.client.cancel().await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(30), ptc.child.wait()).await.expect("the server exits");
    assert_nothing_left(tmp.path()).await;
}

/// A server whose runners and scratch directories go under a temp directory of the test's.
async fn ptc_in(tmp: &tempfile::TempDir, execution: &str) -> Ptc {
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    Ptc::start_with_env(&config(&[], execution), &[("TMPDIR", &tmp_path)]).await
}

#[apply(integration_test!)]
async fn nothing_is_left_when_the_client_closes_right_after_a_result() {
    for session in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let mut ptc = ptc_in(&tmp, "").await;
        ptc.execute("print(1)").await.expect_ok();
        // Closing stdin at once, while the pool refills after the run.
        ptc.client.cancel().await.unwrap();
        let exited = tokio::time::timeout(Duration::from_secs(30), ptc.child.wait()).await;
        assert!(exited.is_ok(), "session {session}: the server did not exit");
        assert_nothing_left(tmp.path()).await;
    }
}

#[apply(integration_test!)]
async fn a_run_in_flight_is_stopped_and_nothing_is_left_on_sigterm_or_sigint() {
    if sandbox_under_test() == "docker" {
        skip("under docker a runner is a container (docker::no_container_is_left_when_the_server_is_stopped_mid_run)");
        return;
    }
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let mut ptc = ptc_in(
            &tmp,
            "  pool_size: 1
",
        )
        .await;
        let server = ptc.child.id().unwrap() as i32;
        let run = tokio::spawn({
            let peer = ptc.client.peer().clone();
            async move {
                let arguments =
                    serde_json::json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(600)"});
                let params = rmcp::model::CallToolRequestParams::new("execute_program")
                    .with_arguments(arguments.as_object().cloned().unwrap());
                peer.call_tool(params).await
            }
        });
        let started = eventually(Duration::from_secs(30), || !runners_under(tmp.path()).is_empty()).await;
        assert!(started, "the run is under way");
        // SAFETY: signalling the server process this test started.
        unsafe { libc::kill(server, signal) };
        let exited = tokio::time::timeout(Duration::from_secs(30), ptc.child.wait()).await;
        assert!(exited.is_ok(), "signal {signal}: the server did not exit");
        assert_nothing_left(tmp.path()).await;
        run.abort();
    }
}

#[apply(integration_test!)]
async fn the_next_server_removes_the_scratch_dirs_a_killed_server_left() {
    if sandbox_under_test() == "docker" {
        skip("under docker scratch is a tmpfs inside each container, nothing on this machine");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let keys = format!("  pool_size: 2\n{}", host_scratch_keys());
    let mut killed = ptc_in(&tmp, &keys).await;
    killed.execute("print(1)").await.expect_ok();
    killed.child.kill().await.unwrap(); // SIGKILL: no chance to clean up
    let left = scratch_dirs_under(tmp.path());
    assert!(!left.is_empty(), "the killed server's ready runners' scratch dirs are left");

    let next = ptc_in(&tmp, &keys).await;
    next.execute("print(1)").await.expect_ok();
    let swept = eventually(Duration::from_secs(30), || left.iter().all(|dir| !dir.exists())).await;
    assert!(swept, "the next server removed them: {:?}", scratch_dirs_under(tmp.path()));
    let servers = std::fs::read_dir(tmp.path()).unwrap().count();
    assert_eq!(servers, 1, "only the live server's directory is left");
}

#[apply(integration_test!)]
async fn a_ready_runner_that_died_is_replaced_not_handed_out() {
    if sandbox_under_test() == "docker" {
        skip("under docker a ready runner is a container, not a process of this machine to kill");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ptc = ptc_in(
        &tmp,
        "  pool_size: 2
",
    )
    .await;
    ptc.execute("print('warm')").await.expect_ok();
    let ready = eventually(Duration::from_secs(30), || runners_under(tmp.path()).len() == 2).await;
    assert!(ready, "two ready runners: {:?}", runners_under(tmp.path()));
    let interpreters: Vec<i32> = runners_under(tmp.path()).iter().map(|pid| pid.parse().unwrap()).collect();
    // A runner is the interpreter, or (landlock) the helper or relay that waits for it and ends after it: both
    // must have ended before the next run asks for one (one dying at the very moment it is handed out is a
    // crash like any). A zygote's fork's parent is the zygote, which lives on.
    let server = ptc.child.id().unwrap() as i32;
    let helpers =
        interpreters.iter().filter_map(|&pid| parent_of(pid)).filter(|&parent| parent != server && !is_zygote(parent));
    let killed: Vec<i32> = interpreters.iter().copied().chain(helpers).collect();
    for &pid in &interpreters {
        // SAFETY: killing a runner process of the server under test.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let dead = eventually(Duration::from_secs(30), || killed.iter().all(|&pid| has_ended(pid))).await;
    assert!(dead, "the killed runners are gone");
    for _ in 0..3 {
        let run = ptc.execute("print('fine')").await;
        assert_eq!(run.expect_ok(), "[Script executed successfully]\nfine");
    }
}

#[apply(integration_test!)]
async fn the_pool_grows_to_the_recent_number_of_concurrent_programs() {
    if sandbox_under_test() == "docker" {
        skip("under docker ready runners are containers, not processes of this machine to count");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ptc = ptc_in(&tmp, "").await; // the default pool_size (2)
    let filled = eventually(Duration::from_secs(30), || runners_under(tmp.path()).len() == 2).await;
    assert!(filled, "the default pool is 2: {:?}", runners_under(tmp.path()));
    let ptc = &ptc;
    let burst = (0..6).map(|i| async move { ptc.execute(&format!("import time\ntime.sleep(0.5)\nprint({i})")).await });
    for run in futures::future::join_all(burst).await {
        run.expect_ok();
    }
    // After a burst of 6, 6 runners are kept ready for the next one.
    let grown = eventually(Duration::from_secs(60), || runners_under(tmp.path()).len() == 6).await;
    assert!(grown, "the pool did not grow to 6: {:?}", runners_under(tmp.path()));
}

/// The parent of process `pid`, if it can be read.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}
