//! Stopping the server: SIGTERM or SIGINT ends it within 10 s (README, "Stopping") whatever hangs — a run
//! whose sandbox is still being probed, a downstream that ignores both its stdin closing and SIGTERM, an
//! HTTP client that never finishes its request — and a second signal ends it at once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    let ptc = Ptc::start_logging(&stubborn_config(dir), &[], Some("info,ptc_mcp::app=debug")).await;
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

#[apply(integration_test!)]
async fn a_signal_during_a_shutdown_begun_by_stdin_closing_ends_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Ptc { client, mut child, dir: logs } = hung_server(dir.path()).await;
    drop(client.cancel().await);
    let log = || std::fs::read_to_string(logs.path().join("ptc.log")).unwrap_or_default();
    // The server says when its shutdown begins (checked below, after what matters).
    let shutting_down = eventually(Duration::from_secs(5), || log().contains("shutting down within")).await;
    let asked = Instant::now();
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("it exits").unwrap();
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(2), "the signal took {took:?} to end it\n{}", log());
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{}", log());
    assert!(shutting_down, "{}", log());
}

#[apply(integration_test!)]
async fn closing_stdin_stops_the_runs_under_way_at_once_as_a_signal_does() {
    let dir = tempfile::tempdir().unwrap();
    let Ptc { client, mut child, dir: logs } = hung_server(dir.path()).await;
    let closed = Instant::now();
    drop(client.cancel().await);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("it exits").unwrap();
    let took = closed.elapsed();
    let log = std::fs::read_to_string(logs.path().join("ptc.log")).unwrap_or_default();
    assert!(took < SHUTDOWN_LIMIT, "the shutdown took {took:?}\n{log}");
    // Stopped by the server's shutdown, not cancelled after rmcp's 5 s wait for the requests in hand.
    assert!(log.contains(r#"outcome="killed""#) && !log.contains("timed out draining"), "{log}");
    assert!(status.success(), "{status}");
}

const TOKEN: &str = "shutdown-test-token";

/// Sends one MCP POST over a fresh connection (in the session, if given) and returns the connection with
/// the response unread.
async fn post(port: u16, session: Option<&str>, body: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let session =
        session.map_or(String::new(), |id| format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: 2025-06-18\r\n"));
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n{session}Content-Type: \
         application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

/// Reads from `stream` until what came so far contains `needle`; returns it.
async fn read_until(stream: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = async {
        while !String::from_utf8_lossy(&seen).contains(needle) {
            let n = stream.read(&mut buffer).await.unwrap();
            assert!(n > 0, "the connection closed before {needle:?}: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buffer[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("the answer comes");
    String::from_utf8_lossy(&seen).into_owned()
}

#[apply(integration_test!)]
async fn an_http_shutdown_ends_within_the_same_bound_with_a_connection_left_half_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let text = format!("{}serve:\n  http:\n    token: {TOKEN}\n", stubborn_config(dir.path()));
    std::fs::write(&config, text).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = tokio::process::Command::new(binary())
        .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let listening = eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(listening.await, "serve --http never listened on {port}");

    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let head = read_until(&mut post(port, None, initialize).await, "\r\n\r\n").await.to_ascii_lowercase();
    let session = head.split("mcp-session-id: ").nth(1).and_then(|rest| rest.split("\r\n").next()).expect(&head);
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    read_until(&mut post(port, Some(session), initialized).await, "\r\n\r\n").await;
    let run = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_program","arguments":{"code":"print(1)"}}}"#;
    let mut running = post(port, Some(session), run).await;
    read_until(&mut running, "\r\n\r\n").await;
    // A request of the session answered after the run's means the run has started.
    let list = r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#;
    read_until(&mut post(port, Some(session), list).await, "execute_program").await;
    let mut half_open = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    half_open.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();

    let asked = Instant::now();
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(server.id().unwrap() as i32, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(60), server.wait()).await.expect("it exits").unwrap();
    let took = asked.elapsed();
    assert!(took < SHUTDOWN_LIMIT, "the shutdown took {took:?}");
    assert!(status.success(), "{status}");
}
