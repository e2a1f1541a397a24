//! Stopping the server: SIGTERM or SIGINT ends it within 10 s (README, "Stopping") whatever hangs — a run
//! whose sandbox is still being probed, a downstream that ignores both its stdin closing and SIGTERM — and a
//! second signal ends it at once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

/// The documented bound on a shutdown.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A config (with its scripts in `dir`) whose runs hang while their sandbox is probed (the interpreter never
/// answers the probe), and whose downstream goes on after its stdin closes and ignores SIGTERM.
fn stubborn_config(dir: &Path) -> String {
    let python = dir.join("python3");
    script(&python, "#!/bin/sh\nexec sleep 30\n");
    let downstream = dir.join("stubborn.sh");
    let mock = repo_path("tests/servers/mock_server.py");
    script(
        &downstream,
        &format!("#!/bin/sh\ntrap '' TERM\npython3 {} --name stubborn\nexec sleep 30\n", mock.display()),
    );
    format!(
        "servers:\n  - name: stubborn\n    command: {}\nexecution:\n  sandbox: none\n  python: {}\n",
        json!(downstream.display().to_string()),
        json!(python.display().to_string())
    )
}

/// Starts ptc-mcp on [`stubborn_config`] and a run that hangs, and returns once the run is under way.
async fn hung_server(dir: &Path) -> Ptc {
    let ptc = Ptc::start_logging(&stubborn_config(dir), &[], Some("info")).await;
    let connected = |names: &[String]| names.iter().any(|name| name == "mcp__stubborn__echo");
    assert!(connected(&ptc.wait_for_tools(Duration::from_secs(60), connected).await), "{}", ptc.log());
    let peer = ptc.client.peer().clone();
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": "print(1)"}).as_object().unwrap().clone());
    tokio::spawn(async move {
        let _ = peer.call_tool(params).await;
    });
    // The run's request goes out first; a request answered after it means the run has started.
    tokio::task::yield_now().await;
    ptc.list_callable_tools().await;
    ptc
}

fn signal(ptc: &Ptc, signal: i32) {
    let pid = ptc.child.id().expect("the server is running") as i32;
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

#[apply(integration_test!)]
async fn a_shutdown_ends_within_its_bound_whatever_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let mut ptc = hung_server(dir.path()).await;
    let asked = Instant::now();
    signal(&ptc, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(60), ptc.child.wait()).await.expect("it exits").unwrap();
    let took = asked.elapsed();
    assert!(took < SHUTDOWN_LIMIT, "the shutdown took {took:?}\n{}", ptc.log());
    assert!(status.success(), "{status}");
}

#[apply(integration_test!)]
async fn a_second_signal_ends_the_shutdown_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut ptc = hung_server(dir.path()).await;
    signal(&ptc, libc::SIGTERM);
    // The server says when it starts to stop (checked below, after what matters).
    let stopping = eventually(Duration::from_secs(5), || ptc.log().contains("stopping (signal 15)")).await;
    let asked = Instant::now();
    signal(&ptc, libc::SIGINT);
    let status = tokio::time::timeout(Duration::from_secs(60), ptc.child.wait()).await.expect("it exits").unwrap();
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(2), "the second signal took {took:?} to end it\n{}", ptc.log());
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{}", ptc.log());
    assert!(stopping, "{}", ptc.log());
}
