//! Remote downstreams: streamable HTTP (`transport: http`) and the legacy HTTP+SSE transport
//! (`transport: sse`), against our fault-injecting HTTP server and real third-party servers, all on
//! loopback ports chosen at run time.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::common::*;

/// How long a reconnect may take in these tests (the first retries come after 0.5 s, 1 s, 2 s).
const RECONNECT_LIMIT: Duration = Duration::from_secs(15);

/// A running HTTP MCP server (ours or a third party's), killed when dropped.
struct HttpServer {
    _child: Child,
    _stdout: Option<Lines<BufReader<ChildStdout>>>,
    port: u16,
    path: &'static str,
}

impl HttpServer {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}{}", self.port, self.path)
    }

    /// Starts a server that prints `PORT <n>` as its first line.
    async fn announced(mut command: Command, path: &'static str) -> HttpServer {
        let mut child = command.stdout(Stdio::piped()).kill_on_drop(true).spawn().expect("the server starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), stdout.next_line())
            .await
            .expect("the server announces its port in time")
            .unwrap()
            .expect("the server announces its port");
        let port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a port line: {line}"));
        HttpServer { _child: child, _stdout: Some(stdout), port, path }
    }

    /// Starts a server told its port through `PORT` (a free one picked here), waiting until it listens.
    async fn on_free_port(mut command: Command, path: &'static str) -> HttpServer {
        let port = free_port();
        let child = command
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "the server did not listen on port {port} in time");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        HttpServer { _child: child, _stdout: None, port, path }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Our fault-injecting server (tests/servers/http_fault_server.py) and the file it records events in.
struct Fault {
    server: HttpServer,
    state: PathBuf,
    flags: Vec<String>,
    _dir: TempDir,
}

impl Fault {
    async fn start(flags: &[&str]) -> Fault {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("events");
        let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let server = Fault::spawn(&flags, &state, 0).await;
        Fault { server, state, flags, _dir: dir }
    }

    async fn spawn(flags: &[String], state: &std::path::Path, port: u16) -> HttpServer {
        let mut command = Command::new("python3");
        command
            .arg(repo_path("tests/servers/http_fault_server.py"))
            .args(["--port", &port.to_string(), "--state-file"])
            .arg(state)
            .args(flags);
        let path = if flags.iter().any(|f| f == "--legacy-sse") { "/sse" } else { "/mcp" };
        HttpServer::announced(command, path).await
    }

    /// Starts the same server again on the same port (after it crashed).
    async fn restart(&mut self) {
        self.server = Fault::spawn(&self.flags, &self.state, self.server.port).await;
    }

    fn transport(&self) -> &'static str {
        if self.server.path == "/sse" { "sse" } else { "http" }
    }

    /// A config entry for this server.
    fn entry(&self, name: &str, headers: &[(&str, &str)]) -> String {
        remote_entry(name, self.transport(), &self.server.url(), headers)
    }

    /// How many times it recorded `event` (`initialize`, `stream`, `rejected`).
    fn count(&self, event: &str) -> usize {
        std::fs::read_to_string(&self.state).unwrap_or_default().lines().filter(|l| *l == event).count()
    }
}

fn remote_entry(name: &str, transport: &str, url: &str, headers: &[(&str, &str)]) -> String {
    let mut entry = format!("  - name: {name}\n    transport: {transport}\n    url: {}\n", json!(url));
    if !headers.is_empty() {
        entry.push_str("    headers:\n");
        for (key, value) in headers {
            entry.push_str(&format!("      {key}: {}\n", json!(value)));
        }
    }
    entry
}

/// The calls every transport must answer exactly as stdio does (same expectations as tests/registry.rs).
const SHAPES: &[(&str, &str)] = &[
    ("add(a=1, b=2)", "{'sum': 3}"),
    ("sdk_list()", "[1, 2, 3]"),
    ("multi_text()", "{'items': [1, 2], '_notes': ['Found 2 items']}"),
    ("echo(text='é ✓')", "{'text': 'é ✓'}"),
    ("fail()", "ToolError: 'mcp__S__fail' returned an error: something broke"),
    ("rpc_error()", "ToolError: 'mcp__S__rpc_error' failed: internal failure (JSON-RPC error -32000)"),
];

