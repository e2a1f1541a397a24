//! Hosted servers behind MCP authorization (`auth: oauth`): `ptc-mcp login` against a real OAuth-protected
//! server we did not write (FastMCP's in-memory OAuth provider guarding a FastMCP server over streamable HTTP,
//! `tests/servers/oauth_server.py`), with a headless `$BROWSER` that approves at once
//! (`tests/clients/headless_browser.py`); then programs calling it across refreshes, rotation, revocation and
//! logout, and no token in anything a person, a program or a log sees. Needs `$PTC_TEST_FASTMCP_PYTHON`
//! (ci/test-deps.sh; `PTC_REQUIRE=fastmcp` makes it required).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::*;

/// How long a server that needs login, or a refresh, may take to be noticed here (busy machine).
const NOTICE_LIMIT: Duration = Duration::from_secs(20);

/// The OAuth-protected test server, killed when dropped, and a folder for the token store and logs.
struct OAuthServer {
    _child: Child,
    port: u16,
    dir: TempDir,
}

impl OAuthServer {
    /// Starts it with `flags` (see oauth_server.py); `None` (skipped) without FastMCP.
    async fn start(flags: &[&str]) -> Option<OAuthServer> {
        let python = required_path("fastmcp", "PTC_TEST_FASTMCP_PYTHON")?;
        let mut child = Command::new(python)
            .arg(repo_path("tests/servers/oauth_server.py"))
            .args(flags)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the OAuth server starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), stdout.next_line())
            .await
            .expect("the OAuth server announces its port in time")
            .unwrap()
            .expect("the OAuth server announces its port");
        let port = line.strip_prefix("PORT ").and_then(|p| p.parse().ok()).expect("a port line");
        // Keep reading (and dropping) its stdout so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
        Some(OAuthServer { _child: child, port, dir: tempfile::tempdir().unwrap() })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("tokens")
    }

    /// A config with one server `hosted` guarded by it (`auth` as given, YAML) and the token store.
    fn config(&self, auth: &str, extra: &str) -> PathBuf {
        let entry = format!("  - name: hosted\n    transport: http\n    url: {}\n    auth: {auth}\n", self.url());
        let text = format!("{}oauth:\n  token_store: {}\n{extra}", config(&[entry], ""), self.store().display());
        let path = self.dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// What it counted and every token (and code) it issued.
    async fn stats(&self) -> Value {
        serde_json::from_str(&http(self.port, "GET", "/test/stats").await).expect("stats are JSON")
    }

    async fn tokens_issued(&self) -> Vec<String> {
        let stats = self.stats().await;
        stats["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
    }

    #[allow(dead_code)]
    async fn hook(&self, path: &str) {
        http(self.port, "POST", path).await;
    }
}

/// A plain HTTP/1.1 request to 127.0.0.1:port; the response body.
async fn http(port: u16, method: &str, target: &str) -> String {
    let (status, body) = http_status(port, method, target).await;
    assert!(status.starts_with("HTTP/1.1 2"), "{method} {target}: {status}\n{body}");
    body
}

async fn http_status(port: u16, method: &str, target: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let request = format!(
        "{method} {target} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_string(&mut response)).await.unwrap().unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// The headless browser as `$BROWSER`, logging to `log`.
fn browser_env(log: &Path) -> Vec<(String, String)> {
    vec![
        ("BROWSER".into(), format!("python3 {}", repo_path("tests/clients/headless_browser.py").display())),
        ("HEADLESS_BROWSER_LOG".into(), log.display().to_string()),
    ]
}

/// What one command printed, and how it exited.
struct Shell {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `ptc-mcp ARGS --config CONFIG` with `env`, logging at `trace` (the log is in stderr).
async fn ptc_command(config: &Path, args: &[&str], env: &[(String, String)]) -> Shell {
    let output = Command::new(binary())
        .args(args)
        .arg("--config")
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output).await.expect("the command ends").unwrap();
    Shell {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `ptc-mcp login hosted` with the headless browser; asserts it succeeded.
async fn login(server: &OAuthServer, config: &Path) -> Shell {
    let env = browser_env(&server.dir.path().join("browser.log"));
    let out = ptc_command(config, &["login", "hosted"], &env).await;
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    out
}

/// A running ptc-mcp (MCP over stdio) on `config`, logging at `trace` to a file.
async fn serve(config: &Path) -> Ptc {
    let text = std::fs::read_to_string(config).unwrap();
    Ptc::start_logging(&text, &[], Some("trace")).await
}

const WHOAMI: &str = "mcp__hosted__whoami(greeting='hi')";

/// Polls `server_status()` until `check` holds on the `hosted` row (at most [`NOTICE_LIMIT`]).
async fn wait_for_status(ptc: &Ptc, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + NOTICE_LIMIT;
    loop {
        let run = ptc.execute("import json\nprint(json.dumps((await server_status())['hosted']))").await;
        let row: Value =
            serde_json::from_str(run.structured()["output"].as_str().unwrap_or("null").trim()).unwrap_or(Value::Null);
        if check(&row) || tokio::time::Instant::now() > deadline {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn assert_no_token_in(what: &str, text: &str, tokens: &[String]) {
    for token in tokens {
        assert!(!text.contains(token.as_str()), "{what} shows a token or code: {token}\n{text}");
    }
}

#[apply(integration_test!)]
async fn a_login_lets_a_running_server_call_the_hosted_server_and_no_token_is_shown_anywhere() {
    let Some(server) = OAuthServer::start(&[]).await else { return };
    let audit = server.dir.path().join("audit.jsonl");
    let config = server.config("oauth", &format!("logging:\n  audit_file: {}\n  audit_code: true\n", audit.display()));

    // Before any login: check says what to run, and so does a program's call.
    let check = ptc_command(&config, &["check"], &[]).await;
    assert_eq!(check.status, Some(1), "{}", check.stdout);
    let row = check.stdout.lines().find(|l| l.starts_with("hosted")).unwrap_or_default().to_string();
    assert!(row.contains("needs login") && row.contains("run `ptc-mcp login hosted`"), "{}", check.stdout);
    let ptc = serve(&config).await;
    let before = wait_for_status(&ptc, |row| row["error"].as_str().is_some_and(|e| e.contains("needs login"))).await;
    assert_eq!(before["error"], "server 'hosted' needs login: run `ptc-mcp login hosted`", "{before}");
    let refused = ptc.execute(&format!("print(await {WHOAMI})")).await.expect_error();
    assert!(refused.contains("its server 'hosted' needs login: run `ptc-mcp login hosted`"), "{refused}");

    let logged_in = login(&server, &config).await;
    assert!(logged_in.stdout.contains("open this URL in a browser:\n\n  http://127.0.0.1:"), "{}", logged_in.stdout);
    assert!(logged_in.stdout.contains("ptc-mcp: 'hosted' logged in at http://127.0.0.1:"), "{}", logged_in.stdout);
    assert!(logged_in.stdout.contains("refreshed automatically"), "{}", logged_in.stdout);
    let files: Vec<_> = std::fs::read_dir(server.store()).unwrap().map(|e| e.unwrap().path()).collect();
    let token_file = files.iter().find(|p| p.extension().is_some_and(|e| e == "json")).expect("a token file");
    assert_eq!(std::fs::metadata(token_file).unwrap().permissions().mode() & 0o777, 0o600);

    // The running server notices the login by itself and the program's call goes through.
    let row = wait_for_status(&ptc, |row| row["connected"] == true).await;
    assert_eq!(row, json!({"connected": true, "tools": 1, "error": null}));
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
    let inspect = ptc.call("inspect_tool", json!({"tool_name": "mcp__hosted__whoami"})).await;
    let listed = ptc.call("list_callable_tools", json!({"detail": "signatures"})).await;
    let status = ptc.execute("print(await server_status())").await.text();

    let tokens = server.tokens_issued().await;
    assert_eq!(tokens.len(), 3, "one code, one access and one refresh token: {tokens:?}");
    let stored = std::fs::read_to_string(token_file).unwrap();
    assert!(tokens.iter().take(2).all(|t| stored.contains(t.as_str())), "the file holds the access and refresh tokens");
    drop(ptc.client);
    let _ = tokio::time::timeout(Duration::from_secs(10), ptc.child.wait_with_output()).await;
    let log = std::fs::read_to_string(ptc.dir.path().join("ptc.log")).unwrap();
    assert!(log.contains("connected server=hosted"), "{log}");
    for (what, text) in [
        ("the login's output", format!("{}{}", logged_in.stdout, logged_in.stderr)),
        ("check's output", format!("{}{}", check.stdout, check.stderr)),
        ("the server's trace-level log", log),
        ("the audit file", std::fs::read_to_string(&audit).unwrap()),
        ("inspect_tool", format!("{inspect:?}")),
        ("list_callable_tools", format!("{listed:?}")),
        ("server_status()", status),
    ] {
        assert_no_token_in(what, &text, &tokens);
    }
}
