//! `ptc-mcp serve --http` against hostile and careless clients: half-sent request heads and silent
//! connections, floods of sessions, idle sessions, session ends, requests that do not decode (over stdio too),
//! audit records that name the session we issued, and the token it never serves without.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::Command;

use crate::common::*;
use crate::http::{HttpPtc, INITIALIZE, TOKEN, free_port, raw, raw_request, token_keys};

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// The value of header `name` in a raw response.
fn header(response: &str, name: &str) -> Option<String> {
    let head = response.split("\r\n\r\n").next()?;
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim().to_string())
    })
}

/// The JSON-RPC message in a raw response: its JSON body, or the last `data:` line of its event stream.
fn message(response: &str) -> Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    let text = body.lines().filter_map(|line| line.strip_prefix("data: ")).next_back().unwrap_or(body);
    serde_json::from_str(text).unwrap_or_else(|e| panic!("no JSON-RPC message ({e}) in {response}"))
}

/// A 2025-era session opened with raw requests: `initialize`, then `notifications/initialized`.
async fn new_session(port: u16) -> String {
    let bearer = bearer();
    let (status, response) = raw(port, "/mcp", &[("Authorization", &bearer)], INITIALIZE).await;
    assert_eq!(status, 200, "{response}");
    let session = header(&response, "mcp-session-id").expect("a session id");
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    assert_eq!(in_session(port, &session, initialized).await.0, 202);
    session
}

/// A raw POST in `session`.
async fn in_session(port: u16, session: &str, body: &str) -> (u16, String) {
    let bearer = bearer();
    let headers =
        [("Authorization", bearer.as_str()), ("Mcp-Session-Id", session), ("MCP-Protocol-Version", "2025-06-18")];
    raw(port, "/mcp", &headers, body).await
}

fn execute_request(id: u64, code: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "execute_program", "arguments": {"code": code}}})
    .to_string()
}