async fn assert_shapes(ptc: &Ptc, server: &str) {
    let prefix = format!("mcp__{server}__");
    let mut calls: Vec<String> = SHAPES.iter().map(|(call, _)| format!("{prefix}{call}")).collect();
    calls.push(format!("__import__('asyncio').gather(*[{prefix}add(a=i, b=i) for i in range(5)])"));
    let mut expected: Vec<String> = SHAPES.iter().map(|(_, shape)| shape.replace("mcp__S__", &prefix)).collect();
    expected.push("[{'sum': 0}, {'sum': 2}, {'sum': 4}, {'sum': 6}, {'sum': 8}]".to_string());
    assert_eq!(ptc.outcomes(&calls).await, expected, "server {server}");
}

#[apply(integration_test!)]
async fn streamable_http_with_json_sse_framed_and_session_responses_works_like_stdio() {
    let json = Fault::start(&[]).await;
    let framed = Fault::start(&["--response", "sse"]).await;
    let sessions = Fault::start(&["--sessions", "--response", "sse"]).await;
    let entries = [json.entry("json", &[]), framed.entry("framed", &[]), sessions.entry("sessions", &[])];
    let ptc = Ptc::start(&config(&entries, "")).await;
    let (_, problems) = ptc.list_callable_tools().await;
    assert_eq!(problems, None);
    for server in ["json", "framed", "sessions"] {
        assert_shapes(&ptc, server).await;
    }
    // A server that forgets the session answers 404; rmcp re-initialises and the call goes through.
    assert_eq!(ptc.outcome("mcp__sessions__expire_session()").await, "'expired'");
    assert_eq!(ptc.outcome("mcp__sessions__echo(after='expiry')").await, "{'after': 'expiry'}");
    for fault in [&json, &framed] {
        assert_eq!(fault.count("initialize"), 1, "no reconnects");
    }
}

/// A large structured result arrives whole over streamable HTTP, in a JSON body and as an SSE event (which
/// is held as its bytes before rmcp reads it: src/registry/http_held.rs).
#[apply(integration_test!)]
async fn a_large_official_sdk_style_list_arrives_whole_over_streamable_http() {
    let json = Fault::start(&[]).await;
    let framed = Fault::start(&["--response", "sse"]).await;
    let ptc = Ptc::start(&config(&[json.entry("json", &[]), framed.entry("framed", &[])], "")).await;
    for server in ["json", "framed"] {
        let program = format!(
            "rows = await mcp__{server}__sdk_rows(count=30_000)\n\
             expected = [{{'id': i, 'name': f'row {{i}}', 'tags': ['a', 'b'], 'score': i * 0.5}} for i in range(30_000)]\n\
             print(type(rows).__name__, rows == expected)"
        );
        let run = ptc.execute(&program).await;
        run.expect_ok();
        assert_eq!(run.structured()["output"], json!("list True\n"), "{server}");
    }
}

#[apply(integration_test!)]
async fn the_legacy_sse_transport_works_in_every_endpoint_style() {
    let ts = Fault::start(&["--legacy-sse", "--endpoint-style", "ts"]).await;
    let python = Fault::start(&["--legacy-sse", "--endpoint-style", "python"]).await;
    let absolute = Fault::start(&["--legacy-sse", "--endpoint-style", "absolute"]).await;
    let entries = [ts.entry("ts", &[]), python.entry("py", &[]), absolute.entry("abs", &[])];
    let ptc = Ptc::start(&config(&entries, "")).await;
    assert_eq!(ptc.list_callable_tools().await.1, None);
    for server in ["ts", "py", "abs"] {
        assert_shapes(&ptc, server).await;
    }
    // Notifications arrive on the stream too: a tools/list_changed makes ptc-mcp re-list that server.
    assert_eq!(ptc.outcome("mcp__ts__add_tool()").await, "'added dynamic_1'");
    let names = ptc.wait_for_tools(Duration::from_secs(5), |n| n.contains(&"mcp__ts__dynamic_1".to_string())).await;
    assert!(names.contains(&"mcp__ts__dynamic_1".to_string()), "{names:?}");
    // A line on the stream that is not JSON-RPC is bad data from a live server: ignored, no reconnect.
    assert_eq!(ptc.outcome("mcp__py__garbage()").await, "'ok'");
    for fault in [&ts, &python, &absolute] {
        assert_eq!(fault.count("stream"), 1, "no reconnects");
    }
}

