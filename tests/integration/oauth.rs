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
    /// `http` or `sse`.
    transport: &'static str,
    dir: TempDir,
}

impl OAuthServer {
    /// Starts it with `flags` (see oauth_server.py); `None` (skipped) without FastMCP.
    async fn start(flags: &[&str]) -> Option<OAuthServer> {
        let python = required_path("fastmcp", "PTC_TEST_FASTMCP_PYTHON")?;
        let mut child = Command::new(python)
            .arg(repo_path("tests/servers/oauth_server.py"))
            .args(flags)
            .env("FASTMCP_LOG_LEVEL", "WARNING")
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
        let transport = if flags.contains(&"sse") { "sse" } else { "http" };
        Some(OAuthServer { _child: child, port, transport, dir: tempfile::tempdir().unwrap() })
    }

    fn url(&self) -> String {
        let path = if self.transport == "sse" { "/sse" } else { "/mcp" };
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("tokens")
    }

    /// A config with one server `hosted` guarded by it (`auth` as given, YAML) and the token store.
    fn config(&self, auth: &str, extra: &str) -> PathBuf {
        let entry =
            format!("  - name: hosted\n    transport: {}\n    url: {}\n    auth: {auth}\n", self.transport, self.url());
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

/// The command a server that needs login names, for a ptc-mcp that loaded `config`.
fn login_command(config: &Path) -> String {
    format!("ptc-mcp login hosted --config {}", config.display())
}

/// Where [`serve`]'s ptc-mcp has its config.
fn config_of(ptc: &Ptc) -> PathBuf {
    ptc.dir.path().join("config.yaml")
}

const WHOAMI: &str = "mcp__hosted__whoami(greeting='hi')";

/// The server started with `flags`, a login to it (`auth: oauth`), and a ptc-mcp serving on that config whose
/// first call went through; `None` (skipped) without FastMCP.
async fn logged_in_and_serving(flags: &[&str]) -> Option<(OAuthServer, PathBuf, Ptc)> {
    let server = OAuthServer::start(flags).await?;
    let config = server.config("oauth", "");
    login(&server, &config).await;
    let ptc = serve(&config).await;
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
    Some((server, config, ptc))
}

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
    let command = format!("run `{}`", login_command(&config));
    assert!(row.contains("needs login") && row.contains(&command), "{}", check.stdout);
    let ptc = serve(&config).await;
    let before = wait_for_status(&ptc, |row| row["error"].as_str().is_some_and(|e| e.contains("needs login"))).await;
    let needs_login = format!("server 'hosted' needs login: run `{}`", login_command(&config_of(&ptc)));
    assert_eq!(before["error"], needs_login.as_str(), "{before}");
    let refused = ptc.execute(&format!("print(await {WHOAMI})")).await.expect_error();
    assert!(refused.contains(&format!("its {needs_login}")), "{refused}");

    let logged_in = login(&server, &config).await;
    assert!(logged_in.stdout.contains("open this URL in a browser:\n\n  http://127.0.0.1:"), "{}", logged_in.stdout);
    assert!(logged_in.stdout.contains("ptc-mcp: 'hosted' logged in at http://127.0.0.1:"), "{}", logged_in.stdout);
    // PKCE S256, and the resource indicator naming the server (RFC 8707).
    let resource = format!("&resource=http%3A%2F%2F127.0.0.1%3A{}%2Fmcp", server.port);
    assert!(logged_in.stdout.contains("&code_challenge_method=S256&"), "{}", logged_in.stdout);
    assert!(logged_in.stdout.contains(&resource), "{}", logged_in.stdout);
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

/// The grant in the token file: its JSON.
fn stored_grant(server: &OAuthServer) -> Value {
    let file = std::fs::read_dir(server.store())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .expect("a token file");
    serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

#[apply(integration_test!)]
async fn short_lived_tokens_are_refreshed_inside_a_run_and_each_rotated_refresh_token_is_stored() {
    let Some(server) = OAuthServer::start(&["--token-seconds", "4"]).await else { return };
    let config = server.config("oauth", "");
    login(&server, &config).await;
    let ptc = serve(&config).await;
    wait_for_status(&ptc, |row| row["connected"] == true).await;
    // Nine seconds of calls with tokens that live four: renewed before they expire, never a failed call.
    let code = "import asyncio\nfor i in range(10):\n    print(await mcp__hosted__whoami(greeting=str(i)))\n    await asyncio.sleep(0.9)";
    let text = ptc.execute(code).await.expect_ok();
    assert!(text.contains("9, authorized caller"), "{text}");
    let stats = server.stats().await;
    assert!(stats["refreshes"].as_u64().unwrap() >= 2, "{stats}");
    // Each refresh rotated the refresh token (the old one is gone at the server): the file has the last one.
    let tokens = server.tokens_issued().await;
    let last_refresh = tokens.iter().rev().find(|t| t.starts_with("test_refresh_token_")).unwrap();
    assert_eq!(stored_grant(&server)["credentials"]["token_response"]["refresh_token"], last_refresh.as_str());
    assert_no_token_in("the server's trace-level log across refreshes", &ptc.log(), &tokens);
}

#[apply(integration_test!)]
async fn a_rejected_token_is_renewed_once_for_all_the_calls_that_met_the_rejection() {
    let Some((server, _config, ptc)) = logged_in_and_serving(&[]).await else { return };
    // The server forgets its access tokens: the next calls all get a 401 with the same token.
    server.hook("/test/forget-access-tokens").await;
    let program = "import asyncio\nrs = await asyncio.gather(*[mcp__hosted__whoami(greeting=str(i)) for i in range(4)])\nprint(len(rs))";
    let (a, b) = tokio::join!(ptc.execute(program), ptc.execute(program));
    assert_eq!((a.expect_ok().lines().nth(1), b.expect_ok().lines().nth(1)), (Some("4"), Some("4")));
    assert_eq!(server.stats().await["refreshes"], 1, "two programs, eight calls, one refresh");
    assert_no_token_in("the server's trace-level log after a 401", &ptc.log(), &server.tokens_issued().await);
}

#[apply(integration_test!)]
async fn two_processes_renewing_at_once_spend_the_rotating_refresh_token_once() {
    let Some(server) = OAuthServer::start(&[]).await else { return };
    let config = server.config("oauth", "");
    login(&server, &config).await;
    let program = server.dir.path().join("program.py");
    std::fs::write(&program, format!("print(await {WHOAMI})\n")).unwrap();
    let args = ["run", program.to_str().unwrap()];
    let run = || ptc_command(&config, &args, &[]);
    assert_eq!(run().await.status, Some(0));
    server.hook("/test/forget-access-tokens").await;
    let (a, b) = tokio::join!(run(), run());
    assert_eq!((a.status, b.status), (Some(0), Some(0)), "{}\n{}", a.stderr, b.stderr);
    assert_eq!(server.stats().await["refreshes"], 1, "the second process took the first one's token");
}

#[apply(integration_test!)]
async fn revoked_tokens_make_the_server_need_login_at_once_and_a_new_login_brings_it_back() {
    let Some((server, config, ptc)) = logged_in_and_serving(&[]).await else { return };
    server.hook("/test/revoke-all").await;
    let started = std::time::Instant::now();
    let failed = ptc.outcome(WHOAMI).await;
    let needs_login = format!("server 'hosted' needs login: run `{}`", login_command(&config_of(&ptc)));
    assert_eq!(failed, format!("ToolError: {needs_login}"));
    assert!(started.elapsed() < NOTICE_LIMIT, "no hang: {:?}", started.elapsed());
    let row = wait_for_status(&ptc, |row| row["connected"] == false).await;
    assert_eq!(row["error"], needs_login.as_str());
    let refreshes = server.stats().await["refreshes"].clone();
    // Later calls fail at once, without asking the authorization server again (no retry storm).
    let again = ptc.execute(&format!("print(await {WHOAMI})")).await.expect_error();
    assert!(again.contains(&needs_login), "{again}");
    assert_eq!(server.stats().await["refreshes"], refreshes);
    login(&server, &config).await;
    wait_for_status(&ptc, |row| row["connected"] == true).await;
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
}

#[apply(integration_test!)]
async fn without_dynamic_registration_or_a_client_id_the_login_says_to_register_an_app() {
    let Some(server) = OAuthServer::start(&["--no-registration"]).await else { return };
    let config = server.config("oauth", "");
    let env = browser_env(&server.dir.path().join("browser.log"));
    let out = ptc_command(&config, &["login", "hosted"], &env).await;
    assert_eq!(out.status, Some(1), "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!(
            "ptc-mcp: the authorization server of 'hosted' (http://127.0.0.1:{}/) offers no dynamic client registration \
             and takes no client ID metadata documents: register an OAuth app with the provider",
            server.port
        )),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("then set auth.client_id (and client_secret, callback_port: PORT)"), "{}", out.stderr);
    assert!(!server.dir.path().join("browser.log").exists(), "no browser was opened");
}

#[apply(integration_test!)]
async fn a_pre_registered_client_logs_in_on_its_registered_port_with_its_secret() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let flags = ["--no-registration", "--client", "ptc-app:app-s3cret", "--client-redirect", &redirect];
    let Some(server) = OAuthServer::start(&flags).await else { return };
    let auth = format!("{{type: oauth, client_id: ptc-app, client_secret: '${{APP_SECRET}}', callback_port: {port}}}");
    let config = server.config(&auth, "");
    let mut env = browser_env(&server.dir.path().join("browser.log"));
    env.push(("APP_SECRET".into(), "app-s3cret".into()));
    let out = ptc_command(&config, &["login", "hosted"], &env).await;
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("client_id=ptc-app&"), "{}", out.stdout);
    assert!(!out.stdout.contains("app-s3cret") && !out.stderr.contains("app-s3cret"));
    let grant = stored_grant(&server);
    assert_eq!(grant["credentials"]["client_id"], "ptc-app");
    assert!(grant.get("client_secret").is_none(), "a configured secret is not copied to the file: {grant}");
    let stats = server.stats().await;
    assert_eq!((stats["registrations"].as_u64(), stats["codes"].as_u64()), (Some(0), Some(1)));
    let text = std::fs::read_to_string(&config).unwrap();
    let ptc = Ptc::start_with_env(&text, &[("APP_SECRET", "app-s3cret")]).await;
    wait_for_status(&ptc, |row| row["connected"] == true).await;
    // A refresh authenticates with the configured secret.
    server.hook("/test/forget-access-tokens").await;
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
    assert_eq!(server.stats().await["refreshes"], 1);
}