/// `execute_program` as a 2026-07-28 client sends it (no session), with extra headers.
pub async fn stateless_execute(port: u16, code: &str, extra: &[(&str, &str)]) -> (u16, String) {
    let mut request: Value = serde_json::from_str(&execute_request(9, code)).unwrap();
    request["params"]["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let bearer = bearer();
    let mut headers = vec![
        ("Authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "execute_program"),
    ];
    headers.extend_from_slice(extra);
    raw(port, "/mcp", &headers, &request.to_string()).await
}

/// Lowers the open-files limit of the command's process, as on a machine with a small `ulimit -n`.
fn limit_open_files(command: &mut Command, limit: u64) {
    // SAFETY: the closure runs in the child between fork and exec and only calls setrlimit, which is
    // async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// The server's resident memory in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[apply(integration_test!)]
async fn half_sent_request_heads_are_closed_and_a_client_with_the_token_is_still_answered() {
    // 256 descriptors: the server keeps at most 128 connections, and more than that many half-sent heads
    // would have taken every descriptor it has.
    let ptc = HttpPtc::start_with(&config(&[], ""), &token_keys(), |command| limit_open_files(command, 256)).await;
    let mut half_heads = Vec::new();
    for _ in 0..250 {
        let mut stream = TcpStream::connect(("127.0.0.1", ptc.port())).await.unwrap();
        stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ").await.unwrap();
        half_heads.push(stream);
    }
    let bearer = bearer();
    let (status, response) = raw(ptc.port(), "/mcp", &[("Authorization", &bearer)], INITIALIZE).await;
    assert_eq!(status, 200, "the client with the token is answered (after the first heads timed out): {response}");
    // Each half-sent head is closed within its 10 s (header_read_timeout_seconds), once it has been accepted.
    for (i, stream) in half_heads.iter_mut().enumerate() {
        let mut buf = [0u8; 512];
        let read = tokio::time::timeout(Duration::from_secs(40), stream.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "half-sent head {i} is still open: {read:?}");
    }
}

#[apply(integration_test!)]
async fn a_connection_silent_between_requests_is_closed_but_a_request_in_flight_is_never_timed() {
    let keys = format!("{}    header_read_timeout_seconds: 1\n    keep_alive_timeout_seconds: 2\n", token_keys());
    let ptc = HttpPtc::start(&config(&[], ""), &keys).await;
    let mut stream = TcpStream::connect(("127.0.0.1", ptc.port())).await.unwrap();
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n\
         Content-Length: {}\r\n\r\n{list}",
        bearer(),
        list.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).await.unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // The connection is kept alive after the answer, and closed once it was silent for 2 s.
    let answered = tokio::time::Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the silent connection was not closed");
    let silent = answered.elapsed();
    assert!(silent >= Duration::from_millis(1500), "closed after {silent:?}, before its keep-alive timeout");
    // A run longer than both timeouts: its request is in flight, not silent.
    let (status, response) =
        stateless_execute(ptc.port(), "import asyncio\nawait asyncio.sleep(3)\nprint('done')", &[]).await;
    assert_eq!(status, 200, "{response}");
    let text = message(&response)["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(&text);
        return;
    }
    assert_eq!(text, "[Script executed successfully]\ndone");
}

#[apply(integration_test!)]
async fn initialize_past_max_sessions_is_refused_and_a_thousand_cost_little_memory() {
    let ptc = HttpPtc::start(&config(&[], ""), &token_keys()).await;
    let bearer = bearer();
    raw(ptc.port(), "/mcp", &[("Authorization", &bearer)], INITIALIZE).await;
    let before = rss_kib(ptc.pid());
    let mut refusals = Vec::new();
    for _ in 1..1000 {
        let (status, response) = raw(ptc.port(), "/mcp", &[("Authorization", &bearer)], INITIALIZE).await;
        match status {
            200 => assert!(refusals.is_empty(), "a session after a refusal: {response}"),
            503 => refusals.push(message(&response)),
            _ => panic!("{response}"),
        }
    }
    assert_eq!(refusals.len(), 900, "100 sessions (serve.http.max_sessions), then refusals");
    let refusal = &refusals[0];
    assert_eq!((refusal["id"].clone(), refusal["error"]["code"].clone()), (json!(1), json!(-32000)));
    let why = refusal["error"]["message"].as_str().unwrap();
    assert!(why.starts_with("too many MCP sessions: 100 are open (serve.http.max_sessions)"), "{why}");
    let grown = rss_kib(ptc.pid()).saturating_sub(before);
    assert!(grown < 30 * 1024, "1,000 initialize requests grew the server by {grown} KiB");
}

#[apply(integration_test!)]
async fn an_idle_session_ends_but_not_while_its_run_is_in_flight() {
    let ptc = HttpPtc::start(&config(&[], ""), &format!("{}    session_idle_timeout_seconds: 1\n", token_keys())).await;
    let port = ptc.port();
    let (idle, busy) = (new_session(port).await, new_session(port).await);
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
    let long_run = execute_request(3, "import asyncio\nawait asyncio.sleep(3)\nprint('done')");
    let run = in_session(port, &busy, &long_run);
    let expiry = async {
        // Each look at the session is activity too: look less often than it takes to expire.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(1600)).await;
            if in_session(port, &idle, list).await.0 == 404 {
                return true;
            }
        }
        false
    };
    let ((status, response), expired) = tokio::join!(run, expiry);
    assert!(expired, "the idle session was never ended");
    assert_eq!(status, 200, "{response}");
    let answer = message(&response);
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(text);
        return;
    }
    assert_eq!(text, "[Script executed successfully]\ndone", "the session lived while its run went on: {answer}");
}

#[apply(integration_test!)]
async fn ending_a_session_answers_204_an_unknown_one_404_and_the_official_sdk_sees_no_failure() {
    let ptc = HttpPtc::start(&config(&[], ""), &token_keys()).await;
    let session = new_session(ptc.port()).await;
    let bearer = bearer();
    let end = async |id: &str| {
        raw_request(ptc.port(), "DELETE", "/mcp", &[("Authorization", bearer.as_str()), ("Mcp-Session-Id", id)], "")
            .await
    };
    let (status, response) = end(&session).await;
    assert_eq!(status, 204, "{response}");
    assert_eq!(end(&session).await.0, 404, "a session ended already");
    assert_eq!(end("never-issued").await.0, 404);
    assert_eq!(in_session(ptc.port(), &session, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).await.0, 404);
    // The official SDK ends its session with DELETE on disconnect and logs any answer but 200/204 as a failure.
    let authorization = format!("Authorization: {bearer}");
    let url = ptc.url();
    let args = ["--protocol", "2025-11-25", "--code", "print(1)", "--url", &url, "--header", &authorization];
    let Some((_report, stderr)) = sdk_client_output(args).await else { return };
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
}

#[apply(integration_test!)]
async fn the_audit_names_the_session_we_issued_and_never_one_a_client_chose() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let text = format!("{}logging:\n  audit_file: {}\n", config(&[], ""), json!(audit.display().to_string()));
    let ptc = HttpPtc::start(&text, &token_keys()).await;
    let session = new_session(ptc.port()).await;
    assert_eq!(in_session(ptc.port(), &session, &execute_request(2, "print(1)")).await.0, 200);
    // Stateless requests that name another client's session, or any string at all.
    for claimed in [session.as_str(), "forged-by-the-client"] {
        let (status, response) = stateless_execute(ptc.port(), "print(1)", &[("Mcp-Session-Id", claimed)]).await;
        assert_eq!(status, 200, "{response}");
    }
    let lines = || std::fs::read_to_string(&audit).map(|text| text.lines().count()).unwrap_or(0);
    assert!(eventually(Duration::from_secs(10), || lines() == 3).await, "three audit records");
    let sessions: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["session"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions, [session.as_str(), "http", "http"]);
}

