//! Two `serve --http` replicas behind a real HAProxy (Debian's package) configured by `deploy/haproxy.cfg`
//! itself: stateless (2026-07-28) runs spread over both, a 2025-era session stays on the replica that issued
//! it, and one replica stopped with SIGTERM drains (readiness off, its run in flight finished) while
//! stateless clients keep working through the proxy; tasks are polled on the replica that started them.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::common::*;
use crate::health::{get, ready, sample, until_status};
use crate::http::{HttpPtc, client_at, execute, text, token_keys};
use crate::http_hardening::stateless_execute;

/// HAProxy on a loopback port in front of replicas on `backends`, with `deploy/haproxy.cfg`'s settings.
struct Haproxy {
    port: u16,
    _child: Child,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// `None` (skipped, or failed where CI requires it) without the `haproxy` binary.
    async fn start(backends: [u16; 2]) -> Option<Haproxy> {
        // Debian installs it in /usr/sbin, which an ordinary user's PATH may leave out.
        let binary = ["haproxy", "/usr/sbin/haproxy"]
            .into_iter()
            .find(|binary| std::process::Command::new(binary).arg("-v").output().is_ok());
        require("haproxy", binary.map(|_| ()).ok_or_else(|| "haproxy cannot be run: apt-get install haproxy".into()))?;
        let port = crate::http::free_port();
        let shipped = std::fs::read_to_string(repo_path("deploy/haproxy.cfg")).unwrap();
        let replacements = [
            ("bind :8765", format!("bind 127.0.0.1:{port}")),
            ("server ptc1 10.0.0.11:8765", format!("server ptc1 127.0.0.1:{}", backends[0])),
            ("server ptc2 10.0.0.12:8765", format!("server ptc2 127.0.0.1:{}", backends[1])),
        ];
        let config = replacements.iter().fold(shipped, |config, (from, to)| {
            assert!(config.contains(from), "deploy/haproxy.cfg no longer has {from:?}");
            config.replace(from, to)
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).unwrap();
        let child = Command::new(binary.expect("found above"))
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let listening =
            eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await;
        assert!(listening, "haproxy never listened on {port}");
        Some(Haproxy { port, _child: child, _dir: dir })
    }
}

/// Runs `print(1)` statelessly through the proxy and checks its answer.
async fn stateless_run(port: u16) {
    let (status, response) = stateless_execute(port, "print(1)", &[]).await;
    assert_eq!(status, 200, "{response}");
    assert!(response.contains(r#"[Script executed successfully]\n1"#), "{response}");
}

/// The runs a replica finished with outcome `ok`.
async fn runs_ok(ptc: &HttpPtc) -> u64 {
    let metrics = get(ptc, "/metrics", true).await.1;
    sample(&metrics, r#"ptc_runs_total{outcome="ok"}"#).expect("the runs are counted")
}

#[apply(integration_test!)]
async fn replicas_behind_haproxy_share_stateless_runs_keep_sessions_and_drain_on_sigterm() {
    let keys = format!("{}    drain_seconds: 30\n", token_keys());
    let config = config(&[], "  pool_size: 0\n");
    let mut first = HttpPtc::start(&config, &keys).await;
    let second = HttpPtc::start(&config, &keys).await;
    let Some(()) = ready(&first).await else { return };
    let Some(()) = ready(&second).await else { return };
    let (status, response) = stateless_execute(first.port(), "print(1)", &[]).await;
    if response.contains("SandboxError") {
        let _ = sandbox_unusable(&response);
        return;
    }
    assert_eq!(status, 200, "{response}");
    let Some(proxy) = Haproxy::start([first.port(), second.port()]).await else { return };

    // Round robin over both once HAProxy's checks have seen them ready.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        stateless_run(proxy.port).await;
        let counts = [runs_ok(&first).await, runs_ok(&second).await];
        if counts.iter().all(|count| *count >= 3) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "runs did not spread over both replicas: {counts:?}");
    }

    // A 2025-era session: every request of it must reach the replica that issued its id.
    let before = [runs_ok(&first).await, runs_ok(&second).await];
    let client = client_at(format!("http://127.0.0.1:{}/mcp", proxy.port)).await;
    for _ in 0..4 {
        assert_eq!(text(&execute(&client, "print(2)").await), "[Script executed successfully]\n2");
    }
    let after = [runs_ok(&first).await, runs_ok(&second).await];
    let grew = [after[0] - before[0], after[1] - before[1]];
    assert!(grew == [4, 0] || grew == [0, 4], "the session's runs went to both replicas: {grew:?}");
    drop(client);

    // A run in flight on the first replica, then SIGTERM: it stops being ready, finishes the run and exits,
    // while stateless runs through the proxy keep working.
    let port = first.port();
    let long = tokio::spawn(async move {
        stateless_execute(port, "import asyncio\nawait asyncio.sleep(4)\nprint('drained')", &[]).await
    });
    if sandbox_under_test() == "docker" {
        tokio::time::sleep(Duration::from_secs(2)).await;
    } else {
        let started = eventually(Duration::from_secs(30), || !runners_under(&first.tmp()).is_empty()).await;
        assert!(started, "no runner started for the long run");
    }
    first.signal(libc::SIGTERM);
    assert_eq!(until_status(&first, "/readyz", 503).await, Ok("not ready: stopping\n".to_string()));
    let second_before = runs_ok(&second).await;
    for _ in 0..8 {
        stateless_run(proxy.port).await;
    }
    let (status, response) = tokio::time::timeout(Duration::from_secs(30), long).await.expect("it ends").unwrap();
    assert_eq!(status, 200, "{response}");
    assert!(response.contains(r#"[Script executed successfully]\ndrained"#), "{response}");
    assert!(first.exited_within(Duration::from_secs(30)).await.success());
    for _ in 0..4 {
        stateless_run(proxy.port).await;
    }
    assert!(runs_ok(&second).await >= second_before + 4, "the remaining replica took the runs");
}

#[apply(integration_test!)]
async fn tasks_behind_haproxy_are_polled_and_collected_on_the_replica_that_started_them() {
    let config = config(&[], "  pool_size: 0\n");
    let first = HttpPtc::start(&config, &token_keys()).await;
    let second = HttpPtc::start(&config, &token_keys()).await;
    let Some(()) = ready(&first).await else { return };
    let Some(()) = ready(&second).await else { return };
    let Some(proxy) = Haproxy::start([first.port(), second.port()]).await else { return };
    // Round robin starts them on both replicas; each is found again wherever its polls would have gone.
    let mut client = crate::tasks::Client::at_port(proxy.port);
    let mut tasks = Vec::new();
    for i in 0..6 {
        tasks.push((i, client.start(&format!("print('task {i}')")).await));
    }
    for (i, task) in &tasks {
        let done = client.finished(task).await;
        if crate::tasks::unusable(&done) {
            return;
        }
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["result"]["content"][0]["text"], format!("[Script executed successfully]\ntask {i}"));
    }
    let counts = [runs_ok(&first).await, runs_ok(&second).await];
    assert!(counts.iter().all(|count| *count >= 1) && counts.iter().sum::<u64>() == 6, "{counts:?}");
}