#[apply(integration_test!)]
async fn logout_revokes_the_tokens_and_deletes_them() {
    let Some(server) = OAuthServer::start(&[]).await else { return };
    let config = server.config("oauth", "");
    login(&server, &config).await;
    let out = ptc_command(&config, &["logout", "hosted"], &[]).await;
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    assert_eq!(
        out.stdout,
        format!(
            "ptc-mcp: logged out of 'hosted': deleted 1 token file(s); revoked the refresh token and access token at \
             http://127.0.0.1:{}\n",
            server.port
        )
    );
    assert!(server.stats().await["revocations"].as_u64().unwrap() >= 1);
    let left: Vec<_> = std::fs::read_dir(server.store()).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.iter().all(|p| p.extension().is_none_or(|e| e != "json")), "{left:?}");
    let again = ptc_command(&config, &["logout", "hosted"], &[]).await;
    assert_eq!(again.stdout, "ptc-mcp: no tokens were stored for 'hosted'\n");
    let check = ptc_command(&config, &["check"], &[]).await;
    assert!(check.stdout.contains("needs login"), "{}", check.stdout);
}

/// `ptc-mcp login hosted --no-browser`, running; its stdout lines until the authorization URL.
async fn login_without_browser(server: &OAuthServer, config: &Path) -> (Child, String) {
    let log = server.dir.path().join("browser.log");
    let mut child = Command::new(binary())
        .args(["login", "hosted", "--no-browser", "--config"])
        .arg(config)
        .envs(browser_env(&log))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let url = loop {
        let line = tokio::time::timeout(NOTICE_LIMIT, lines.next_line()).await.unwrap().unwrap().expect("a URL line");
        if let Some(url) = line.strip_prefix("  http") {
            break format!("http{url}");
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

/// The redirect the authorization server sends the browser to for `url` (it approves at once).
async fn approve(server: &OAuthServer, url: &str) -> String {
    let target = url.strip_prefix(&format!("http://127.0.0.1:{}", server.port)).unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port)).await.unwrap();
    let request = format!("GET {target} HTTP/1.1\r\nhost: 127.0.0.1:{}\r\nconnection: close\r\n\r\n", server.port);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let location = response.lines().find_map(|l| l.strip_prefix("location: ").or_else(|| l.strip_prefix("Location: ")));
    location.unwrap_or_else(|| panic!("no redirect: {response}")).trim().to_string()
}

#[apply(integration_test!)]
async fn no_browser_only_prints_the_url_and_a_forged_state_is_refused_while_the_real_redirect_succeeds() {
    let Some(server) = OAuthServer::start(&[]).await else { return };
    let config = server.config("oauth", "");
    let (child, url) = login_without_browser(&server, &config).await;
    let redirect = approve(&server, &url).await;
    let callback = loopback_target(&redirect);
    let port: u16 = callback.0;
    let forged = callback.1.replace("state=", "state=forged");
    let (status, _) = http_status(port, "GET", &forged).await;
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    let (status, _) = http_status(port, "GET", "/callback?code=made-up&state=also-made-up").await;
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");
    let (status, _) = http_status(port, "GET", &callback.1).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let output = tokio::time::timeout(NOTICE_LIMIT, child.wait_with_output()).await.unwrap().unwrap();
    assert!(output.status.success());
    assert!(!server.dir.path().join("browser.log").exists(), "--no-browser opened no browser");
    assert_eq!(server.stats().await["codes"], 1);
    assert!(stored_grant(&server)["credentials"]["token_response"]["access_token"].is_string());
}

/// `(port, target)` of a loopback URL.
fn loopback_target(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("not a loopback URL: {url}"));
    let (port, target) = rest.split_at(rest.find('/').unwrap());
    (port.parse().unwrap(), target.to_string())
}