#[apply(integration_test!)]
async fn a_connection_dropped_mid_call_is_lost_and_the_server_is_reconnected() {
    let json = Fault::start(&[]).await;
    let framed = Fault::start(&["--response", "sse"]).await;
    let legacy = Fault::start(&["--legacy-sse"]).await;
    let entries = [json.entry("json", &[]), framed.entry("framed", &[]), legacy.entry("legacy", &[])];
    let ptc = Ptc::start(&config(&entries, "")).await;
    let cases = [
        (&json, "json", "the request to http://127.0.0.1:"),
        (&framed, "framed", "the response stream closed before the final response"),
        (&legacy, "legacy", "the server closed the event stream"),
    ];
    for (fault, server, cause) in cases {
        let dropped = ptc.outcome(&format!("mcp__{server}__drop_connection()")).await;
        let expected = format!(
            "ToolError: 'mcp__{server}__drop_connection' failed: the connection to server '{server}' was lost: {cause}"
        );
        assert!(dropped.starts_with(&expected), "{dropped}");
        let opened = if server == "legacy" { "stream" } else { "initialize" };
        let deadline = tokio::time::Instant::now() + RECONNECT_LIMIT;
        while fault.count(opened) < 2 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(fault.count(opened), 2, "{server} was reconnected once");
        let tool = format!("mcp__{server}__echo");
        ptc.wait_for_tools(RECONNECT_LIMIT, |names| names.contains(&tool)).await;
        assert_eq!(ptc.outcome(&format!("{tool}(back=True)")).await, "{'back': True}");
    }
}

#[apply(integration_test!)]
async fn an_http_500_is_a_lost_connection_but_a_json_rpc_error_sent_with_500_is_not() {
    let fault = Fault::start(&[]).await;
    let ptc = Ptc::start(&config(&[fault.entry("f", &[])], "")).await;
    let rpc = ptc.outcome("mcp__f__rpc_error_500()").await;
    assert_eq!(rpc, "ToolError: 'mcp__f__rpc_error_500' failed: failed behind a 500 (JSON-RPC error -32603)");
    assert_eq!(fault.count("initialize"), 1, "a JSON-RPC error never reconnects, whatever its HTTP status");
    let bare = ptc.outcome("mcp__f__http_500()").await;
    assert_eq!(
        bare,
        "ToolError: 'mcp__f__http_500' failed: the connection to server 'f' was lost: the server answered HTTP 500 Internal Server Error"
    );
    ptc.wait_for_tools(RECONNECT_LIMIT, |names| names.contains(&"mcp__f__echo".to_string())).await;
    assert_eq!(ptc.outcome("mcp__f__echo(v=2)").await, "{'v': 2}");
    assert_eq!(fault.count("initialize"), 2, "the bare 500 made it reconnect");
}

#[apply(integration_test!)]
async fn errors_bad_data_timeouts_and_slow_answers_from_a_live_server_never_reconnect() {
    let http = Fault::start(&[]).await;
    let legacy = Fault::start(&["--legacy-sse"]).await;
    let slow = Fault::start(&["--slow", "1.5"]).await;
    let entries = [http.entry("h", &[]), legacy.entry("l", &[]), slow.entry("slow", &[])];
    let ptc = Ptc::start(&config(&entries, "  tool_call_timeout_seconds: 0.5\n")).await;
    for server in ["h", "l"] {
        let calls = ["fail()", "rpc_error()", "bad_schema()", "hang()", "echo(still='up')"];
        let outcomes = ptc.outcomes(&calls.map(|call| format!("mcp__{server}__{call}"))).await;
        assert_eq!(outcomes.last().unwrap(), "{'still': 'up'}", "{outcomes:?}");
    }
    let timed_out = ptc.outcome("mcp__slow__echo()").await;
    assert_eq!(timed_out, "ToolError: 'mcp__slow__echo' timed out after 0.5s (tool_call_timeout_seconds)");
    // Let the abandoned slow answer arrive, then make sure nothing was reconnected.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(ptc.list_callable_tools().await.1, None);
    assert_eq!((http.count("initialize"), legacy.count("stream"), slow.count("initialize")), (1, 1, 1));
}