/// `execute_program` whose code holds a lone surrogate escape: JSON no parser accepts.
const LONE_SURROGATE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_program","arguments":{"code":"print('\ud800')"}}}"#;

#[apply(integration_test!)]
async fn a_request_with_a_lone_surrogate_gets_a_json_rpc_error_over_http() {
    let request = LONE_SURROGATE;
    let ptc = HttpPtc::start(&config(&[], ""), &token_keys()).await;
    let session = new_session(ptc.port()).await;
    let bearer = bearer();
    for (what, (status, response)) in [
        ("in a session", in_session(ptc.port(), &session, request).await),
        ("without one", raw(ptc.port(), "/mcp", &[("Authorization", &bearer)], request).await),
    ] {
        assert_eq!(status, 400, "{what}: {response}");
        let answer = message(&response);
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (json!(7), json!(-32700)), "{what}");
    }
}

#[apply(integration_test!)]
async fn a_request_with_a_lone_surrogate_gets_a_json_rpc_error_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config(&[], "")).unwrap();
    let mut child = stdio_child(&path);
    let mut stdin = child.stdin.take().unwrap();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    for line in [initialize, initialized, LONE_SURROGATE] {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("stdout stays open");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 7 {
                return message;
            }
        }
    })
    .await
    .expect("the request is answered over stdio");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
}

/// Runs `ptc-mcp serve --http 127.0.0.1:0` with `env` in an empty directory; its exit status and stderr.
async fn serve_without_config(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary());
    command
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("PTC_MCP_CONFIG")
        .env_remove("PTC_MCP_TOKEN")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("it refuses to start instead of serving")
        .unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[apply(integration_test!)]
async fn serve_http_never_starts_without_a_token_even_on_loopback_and_says_how_to_set_one() {
    let (status, stderr) = serve_without_config(&[]).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("refusing to serve on 127.0.0.1:0 without serve.http.token"), "{stderr}");
    assert!(stderr.contains("put `token: ${PTC_MCP_TOKEN}` under serve.http"), "{stderr}");
    // The token in the environment, but not in the config: said so.
    let (status, stderr) = serve_without_config(&[("PTC_MCP_TOKEN", "from-the-environment")]).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("PTC_MCP_TOKEN is set in the environment, but the config does not use it"), "{stderr}");
    assert!(!stderr.contains("from-the-environment"), "never the token: {stderr}");
}

#[apply(integration_test!)]
async fn the_readme_line_serves_with_the_token_it_sets_and_another_token_in_the_environment_is_called_out() {
    // PTC_MCP_TOKEN=… ptc-mcp serve --http 127.0.0.1:8765 --config config.example.yaml, from the repository.
    let port = free_port();
    let tmp = tempfile::tempdir().unwrap();
    let _server = Command::new(binary())
        .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config", "config.example.yaml"])
        .current_dir(repo_path(""))
        .env("PTC_MCP_TOKEN", TOKEN)
        .env("TMPDIR", tmp.path())
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let listening = eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(listening.await, "serve --http never listened");
    assert_eq!(raw(port, "/mcp", &[], INITIALIZE).await.0, 401, "no token, no answer");
    assert_eq!(raw(port, "/mcp", &[("Authorization", &bearer())], INITIALIZE).await.0, 200);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("serve:\n  http:\n    token: {TOKEN}\n")).unwrap();
    let mut server = Command::new(binary())
        .args(["serve", "--http", &format!("127.0.0.1:{}", free_port()), "--config"])
        .arg(&path)
        .current_dir(dir.path())
        .env("PTC_MCP_TOKEN", "another-token-than-the-configs")
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(server.stderr.take().unwrap()).lines();
    let warning = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let line = stderr.next_line().await.unwrap().expect("a warning before stderr ends");
            if line.contains("PTC_MCP_TOKEN") {
                return line;
            }
        }
    })
    .await
    .expect("a warning about PTC_MCP_TOKEN at start");
    assert!(warning.contains("is set in the environment but is not serve.http.token"), "{warning}");
    assert!(!warning.contains("another-token") && !warning.contains(TOKEN), "never the tokens: {warning}");
}