#[apply(integration_test!)]
async fn client_credentials_buy_tokens_without_a_login_and_buy_a_new_one_when_it_expires() {
    let Some(server) =
        OAuthServer::start(&["--client-credentials", "robot:r0bot-secret", "--token-seconds", "3"]).await
    else {
        return;
    };
    let auth = "{type: client_credentials, client_id: robot, client_secret: '${ROBOT_SECRET}', scopes: [read]}";
    let config = server.config(auth, "");
    let text = std::fs::read_to_string(&config).unwrap();
    let ptc = Ptc::start_logging(&text, &[("ROBOT_SECRET", "r0bot-secret")], Some("trace")).await;
    wait_for_status(&ptc, |row| row["connected"] == true).await;
    let code = "import asyncio\nfor i in range(5):\n    print(await mcp__hosted__whoami(greeting=str(i)))\n    await asyncio.sleep(1)";
    assert!(ptc.execute(code).await.expect_ok().contains("4, authorized caller"));
    assert!(server.stats().await["client_credentials"].as_u64().unwrap() >= 2, "a new token before the first expired");
    assert!(!server.store().exists(), "client credentials' tokens stay in memory");
    let tokens = server.tokens_issued().await;
    assert_no_token_in("the server's log", &ptc.log(), &tokens);
    let login = ptc_command(&config, &["login", "hosted"], &[("ROBOT_SECRET".into(), "x".into())]).await;
    assert_eq!(login.status, Some(2));
    assert!(
        login.stderr.contains("uses client credentials: it gets its tokens itself, no login needed"),
        "{}",
        login.stderr
    );
}

