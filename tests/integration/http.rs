//! `ptc-mcp serve --http`: the official Python SDK over HTTP in both eras, bearer auth, Origin and Host
//! checks with plain HTTP requests, the bound on runs across clients, isolated sessions, and SIGTERM.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, CancelledNotificationParam, RequestId};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::common::*;

pub const TOKEN: &str = "test-token-0123456789";

/// A `ptc-mcp serve --http` on a loopback port, with its config and temp dir.
pub struct HttpPtc {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl HttpPtc {
    /// Starts the server with `config_text` plus `serve.http` keys (`http_keys`, indented under `http:`),
    /// and waits until it accepts connections.
    pub async fn start(config_text: &str, http_keys: &str) -> HttpPtc {
        HttpPtc::start_with(config_text, http_keys, |_| {}).await
    }

    /// [`HttpPtc::start`], with the command adjusted by `configure` before it runs.
    pub async fn start_with(config_text: &str, http_keys: &str, configure: impl FnOnce(&mut Command)) -> HttpPtc {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("{config_text}serve:\n  http:\n{http_keys}")).unwrap();
        let port = free_port();
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        let mut command = Command::new(binary());
        command
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--config"])
            .arg(&path)
            .current_dir(dir.path())
            .env("TMPDIR", &tmp)
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        configure(&mut command);
        let child = command.spawn().unwrap();
        let ready =
            eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await;
        assert!(ready, "serve --http never listened on {port}");
        HttpPtc { child, port, dir }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub fn tmp(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// An rmcp client session (2025 era: initialize, session id) with the token.
    pub async fn client(&self) -> RunningService<RoleClient, ()> {
        client_at(self.url()).await
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill with the pid of a child we own.
        assert_eq!(unsafe { libc::kill(self.child.id().unwrap() as i32, signal) }, 0);
    }

    /// Waits at most `limit` for the server to exit; its exit status.
    pub async fn exited_within(&mut self, limit: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(limit, self.child.wait()).await.expect("the server exits in time").unwrap()
    }
}

/// An rmcp client session (2025 era: initialize, session id) with the token, to the MCP endpoint at `url`.
pub async fn client_at(url: String) -> RunningService<RoleClient, ()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(TOKEN);
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    tokio::time::timeout(Duration::from_secs(30), ().serve(transport))
        .await
        .expect("initialize is answered in time")
        .expect("initialize succeeds")
}

/// A plain HTTP proxy on a loopback port that adds the bearer token to every request and passes everything
/// else through, the `Host` header included (for clients that cannot send headers of their own, like the
/// conformance suite). It stops when dropped.
pub struct TokenProxy {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TokenProxy {
    pub async fn start(target: u16) -> TokenProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::new();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let client = client.clone();
                let service = hyper::service::service_fn(move |request| forward(client.clone(), target, request));
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        TokenProxy { port, task }
    }
}

type Forwarded = hyper::Response<http_body_util::combinators::BoxBody<bytes::Bytes, reqwest::Error>>;

async fn forward(
    client: reqwest::Client,
    target: u16,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<Forwarded, reqwest::Error> {
    use futures::TryStreamExt;
    use http_body_util::BodyExt;
    let hop_by_hop = [http::header::CONNECTION, http::header::TRANSFER_ENCODING, http::header::CONTENT_LENGTH];
    let (mut parts, body) = request.into_parts();
    let body = body.collect().await.map(|collected| collected.to_bytes()).unwrap_or_default();
    let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
    for name in &hop_by_hop {
        parts.headers.remove(name);
    }
    parts.headers.insert(http::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
    let url = format!("http://127.0.0.1:{target}{path}");
    let response = client.request(parts.method, url).headers(parts.headers).body(body).send().await?;
    let mut forwarded = hyper::Response::builder().status(response.status());
    let headers = forwarded.headers_mut().unwrap();
    headers.extend(response.headers().clone());
    for name in &hop_by_hop {
        headers.remove(name);
    }
    let body = http_body_util::StreamBody::new(response.bytes_stream().map_ok(hyper::body::Frame::data));
    Ok(forwarded.body(body.boxed()).unwrap())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn token_keys() -> String {
    format!("    token: {TOKEN}\n")
}

/// Sends `execute_program` with `code` and returns its result.
pub async fn execute(client: &RunningService<RoleClient, ()>, code: &str) -> CallToolResult {
    let params = CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": code}).as_object().unwrap().clone());
    tokio::time::timeout(Duration::from_secs(120), client.peer().call_tool(params))
        .await
        .expect("the run is answered in time")
        .expect("execute_program answers")
}

pub fn text(result: &CallToolResult) -> String {
    text_block(result, 0)
}

/// One raw HTTP/1.1 POST; returns the status code and the whole response.
pub async fn raw(port: u16, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    raw_request(port, "POST", path, headers, body).await
}

/// One raw HTTP/1.1 request with `method`; returns the status code and the whole response.
pub async fn raw_request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, response)
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

#[apply(integration_test!)]
async fn the_official_python_sdk_works_over_http_in_both_eras() {
    let ptc = HttpPtc::start(&config(&[mock_server("mock", &[])], ""), &token_keys()).await;
    for protocol in ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28", "auto"] {
        let code = "print(await mcp__mock__echo(v=1))";
        let authorization = format!("Authorization: Bearer {TOKEN}");
        let args = ["--protocol", protocol, "--code", code, "--url", &ptc.url(), "--header", &authorization];
        let Some(report) = sdk_client_report(args).await else { return };
        let expected = if protocol == "auto" { "2026-07-28" } else { protocol };
        assert_eq!(report["negotiated_version"], expected, "{report}");
        assert_eq!(report["tools"], json!(["list_callable_tools", "inspect_tool", "execute_program"]));
        assert!(report["callable"].as_str().unwrap().contains("mcp__mock__echo"), "{report}");
        let run = &report["execute"];
        if run["text"].as_str().unwrap_or_default().contains("SandboxError")
            && sandbox_unusable(&run["text"].to_string()).is_none()
        {
            return;
        }
        assert_eq!(run["is_error"], false, "{protocol}: {report}");
        assert!(run["text"].as_str().unwrap().starts_with("[Script executed successfully]\n{'v': 1}"), "{report}");
        assert_eq!(run["structured"]["ok"], true);
    }
}

#[apply(integration_test!)]
async fn the_token_origin_and_host_are_enforced() {
    let keys = format!("{}    allowed_origins: [\"https://app.example\"]\n", token_keys());
    let ptc = HttpPtc::start(&config(&[], ""), &keys).await;
    let bearer = format!("Bearer {TOKEN}");
    let auth = ("Authorization", bearer.as_str());
    type Headers<'a> = Vec<(&'a str, &'a str)>;
    let cases: Vec<(&str, Headers, u16)> = vec![
        ("no token", vec![], 401),
        ("a wrong token", vec![("Authorization", "Bearer nope")], 401),
        ("the token", vec![auth], 200),
        ("a foreign origin", vec![auth, ("Origin", "https://evil.example")], 403),
        ("a foreign origin, no token", vec![("Origin", "https://evil.example")], 403),
        ("a loopback origin", vec![auth, ("Origin", "http://localhost:6274")], 200),
        ("an allowed origin", vec![auth, ("Origin", "https://app.example")], 200),
        ("a foreign host", vec![auth, ("Host", "evil.example:80")], 403),
        ("the allowed origin's host", vec![auth, ("Host", "app.example")], 200),
    ];
    for (what, headers, expected) in cases {
        let (status, response) = raw(ptc.port, "/mcp", &headers, INITIALIZE).await;
        assert_eq!(status, expected, "{what}: {response}");
        if expected == 401 {
            assert!(response.contains("www-authenticate: Bearer"), "{what}: {response}");
        }
    }
    assert_eq!(raw(ptc.port, "/", &[auth], INITIALIZE).await.0, 404);
}

#[apply(integration_test!)]
async fn a_2025_client_gets_a_session_and_sse_and_a_2026_request_a_json_answer_without_one() {
    let ptc = HttpPtc::start(&config(&[], ""), &token_keys()).await;
    let bearer = format!("Bearer {TOKEN}");
    let (status, response) = raw(ptc.port, "/mcp", &[("Authorization", &bearer)], INITIALIZE).await;
    let head = response.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/event-stream") && head.contains("mcp-session-id: "), "{response}");
    let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let headers =
        [("Authorization", bearer.as_str()), ("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")];
    let (status, response) = raw(ptc.port, "/mcp", &headers, list).await;
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert_eq!(status, 200, "{response}");
    assert!(head.contains("content-type: application/json") && !head.contains("mcp-session-id"), "{response}");
    let names: Vec<String> = serde_json::from_str::<Value>(body).unwrap()["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["list_callable_tools", "inspect_tool", "execute_program"]);
}

#[apply(integration_test!)]
async fn a_non_loopback_address_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(binary())
        .args(["serve", "--http", "0.0.0.0:0"])
        .current_dir(dir.path())
        .env_remove("PTC_MCP_CONFIG")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("refusing to serve on 0.0.0.0:0 without serve.http.token"), "{stderr}");
}

#[apply(integration_test!)]
async fn runs_past_max_concurrent_runs_wait_and_past_the_queue_fail_with_a_clear_error() {
    let ptc = HttpPtc::start(&config(&[], ""), &format!("{}    max_concurrent_runs: 1\n", token_keys())).await;
    let clients = [ptc.client().await, ptc.client().await, ptc.client().await];
    if execute(&clients[0], "print('ok')").await.is_error == Some(true) {
        let _ = sandbox_unusable("the sandbox cannot run programs here");
        return;
    }
    let [first, second, third] = &clients;
    // The first holds the only slot; the second waits for it; the third finds the queue full.
    let (held, queued, refused) = tokio::join!(
        execute(first, "import asyncio\nawait asyncio.sleep(8)\nprint('first')"),
        async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            execute(second, "print('second')").await
        },
        async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            execute(third, "print('third')").await
        },
    );
    assert_eq!(text(&held), "[Script executed successfully]\nfirst");
    assert_eq!(text(&queued), "[Script executed successfully]\nsecond");
    assert_eq!(refused.is_error, Some(true));
    assert!(
        text(&refused).starts_with("[Script execution failed]\nExecutionError: the server is busy: "),
        "{}",
        text(&refused)
    );
}

