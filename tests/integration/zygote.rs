//! The zygote of the `none` and `landlock` sandboxes (`execution.zygote`): runners forked from one warm
//! interpreter. A run changes nothing the next one starts from, a zygote that dies is replaced (a run it
//! leaves behind ends with a clear error), and with the zygote off every runner starts fresh.

use std::time::{Duration, Instant};

use crate::common::*;

/// Skips the test (saying why) unless the sandbox under test has a zygote.
fn has_zygote() -> bool {
    let sandbox = sandbox_under_test();
    if matches!(sandbox.as_str(), "none" | "landlock") {
        return true;
    }
    skip(&format!("the {sandbox} sandbox has no zygote (only none and landlock do)"));
    false
}

/// The pids of the running zygotes descending from `server`.
fn zygotes_of(server: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| is_running(pid) && is_zygote(pid) && descends_from(pid, server as i32))
        .collect()
}

fn descends_from(mut pid: i32, ancestor: i32) -> bool {
    while pid > 1 {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // The parent is the second field after the parenthesised name.
        let Some(parent) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)) else {
            return false;
        };
        pid = parent.parse().unwrap_or(0);
        if pid == ancestor {
            return true;
        }
    }
    false
}

/// A server with these `execution` keys after one run, and its zygote's pid.
async fn started_with_zygote(execution: &str) -> (Ptc, i32) {
    let ptc = Ptc::start(&config(&[], execution)).await;
    ptc.execute("print(1)").await.expect_ok();
    let zygote = one_zygote(&ptc).await;
    (ptc, zygote)
}

fn kill(pid: i32) {
    // SAFETY: kill of a pid this test found.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

async fn one_zygote(ptc: &Ptc) -> i32 {
    let server = ptc.child.id().expect("the server runs");
    let mut found = Vec::new();
    let one = eventually(Duration::from_secs(20), || {
        found = zygotes_of(server);
        found.len() == 1
    })
    .await;
    assert!(one, "one zygote runs under the server: {found:?}");
    found[0]
}

#[apply(integration_test!)]
async fn a_run_changes_nothing_the_next_run_starts_from() {
    if !has_zygote() {
        return;
    }
    let ptc = Ptc::start(&config(&[], "")).await;
    // Everything a program could leave in its interpreter for a later fork of the same image: modules and
    // builtins patched, the environment, the working directory's files, the random generator's state.
    let tamper = "import builtins, json, os, random, sys\njson.dumps = lambda *a, **k: 'tampered'\n\
                  builtins.len = lambda x: -1\nos.environ['PTC_LEFT'] = '1'\nsys.modules['ptc_left'] = sys\n\
                  open('left-behind', 'w').close()\nprint(random.random())";
    let check = "import builtins, json, os, random, sys\nprint(json.dumps([1]), len([1, 2]), 'PTC_LEFT' in os.environ, \
                 'ptc_left' in sys.modules, os.listdir('.'))\nprint(random.random())";
    let first = ptc.execute(tamper).await.expect_ok();
    let checked = ptc.execute(check).await.expect_ok();
    let lines: Vec<&str> = checked.lines().collect();
    assert_eq!(lines[1], "[1] 2 False False []", "state leaked from the run before");
    assert_ne!(lines[2], first.lines().nth(1).unwrap(), "each fork has a random generator of its own");
    // The runs were forks of one zygote, which runs on.
    one_zygote(&ptc).await;
}

#[apply(integration_test!)]
async fn a_zygote_killed_between_runs_is_replaced() {
    if !has_zygote() {
        return;
    }
    let (ptc, zygote) = started_with_zygote("  pool_size: 0\n").await;
    kill(zygote);
    assert!(eventually(Duration::from_secs(10), || !is_running(zygote)).await, "the zygote {zygote} died");
    for i in 0..3 {
        assert_eq!(
            ptc.execute(&format!("print({i})")).await.expect_ok(),
            format!("[Script executed successfully]\n{i}")
        );
    }
    let next = one_zygote(&ptc).await;
    assert_ne!(next, zygote, "a new zygote took its place");
}

#[apply(integration_test!)]
async fn a_run_whose_zygote_dies_ends_at_once_saying_so() {
    if !has_zygote() {
        return;
    }
    let (ptc, zygote) = started_with_zygote("  timeout_seconds: 60\n").await;
    let started = Instant::now();
    let killer = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        kill(zygote);
    };
    let (run, ()) = tokio::join!(ptc.execute("import time\nprint('started', flush=True)\ntime.sleep(50)"), killer);
    let error = run.expect_error();
    assert!(started.elapsed() < Duration::from_secs(30), "the run ended with its zygote, not at its time limit");
    assert!(error.contains("started"), "its output so far is kept: {error}");
    assert!(error.contains("killed") || error.contains("ended"), "it says the runner was killed: {error}");
    assert_eq!(ptc.execute("print(2)").await.expect_ok(), "[Script executed successfully]\n2");
}

#[apply(integration_test!)]
async fn with_the_zygote_off_every_runner_starts_fresh() {
    if !has_zygote() {
        return;
    }
    let ptc = Ptc::start(&config(&[], "  zygote: false\n")).await;
    for i in 0..3 {
        assert_eq!(
            ptc.execute(&format!("print({i})")).await.expect_ok(),
            format!("[Script executed successfully]\n{i}")
        );
    }
    let server = ptc.child.id().unwrap();
    assert_eq!(zygotes_of(server), Vec::<i32>::new(), "no zygote runs");
}