#[apply(integration_test!)]
async fn a_call_refused_for_a_missing_scope_makes_the_next_login_ask_for_the_union() {
    let Some(server) = OAuthServer::start(&["--required-scope", "extra"]).await else { return };
    let config = server.config("{type: oauth, scopes: [basic]}", "");
    login(&server, &config).await;
    let ptc = serve(&config).await;
    let row = wait_for_status(&ptc, |row| row["error"].as_str().is_some_and(|e| e.contains("more scopes"))).await;
    assert_eq!(
        row["error"],
        format!("server 'hosted' needs login with more scopes (extra): run `{}`", login_command(&config_of(&ptc)))
            .as_str(),
        "{row}"
    );
    assert_eq!(stored_grant(&server)["wanted_scopes"], json!(["extra"]));
    let again = login(&server, &config).await;
    assert!(again.stdout.contains("scopes basic extra"), "{}", again.stdout);
    assert!(again.stdout.contains("scope=basic+extra"), "{}", again.stdout);
    wait_for_status(&ptc, |row| row["connected"] == true).await;
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
}

#[apply(integration_test!)]
async fn a_legacy_sse_server_gets_the_same_tokens_and_renews_a_rejected_one() {
    let Some((server, _config, ptc)) = logged_in_and_serving(&["--transport", "sse"]).await else { return };
    server.hook("/test/forget-access-tokens").await;
    assert_eq!(ptc.outcome(WHOAMI).await, "'hi, authorized caller'");
    assert_eq!(server.stats().await["refreshes"], 1);
}