#[apply(integration_test!)]
async fn a_server_that_goes_away_is_hidden_and_comes_back_on_the_same_port() {
    for flags in [&[][..], &["--legacy-sse"][..]] {
        let mut fault = Fault::start(flags).await;
        let ptc = Ptc::start(&config(&[fault.entry("gone", &[])], "")).await;
        let crashed = ptc.outcome("mcp__gone__crash()").await;
        assert!(
            crashed.starts_with("ToolError: 'mcp__gone__crash' failed: the connection to server 'gone' was lost"),
            "{crashed}"
        );
        let expected =
            format!("server 'gone' is unavailable: cannot connect to http://127.0.0.1:{}: ", fault.server.port);
        let problems = ptc.wait_for_problems(RECONNECT_LIMIT, |p| p.contains(&expected)).await;
        assert!(problems.contains(&expected), "{problems}");
        assert!(problems.contains("onnection refused"), "{problems}");
        assert!(
            !ptc.list_callable_tools().await.0.iter().any(|n| n.starts_with("mcp__gone__")),
            "its tools are hidden"
        );
        fault.restart().await;
        let names = ptc.wait_for_tools(RECONNECT_LIMIT, |n| n.contains(&"mcp__gone__echo".to_string())).await;
        assert!(names.contains(&"mcp__gone__echo".to_string()), "back after the restart: {names:?}");
        assert_eq!(ptc.outcome("mcp__gone__echo(again=1)").await, "{'again': 1}");
    }
}

#[apply(integration_test!)]
async fn a_server_answering_5xx_is_named_with_the_status_and_logged_once() {
    let http = Fault::start(&["--fail", "500"]).await;
    let legacy = Fault::start(&["--legacy-sse", "--fail", "503"]).await;
    let ptc = Ptc::start_logging(&config(&[http.entry("h", &[]), legacy.entry("l", &[])], ""), &[], Some("info")).await;
    let problems = ptc.list_callable_tools().await.1.unwrap_or_default();
    assert!(
        problems.contains("server 'h' is unavailable: the server answered HTTP 500 Internal Server Error"),
        "{problems}"
    );
    assert!(
        problems.contains("server 'l' is unavailable: GET of the event stream answered HTTP 503 Service Unavailable"),
        "{problems}"
    );
    // Retried with backoff (0.5 s, 1 s, ...), but the same reason is logged once, not on every attempt.
    let deadline = tokio::time::Instant::now() + RECONNECT_LIMIT;
    while (http.count("failed") < 3 || legacy.count("failed") < 3) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(http.count("failed") >= 3 && legacy.count("failed") >= 3, "retried");
    let log = ptc.log();
    for reason in ["the server answered HTTP 500", "GET of the event stream answered HTTP 503"] {
        assert_eq!(log.lines().filter(|l| l.contains(reason)).count(), 1, "{reason} logged once:\n{log}");
    }
}

#[apply(integration_test!)]
async fn configured_headers_are_sent_expanded_and_never_logged() {
    let http = Fault::start(&["--auth", "tok-s3cret"]).await;
    let legacy = Fault::start(&["--legacy-sse", "--auth", "tok-s3cret"]).await;
    let headers = [("Authorization", "Bearer ${PTC_TEST_TOKEN}"), ("X-Extra", "${PTC_TEST_TOKEN}-x")];
    let entries = [http.entry("h", &headers), legacy.entry("l", &headers)];
    let ptc = Ptc::start_logging(&config(&entries, ""), &[("PTC_TEST_TOKEN", "tok-s3cret")], Some("debug")).await;
    assert_eq!(ptc.list_callable_tools().await.1, None);
    assert_eq!(ptc.outcome("mcp__h__echo(a=1)").await, "{'a': 1}");
    assert_eq!(ptc.outcome("mcp__l__echo(a=2)").await, "{'a': 2}");
    assert_eq!(http.count("rejected") + legacy.count("rejected"), 0);
    let log = ptc.log();
    assert!(log.contains("connected"), "the log was captured: {log}");
    assert!(!log.contains("s3cret"), "a header value reached the log:\n{log}");
}

