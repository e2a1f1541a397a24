//! The `docker` backend's own guarantees: no container outlives its run, however the run or the server
//! ends. Runs only under `PTC_TEST_SANDBOX=docker` (the rest of the suite covers what programs see); lists
//! the containers of the server under test through the `docker` CLI by their `ptc-mcp.server` label, whose
//! value starts with the server's pid.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

/// The ids of the containers (in any state) that the server with this pid made.
fn containers_of(pid: u32) -> Vec<String> {
    let output = std::process::Command::new("docker")
        .args(["ps", "--all", "--no-trunc", "--filter", "label=ptc-mcp.server", "--format"])
        .arg("{{.ID}} {{.Label \"ptc-mcp.server\"}}")
        .output()
        .expect("the docker CLI runs");
    assert!(output.status.success(), "docker ps failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, instance)| instance.starts_with(&format!("{pid}-")))
        .map(|(id, _)| id.to_string())
        .collect()
}

/// Polls until the server's containers are gone (true) or `limit` passes (false).
async fn all_gone(pid: u32, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if containers_of(pid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn docker_ptc(execution: &str) -> Option<Ptc> {
    if sandbox_under_test() != "docker" {
        skip("docker container tests run under PTC_TEST_SANDBOX=docker");
        return None;
    }
    let ptc = Ptc::start(&config(&[], execution)).await;
    require_backend(&ptc).await?;
    Some(ptc)
}

#[apply(integration_test!)]
async fn no_container_is_left_after_success_error_crash_or_timeout() {
    // Without a pool, any container of this server after a run would be that run's.
    let Some(ptc) = docker_ptc("  timeout_seconds: 3\n  pool_size: 0\n").await else { return };
    let pid = ptc.child.id().unwrap();
    let runs = [
        ("success", "print('fine')", false),
        ("error", "raise ValueError('no')", true),
        ("crash", "import ctypes\nctypes.string_at(0)", true),
        ("timeout", "import time\ntime.sleep(60)", true),
    ];
    for (what, code, fails) in runs {
        let run = ptc.execute(code).await;
        assert_eq!(run.is_error(), fails, "{what}: {}", run.text());
        // The container is removed just after the result is sent.
        assert!(
            all_gone(pid, Duration::from_secs(10)).await,
            "a container survived the {what} run: {:?}",
            containers_of(pid)
        );
    }
}

#[apply(integration_test!)]
async fn no_container_is_left_when_the_server_is_killed_mid_run() {
    // With a pool, the ready runners' containers must go too.
    let Some(mut ptc) = docker_ptc("  pool_size: 2\n").await else { return };
    let pid = ptc.child.id().unwrap();
    // Once the pool is full (and the first run's container gone), the run is served by a pooled container.
    assert!(wait_for_containers(pid, 2).await, "the pool never filled: {:?}", containers_of(pid));
    let run = start_a_run(&ptc, "import time\nprint('started', flush=True)\ntime.sleep(600)");
    // SIGKILL: no clean-up code runs in the server; the engine removes the container once the runner's
    // stdin closes with the server's connection.
    ptc.child.start_kill().unwrap();
    let _ = ptc.child.wait().await;
    run.abort();
    assert!(
        all_gone(pid, Duration::from_secs(20)).await,
        "containers survived the killed server: {:?}",
        containers_of(pid)
    );
}

#[apply(integration_test!)]
async fn no_container_is_left_when_the_server_is_stopped_mid_run() {
    let Some(ptc) = docker_ptc("  pool_size: 2\n").await else { return };
    let pid = ptc.child.id().unwrap();
    assert!(wait_for_containers(pid, 2).await, "the pool never filled: {:?}", containers_of(pid));
    let run = start_a_run(&ptc, "import time\ntime.sleep(600)");
    stop_and_expect_no_container(ptc, run).await;
}

/// Sends `code` to run without waiting for its result.
fn start_a_run(ptc: &Ptc, code: &str) -> tokio::task::JoinHandle<()> {
    let peer = ptc.client.peer().clone();
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": code}).as_object().unwrap().clone());
    tokio::spawn(async move {
        let _ = peer.call_tool(params).await;
    })
}

/// Stops the server with SIGTERM mid-`run`; it must exit cleanly and leave no container behind.
async fn stop_and_expect_no_container(mut ptc: Ptc, run: tokio::task::JoinHandle<()>) {
    let pid = ptc.child.id().unwrap();
    // SAFETY: kill with a child pid we own.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status =
        tokio::time::timeout(Duration::from_secs(20), ptc.child.wait()).await.expect("the server stops on SIGTERM");
    assert!(status.unwrap().success());
    run.abort();
    assert!(
        all_gone(pid, Duration::from_secs(20)).await,
        "containers survived the stopped server: {:?}",
        containers_of(pid)
    );
}

/// Polls until the server has exactly `count` containers (true), or 10 s pass (false).
async fn wait_for_containers(pid: u32, count: usize) -> bool {
    for _ in 0..200 {
        if containers_of(pid).len() == count {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[apply(integration_test!)]
async fn no_container_is_left_when_the_server_is_stopped_while_a_container_is_being_created() {
    let Some(ptc) = docker_ptc("  pool_size: 0\n").await else { return };
    let run = start_a_run(&ptc, "print('never seen')");
    // Creating a container takes the engine longer than this: the signal arrives while it is under way.
    tokio::time::sleep(Duration::from_millis(20)).await;
    stop_and_expect_no_container(ptc, run).await;
}

/// `ptc-mcp --check-sandbox docker` on `config_text`: whether it succeeded, and its first line (what is in
/// force, or why the sandbox cannot run).
async fn check_sandbox(config_text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config_text).unwrap();
    let output = tokio::process::Command::new(binary())
        .args(["--check-sandbox", "docker", "--config"])
        .arg(&path)
        .output()
        .await;
    let output = output.expect("ptc-mcp --check-sandbox runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    (output.status.success(), stdout.lines().next().unwrap_or_default().to_string())
}

#[apply(integration_test!)]
async fn a_runtime_the_engine_does_not_have_is_refused_naming_the_ones_it_has_and_how_to_register_one() {
    // The engine works with the suite's own config; only the runtime differs.
    let Some(_working) = docker_ptc("  pool_size: 0\n").await else { return };
    let config = format!(
        "servers: []\nexecution:\n  sandbox: docker\n  docker:\n    image: {}\n    runtime: ptc-no-such-runtime\n",
        docker_image()
    );
    let (usable, report) = check_sandbox(&config).await;
    assert!(!usable, "{report}");
    let refusal = "has no OCI runtime 'ptc-no-such-runtime' (execution.docker.runtime); it has ";
    assert!(report.starts_with("docker: unavailable: the Docker engine at "), "{report}");
    assert!(report.contains(refusal) && report.contains("runc"), "names the runtimes the engine has: {report}");
    assert!(report.contains("register it under \"runtimes\" in the engine's daemon.json"), "{report}");
    // A server with that config starts, and refuses programs with the same reason.
    let ptc = Ptc::start(&config).await;
    let text = ptc.execute("print('never runs')").await.expect_error();
    assert!(text.contains("SandboxError") && text.contains(refusal), "{text}");
}

/// The runtime runs get here: the one the suite configures, else the engine's default.
fn runtime_in_force() -> String {
    docker_runtime().unwrap_or_else(|| {
        let output = std::process::Command::new("docker")
            .args(["info", "--format", "{{.DefaultRuntime}}"])
            .output()
            .expect("the docker CLI runs");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    })
}

#[apply(integration_test!)]
async fn the_check_names_the_runtime_in_force_and_under_gvisor_programs_see_its_kernel_not_the_hosts() {
    let Some(ptc) = docker_ptc("  pool_size: 0\n").await else { return };
    let runtime = runtime_in_force();
    let gvisor = runtime == "runsc";
    let (usable, report) = check_sandbox(&config(&[], "")).await;
    assert!(usable, "{report}");
    assert!(report.contains(&format!(" with runtime {runtime} (")), "{report}");
    let user_space_kernel = "gVisor, a user-space kernel between the program and the host kernel";
    assert_eq!(report.contains(user_space_kernel), gvisor, "{report}");
    // The kernel a program asks is gVisor's own under runsc, the host's under runc (a local engine).
    let run = ptc.execute("import os\nprint(os.uname().release)").await;
    run.expect_ok();
    let release = run.structured()["output"].as_str().unwrap().trim().to_string();
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string();
    if gvisor {
        assert_ne!(release, host, "under gVisor the program must not be served by the host kernel");
    } else {
        assert_eq!(release, host, "under {runtime} the program shares the host kernel");
    }
}