/// An MCP client whose person opens every URL-mode elicitation's URL in the headless browser at once.
#[derive(Clone)]
struct OpensUrls {
    urls: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for OpensUrls {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}})).unwrap();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("url-opener", "1.0"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::service::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let rmcp::model::ElicitRequestParams::UrlElicitationParams { url, .. } = request else {
            return Ok(rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline));
        };
        self.urls.lock().unwrap().push(url.clone());
        let mut browser = Command::new("python3")
            .arg(repo_path("tests/clients/headless_browser.py"))
            .arg(url)
            .stdout(Stdio::null())
            .spawn()
            .expect("the browser starts");
        // The person comes back later: the answer goes out at once, as a client's "opened it" would.
        tokio::spawn(async move { browser.wait().await });
        Ok(rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept))
    }
}

#[apply(integration_test!)]
async fn a_client_with_url_elicitation_is_sent_to_the_login_and_the_program_then_runs() {
    use rmcp::ServiceExt;
    let Some(server) = OAuthServer::start(&[]).await else { return };
    let config = server.config("oauth", "");
    let mut child = stdio_child(&config);
    let opener = OpensUrls { urls: Default::default() };
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = opener.clone().serve(transport).await.expect("initialize succeeds");
    let run_whoami = async || {
        let code = json!({"code": format!("print(await {WHOAMI})")});
        let params = rmcp::model::CallToolRequestParams::new("execute_program")
            .with_arguments(code.as_object().unwrap().clone());
        let result = tokio::time::timeout(Duration::from_secs(120), client.peer().call_tool(params));
        text_block(&result.await.unwrap().unwrap(), 0)
    };
    let text = run_whoami().await;
    assert!(text.contains("hi, authorized caller"), "{text}");
    let urls = opener.urls.lock().unwrap().clone();
    assert_eq!(urls.len(), 1, "{urls:?}");
    assert!(urls[0].starts_with(&format!("http://127.0.0.1:{}/authorize?", server.port)), "{urls:?}");
    assert_eq!(server.stats().await["codes"], 1);
    // Logged in for good: the next program runs without asking.
    assert!(run_whoami().await.contains("hi, authorized caller"));
    assert_eq!(opener.urls.lock().unwrap().len(), 1);
}