#[apply(integration_test!)]
async fn rejected_credentials_are_said_plainly_and_retried_at_the_capped_interval() {
    let challenged = Fault::start(&["--auth", "right"]).await;
    let forbidden = Fault::start(&["--auth", "right", "--auth-status", "403"]).await;
    let legacy = Fault::start(&["--legacy-sse", "--auth", "right"]).await;
    let wrong = [("Authorization", "Bearer wrong")];
    let entries = [challenged.entry("a401", &wrong), forbidden.entry("a403", &wrong), legacy.entry("sse401", &wrong)];
    let ptc = Ptc::start_logging(&config(&entries, ""), &[], Some("info")).await;
    let problems = ptc.list_callable_tools().await.1.unwrap_or_default();
    for (server, status) in [("a401", "401 Unauthorized"), ("a403", "403 Forbidden"), ("sse401", "401 Unauthorized")] {
        let expected = format!(
            "server '{server}' is unavailable: server '{server}' rejected the credentials (HTTP {status}); check the `headers` of this server in the config"
        );
        assert!(problems.contains(&expected), "{problems}");
    }
    let attempts = [challenged.count("rejected"), forbidden.count("rejected"), legacy.count("rejected")];
    // With the usual backoff (0.5 s, 1 s, ...) each would be retried at least twice in this time.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = [challenged.count("rejected"), forbidden.count("rejected"), legacy.count("rejected")];
    assert_eq!(attempts, later, "rejected credentials are retried at the capped interval, not at once");
    let log = ptc.log();
    for server in ["a401", "a403", "sse401"] {
        let lines = log.lines().filter(|l| l.contains(&format!("server '{server}' rejected the credentials"))).count();
        assert_eq!(lines, 1, "said once for {server}:\n{log}");
    }
    assert!(!log.contains("Bearer wrong") && !log.contains("wrong"), "{log}");
}

// --- third-party servers --------------------------------------------------------------------------

#[apply(integration_test!)]
async fn npm_server_everything_over_streamable_http_and_legacy_sse() {
    let Some(everything) = required_path("third-party-servers", "PTC_TEST_EVERYTHING_SERVER") else {
        return;
    };
    let start = |mode: &str| {
        let mut command = Command::new("node");
        command.arg(&everything).arg(mode);
        command
    };
    let http = HttpServer::on_free_port(start("streamableHttp"), "/mcp").await;
    let sse = HttpServer::on_free_port(start("sse"), "/sse").await;
    let entries = [remote_entry("ev_http", "http", &http.url(), &[]), remote_entry("ev_sse", "sse", &sse.url(), &[])];
    let ptc = Ptc::start(&config(&entries, "")).await;
    assert_eq!(ptc.list_callable_tools().await.1, None);
    for server in ["ev_http", "ev_sse"] {
        let code =
            format!("print(await mcp__{server}__echo(message='hi'))\nprint(await mcp__{server}__get_sum(a=2, b=3))");
        let text = ptc.execute(&code).await.expect_ok();
        assert!(text.starts_with("[Script executed successfully]\nEcho: hi\n"), "{server}: {text}");
        assert!(text.contains("5"), "{server}: {text}");
    }
}

#[apply(integration_test!)]
async fn the_python_sdk_as_a_stateless_json_http_server_and_as_a_legacy_sse_server() {
    let Some(python) = required_path("python-sdk", "PTC_TEST_SDK_PYTHON") else {
        return;
    };
    let start = |transport: &str| {
        let mut command = Command::new(&python);
        command.arg(repo_path("tests/servers/sdk_http_server.py")).args(["--transport", transport]);
        command
    };
    let http = HttpServer::announced(start("streamable-http"), "/mcp").await;
    let sse = HttpServer::announced(start("sse"), "/sse").await;
    let entries = [remote_entry("sdk_http", "http", &http.url(), &[]), remote_entry("sdk_sse", "sse", &sse.url(), &[])];
    let ptc = Ptc::start(&config(&entries, "")).await;
    assert_eq!(ptc.list_callable_tools().await.1, None);
    for server in ["sdk_http", "sdk_sse"] {
        assert_eq!(ptc.outcome(&format!("mcp__{server}__add(a=2, b=40)")).await, "42");
        assert_eq!(
            ptc.outcome(&format!("mcp__{server}__quote(symbol='ab')")).await,
            "{'symbol': 'AB', 'price': 123.5}"
        );
        // One text per element (looked up, not compared with every row) and pretty-printed JSON text (its
        // newlines must not end the runner's line).
        let code = format!(
            "rows = await mcp__{server}__rows(n=20000)\nprint(len(rows), rows[-1])\n\
             print(await mcp__{server}__report(n=2))"
        );
        let text = ptc.execute(&code).await.expect_ok();
        assert!(
            text.contains("20000 {'id': 19999, 'name': 'row 19999'}\n{'count': 2, 'names': ['row 0', 'row 1']}"),
            "{server}: {text}"
        );
        let failed = ptc.outcome(&format!("mcp__{server}__fail(message='nope')")).await;
        assert_eq!(
            failed,
            format!("ToolError: 'mcp__{server}__fail' returned an error: Error executing tool fail: nope")
        );
    }
}