#[apply(integration_test!)]
async fn one_session_cannot_cancel_another_sessions_run() {
    let ptc = HttpPtc::start(&config(&[], ""), &token_keys()).await;
    let (owner, other) = (ptc.client().await, ptc.client().await);
    let run = execute(&owner, "import asyncio\nawait asyncio.sleep(3)\nprint('finished')");
    let meddle = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Request ids are per session and both clients count alike: these name the owner's run too.
        for id in 0..8 {
            let cancel = CancelledNotificationParam::new(Some(RequestId::Number(id)), None);
            other.peer().notify_cancelled(cancel).await.unwrap();
        }
    };
    let (result, ()) = tokio::join!(run, meddle);
    if text(&result).contains("SandboxError") {
        let _ = sandbox_unusable(&text(&result));
        return;
    }
    assert_eq!(text(&result), "[Script executed successfully]\nfinished");
}

#[apply(integration_test!)]
async fn sigterm_ends_runs_in_flight_as_killed_and_exits_within_10s_leaving_nothing() {
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.jsonl");
    let text_config = format!(
        "{}  pool_size: 0\nlogging:\n  audit_file: {}\n",
        config(&[mock_server("mock", &[])], ""),
        json!(audit.display().to_string())
    );
    let mut ptc = HttpPtc::start(&text_config, &token_keys()).await;
    let client = ptc.client().await;
    let peer = client.peer().clone();
    let params = CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": "import asyncio\nawait asyncio.sleep(600)"}).as_object().unwrap().clone());
    let run = tokio::spawn(async move { peer.call_tool(params).await });
    let tmp = ptc.tmp();
    // Under docker a runner is a container, not a process of this machine (tests/integration/docker.rs checks
    // that none is left); the run is then given a moment to start, and is killed whether it had or not.
    let local_runners = sandbox_under_test() != "docker";
    if !local_runners {
        tokio::time::sleep(Duration::from_secs(2)).await;
    } else if !eventually(Duration::from_secs(30), || !runners_under(&tmp).is_empty()).await {
        let _ = sandbox_unusable("no runner started for the run");
        return;
    }
    ptc.signal(libc::SIGTERM);
    assert!(ptc.exited_within(Duration::from_secs(10)).await.success());
    if let Ok(Ok(Ok(result))) = tokio::time::timeout(Duration::from_secs(5), run).await {
        assert!(text(&result).contains("the server is shutting down"), "{}", text(&result));
    }
    let line: Value = serde_json::from_str(std::fs::read_to_string(&audit).unwrap().lines().last().unwrap()).unwrap();
    assert_eq!(line["outcome"], "killed");
    assert!(line["session"].as_str().unwrap().len() > 8, "the HTTP session id: {line}");
    if local_runners {
        assert_nothing_left(&tmp).await;
    }
}
