//! Shared fixtures: the built `ptc-mcp` binary driven over stdio by an rmcp client, configs pointing at our
//! mock downstream servers, and guards for what a test needs from the machine.

#![allow(dead_code)] // Each suite uses a different part of the fixtures.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub use macro_rules_attribute::apply;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Map, Value, json};
use tempfile::TempDir;
use tokio::process::{Child, Command};

/// The `ptc-mcp` binary under test: the one cargo built, or `$PTC_TEST_BINARY` (for runs of a copied test
/// binary, e.g. as another user by ci/test-as-user.sh).
pub fn binary() -> PathBuf {
    std::env::var_os("PTC_TEST_BINARY").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ptc-mcp")), PathBuf::from)
}

/// A path in the repository (`$PTC_TEST_REPO` for a copied checkout).
pub fn repo_path(relative: &str) -> PathBuf {
    let root =
        std::env::var_os("PTC_TEST_REPO").map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    root.join(relative)
}

/// A YAML server entry for our mock downstream, with extra command-line flags.
pub fn mock_server(name: &str, flags: &[&str]) -> String {
    let mut args = vec![repo_path("tests/servers/mock_server.py").display().to_string(), "--name".into(), name.into()];
    args.extend(flags.iter().map(|f| f.to_string()));
    format!("  - name: {name}\n    command: python3\n    args: {}\n", json!(args))
}

/// A config with these server entries (already YAML list items) and extra `execution` keys.
pub fn config(servers: &[String], execution: &str) -> String {
    let servers =
        if servers.is_empty() { "servers: []\n".to_string() } else { format!("servers:\n{}", servers.concat()) };
    format!("{servers}execution:\n  sandbox: {}\n{}{execution}", sandbox_under_test(), sandbox_keys())
}

/// `execution` keys the sandbox under test needs here: for `docker`, the runner image that
/// ci/docker-setup.sh builds (`PTC_TEST_DOCKER_IMAGE`, default `ptc-mcp-runner:local`) and the OCI runtime
/// `PTC_TEST_DOCKER_RUNTIME` names (e.g. `runsc`; unset: the engine's default); for `landlock` with
/// `PTC_TEST_LANDLOCK_MODE=degraded`, the opt-in to run degraded.
pub fn sandbox_keys() -> String {
    match sandbox_under_test().as_str() {
        "docker" => {
            let runtime = docker_runtime().map(|runtime| format!("    runtime: {runtime}\n")).unwrap_or_default();
            format!("  docker:\n    image: {}\n{runtime}", docker_image())
        }
        "landlock" if std::env::var("PTC_TEST_LANDLOCK_MODE").as_deref() == Ok("degraded") => {
            "  allow_degraded: true\n".to_string()
        }
        _ => String::new(),
    }
}

pub fn docker_image() -> String {
    std::env::var("PTC_TEST_DOCKER_IMAGE").unwrap_or_else(|_| "ptc-mcp-runner:local".to_string())
}

/// The OCI runtime the docker sandbox's containers run with: `PTC_TEST_DOCKER_RUNTIME`, else the engine's default.
pub fn docker_runtime() -> Option<String> {
    std::env::var("PTC_TEST_DOCKER_RUNTIME").ok().filter(|runtime| !runtime.is_empty())
}

/// Whether programs run under gVisor: the docker sandbox with the runtime `runsc`.
pub fn under_gvisor() -> bool {
    sandbox_under_test() == "docker" && docker_runtime().as_deref() == Some("runsc")
}

/// Asserts that a run ended because its program corrupted the channel, for `reason` (e.g. "a message of ").
/// Under gVisor a huge write to the channel may be cut short (the program does not resume it), so the server
/// may first read a line broken off mid-way: corrupted all the same, for another reason.
pub fn assert_corrupted_channel(text: &str, reason: &str) {
    let corrupted = "the program corrupted its channel to the server (";
    let expected = if under_gvisor() { corrupted.to_string() } else { format!("{corrupted}{reason}") };
    assert!(text.contains(&expected), "{text}");
}

/// The sandbox the suite runs programs in: `PTC_TEST_SANDBOX`, default `none`.
pub fn sandbox_under_test() -> String {
    std::env::var("PTC_TEST_SANDBOX").unwrap_or_else(|_| "none".to_string())
}

/// `ptc-mcp --config CONFIG` serving MCP on its piped stdin and stdout, logging at `warn` to the test's stderr;
/// for a test that speaks to it with a client of its own.
pub fn stdio_child(config: &Path) -> Child {
    Command::new(binary())
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the ptc-mcp binary starts")
}

/// A running `ptc-mcp` with an MCP client session to it.
pub struct Ptc {
    pub client: RunningService<RoleClient, ()>,
    pub child: Child,
    pub dir: TempDir,
}

impl Ptc {
    /// Starts the binary on `config_text` (written to a temp dir, which is also its working directory).
    pub async fn start(config_text: &str) -> Ptc {
        Ptc::start_with_env(config_text, &[]).await
    }

    pub async fn start_with_env(config_text: &str, env: &[(&str, &str)]) -> Ptc {
        Ptc::start_logging(config_text, env, None).await
    }

    /// Like [`Ptc::start_with_env`], with values that need not be UTF-8.
    pub async fn start_with_os_env(config_text: &str, env: &[(&str, &std::ffi::OsStr)]) -> Ptc {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, config_text).unwrap();
        let workdir = dir.path().to_path_buf();
        Ptc::launch(&path, &workdir, env, dir, None).await
    }

    /// Like [`Ptc::start_with_env`]; with `log_level`, its log goes at that level to a file that
    /// [`Ptc::log`] reads (otherwise at `warn` to the test's stderr).
    pub async fn start_logging(config_text: &str, env: &[(&str, &str)], log_level: Option<&str>) -> Ptc {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, config_text).unwrap();
        let workdir = dir.path().to_path_buf();
        let env: Vec<(&str, &std::ffi::OsStr)> = env.iter().map(|(k, v)| (*k, std::ffi::OsStr::new(*v))).collect();
        Ptc::launch(&path, &workdir, &env, dir, log_level).await
    }

    /// Starts the binary on an existing config file, in `workdir`.
    pub async fn start_from_file(config: &Path, workdir: &Path) -> Ptc {
        Ptc::launch(config, workdir, &[], tempfile::tempdir().unwrap(), None).await
    }

    async fn launch(
        config: &Path,
        workdir: &Path,
        env: &[(&str, &std::ffi::OsStr)],
        dir: TempDir,
        log_level: Option<&str>,
    ) -> Ptc {
        let stderr = match log_level {
            Some(_) => Stdio::from(std::fs::File::create(dir.path().join("ptc.log")).unwrap()),
            None => Stdio::inherit(),
        };
        let mut child = Command::new(binary())
            .arg("--config")
            .arg(config)
            .current_dir(workdir)
            .envs(env.iter().copied())
            .env("RUST_LOG", log_level.unwrap_or("warn"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("the ptc-mcp binary starts");
        let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
        let client = tokio::time::timeout(Duration::from_secs(10), ().serve(transport))
            .await
            .expect("initialize is answered in time")
            .expect("initialize succeeds");
        Ptc { client, child, dir }
    }

    pub async fn call(&self, tool: &str, arguments: Value) -> CallToolResult {
        let arguments: Map<String, Value> = arguments.as_object().cloned().unwrap_or_default();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        tokio::time::timeout(Duration::from_secs(120), self.client.peer().call_tool(params))
            .await
            .expect("the tool call is answered in time")
            .expect("the tool call succeeds at the protocol level")
    }

    /// Runs a program; returns the whole result.
    pub async fn execute(&self, code: &str) -> Run {
        Run(self.call("execute_program", json!({ "code": code })).await)
    }

    pub async fn list_callable_tools(&self) -> (Vec<String>, Option<String>) {
        let result = self.call("list_callable_tools", json!({})).await;
        let names = serde_json::from_str(&text_block(&result, 0)).unwrap();
        let problems = result.content.get(1).and_then(|b| b.as_text()).map(|t| t.text.clone());
        (names, problems)
    }

    /// What the server logged so far (started with [`Ptc::start_logging`] and a level).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("ptc.log")).unwrap_or_default()
    }

    /// Runs `print(repr(await <call>))` (or the ToolError) and returns the printed line.
    pub async fn outcome(&self, call: &str) -> String {
        let code = format!("try:\n    print(repr(await {call}))\nexcept ToolError as e:\n    print('ToolError:', e)");
        let run = self.execute(&code).await;
        run.expect_ok();
        run.structured()["output"].as_str().unwrap().trim_end().to_string()
    }

    /// [`Ptc::outcome`] for several calls in one program (one line each, in order).
    pub async fn outcomes(&self, calls: &[String]) -> Vec<String> {
        let code: String = calls
            .iter()
            .map(|call| {
                format!("try:\n    print(repr(await {call}))\nexcept ToolError as e:\n    print('ToolError:', e)\n")
            })
            .collect();
        let run = self.execute(&code).await;
        run.expect_ok();
        run.structured()["output"].as_str().unwrap().lines().map(str::to_string).collect()
    }

    /// Polls `list_callable_tools` until the unavailable-servers block satisfies `check` (at most `limit`).
    pub async fn wait_for_problems(&self, limit: Duration, check: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let problems = self.list_callable_tools().await.1.unwrap_or_default();
            if check(&problems) || tokio::time::Instant::now() > deadline {
                return problems;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls `list_callable_tools` until `check` holds on the names (at most `limit`).
    pub async fn wait_for_tools(&self, limit: Duration, check: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let (names, _) = self.list_callable_tools().await;
            if check(&names) || tokio::time::Instant::now() > deadline {
                return names;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// An `execute_program` result.
pub struct Run(pub CallToolResult);

impl Run {
    pub fn text(&self) -> String {
        text_block(&self.0, 0)
    }

    pub fn is_error(&self) -> bool {
        self.0.is_error == Some(true)
    }

    pub fn structured(&self) -> Value {
        self.0.structured_content.clone().expect("execute_program always returns structured content")
    }

    /// What each content block is: `text`, `image MIME LEN`, `audio MIME LEN` (LEN: base64 characters), or an
    /// embedded resource's kind (`text` or `blob`) and URI.
    pub fn kinds(&self) -> Vec<String> {
        self.0
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text(_) => "text".to_string(),
                ContentBlock::Image(image) => format!("image {} {}", image.mime_type, image.data.len()),
                ContentBlock::Audio(audio) => format!("audio {} {}", audio.mime_type, audio.data.len()),
                ContentBlock::Resource(embedded) => match &embedded.resource {
                    ResourceContents::TextResourceContents { uri, .. } => format!("text {uri}"),
                    ResourceContents::BlobResourceContents { uri, .. } => format!("blob {uri}"),
                    _ => "other resource".to_string(),
                },
                _ => "other".to_string(),
            })
            .collect()
    }

    /// Asserts the run succeeded and returns its text.
    pub fn expect_ok(&self) -> String {
        assert!(!self.is_error(), "the run failed:\n{}", self.text());
        self.text()
    }

    /// Asserts the run succeeded and returns what the program printed.
    pub fn expect_output(&self) -> String {
        self.expect_ok();
        self.structured()["output"].as_str().unwrap_or_default().to_string()
    }

    /// Asserts the run failed and returns its text.
    pub fn expect_error(&self) -> String {
        assert!(self.is_error(), "the run succeeded but should have failed:\n{}", self.text());
        self.text()
    }
}

/// `text` with the trace summary's time (`; 0.3s]`) replaced by `; Ts]`: how long calls took is for benchmarks,
/// not for tests on a machine that may be busy.
pub fn without_call_time(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("[tool calls: ") {
        let Some(end) = rest[start..].find("s]").map(|i| start + i) else { break };
        let Some(time) = rest[start..end].rfind("; ").map(|i| start + i + 2) else { break };
        out.push_str(&rest[..time]);
        out.push('T');
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

pub fn text_block(result: &CallToolResult, index: usize) -> String {
    result.content.get(index).and_then(|b| b.as_text()).map(|t| t.text.clone()).unwrap_or_default()
}

/// Skips (returns `None` with a printed reason) when a machine-level prerequisite is missing, unless CI
/// requires it through `PTC_REQUIRE=<name>,...` — then a missing prerequisite fails the test.
pub fn require(name: &str, available: Result<(), String>) -> Option<()> {
    available.err().map_or(Some(()), |why| skip_unless_required("PTC_REQUIRE", name, &why))
}

/// The path a third-party test dependency's variable names (set by `ci/test-deps.sh`), or `None` after
/// [`require`] said why it is missing (or failed the test if `name` is required).
pub fn required_path(name: &str, var: &str) -> Option<String> {
    let found = match std::env::var(var) {
        Ok(path) if std::path::Path::new(&path).exists() => Ok(path),
        Ok(path) => Err(format!("${var} points at {path}, which does not exist")),
        Err(_) => Err(format!("${var} is not set (run: eval \"$(ci/test-deps.sh)\")")),
    };
    require(name, found.as_ref().map(|_| ()).map_err(Clone::clone))?;
    found.ok()
}

/// The official Python SDK as the client: runs `tests/clients/sdk_client.py` with `args` (what to do, then the
/// server: `--url`, or `--` and a command line such as [`stdio_server`]'s) and returns its JSON report, or `None`
/// (skipped) without the SDK.
pub async fn sdk_client_report<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> Option<Value> {
    sdk_client_output(args).await.map(|(report, _stderr)| report)
}

/// [`sdk_client_report`], and what the SDK (and a stdio server under it) wrote on stderr.
pub async fn sdk_client_output<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> Option<(Value, String)> {
    let python = required_path("python-sdk", "PTC_TEST_SDK_PYTHON")?;
    let output = Command::new(python)
        .arg(repo_path("tests/clients/sdk_client.py"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "sdk client failed ({}): {stdout}\n{stderr}", output.status);
    Some((serde_json::from_str(&stdout).unwrap(), stderr))
}

/// The end of an [`sdk_client_report`] command line that starts ptc-mcp on stdio with `config_text` (written
/// into the returned directory, which must outlive the client).
pub fn stdio_server(config_text: &str) -> (TempDir, Vec<std::ffi::OsString>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config_text).unwrap();
    (dir, vec!["--".into(), binary().into(), "--config".into(), path.into()])
}

/// Marks the test skipped (reported as ignored, with why) and returns `None`, or fails the test if
/// `variable` lists `name`.
fn skip_unless_required(variable: &str, name: &str, why: &str) -> Option<()> {
    let required = std::env::var(variable).unwrap_or_default();
    if required.split(',').any(|r| r.trim() == name) {
        panic!("{name} is required ({variable}) but unavailable: {why}");
    }
    skip(&format!("needs {name}: {why}"));
    None
}

/// Marks the running test as skipped for `reason` (reported as ignored, with the reason); the test then
/// returns.
pub fn skip(reason: &str) {
    crate::harness::skip(reason);
}

/// Whether a process exists and is not a zombie (this machine's init may leave zombies unreaped).
pub fn is_running(pid: i32) -> bool {
    state_and_group(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Whether a process is gone or a zombie its parent can reap: a killed process's main thread is a zombie
/// while its other threads are still exiting, and only after them can its parent see it ended.
pub fn has_ended(pid: i32) -> bool {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, Iterator::count);
    !is_running(pid) && threads <= 1
}

/// The processes (zombies left out) whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| state_and_group(pid).is_some_and(|(state, group)| state != 'Z' && group == pgid))
        .collect()
}

/// A process's state letter and process group, from `/proc/<pid>/stat` (they follow the parenthesised
/// command name: state, ppid, pgrp).
fn state_and_group(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let group = fields.nth(1)?.parse().ok()?;
    Some((state, group))
}

/// Checks that the sandbox under test can run programs here. Returns `None` (printing why) when it cannot,
/// unless `PTC_REQUIRE_BACKENDS` names it — then the test fails.
pub async fn require_backend(ptc: &Ptc) -> Option<()> {
    let run = ptc.execute("print('ok')").await;
    if run.is_error() && run.text().contains("SandboxError") {
        return sandbox_unusable(&run.text());
    }
    Some(())
}

/// Marks the test skipped because the sandbox under test cannot run programs here (`why`), or fails it if
/// `PTC_REQUIRE_BACKENDS` names that sandbox.
pub fn sandbox_unusable(why: &str) -> Option<()> {
    skip_unless_required("PTC_REQUIRE_BACKENDS", &sandbox_under_test(), why)
}

/// Processes whose `HOME` (the scratch directory) lies under `dir`: the runners of a server whose temp
/// directory is `dir`.
pub fn runners_under(dir: &Path) -> Vec<String> {
    let needle = format!("HOME={}", dir.display());
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            let pid: i32 = e.file_name().to_string_lossy().parse().unwrap();
            // A fresh runner has HOME in the environment it was started with. A zygote's fork (named
            // `ptc-runner`; its relay `ptc-relay`) shows the zygote's, and works in a scratch directory
            // under `dir`.
            let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let started_there = || {
                !comm.starts_with("ptc-")
                    && !is_zygote(pid)
                    && std::fs::read(e.path().join("environ"))
                        .map(|env| env.split(|b| *b == 0).any(|var| var.starts_with(needle.as_bytes())))
                        .unwrap_or(false)
            };
            let forked_there = || {
                comm.trim() == "ptc-runner"
                    && std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir))
            };
            is_running(pid) && (started_there() || forked_there())
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// `execution` keys for a test of runners' scratch directories on the host: under landlock, without the
/// zygote (whose forks keep scratch in a tmpfs of their own and nothing on the host; fresh runners have a
/// host directory each).
pub fn host_scratch_keys() -> &'static str {
    if sandbox_under_test() == "landlock" { "  zygote: false\n" } else { "" }
}

/// Whether `pid` is a zygote (`execution.zygote`): an interpreter whose source starts with the zygote's first
/// line, and not one of its forks (which it names `ptc-runner` and `ptc-relay`).
pub fn is_zygote(pid: i32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !comm.starts_with("ptc-") && cmdline.split(|b| *b == 0).any(|arg| arg.starts_with(b"AS_ZYGOTE = True"))
}

/// Polls `check` every 50 ms until it holds (true) or `limit` has passed (false). Bounds are generous: a
/// loaded machine is slow, and the check says what is being waited for.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A process's peak resident memory so far (`VmHWM`), in KiB.
pub fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The scratch directories of runs under a server's temp directory `dir` (inside each server's directory).
pub fn scratch_dirs_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(servers) = std::fs::read_dir(dir) else { return Vec::new() };
    servers
        .filter_map(|server| std::fs::read_dir(server.ok()?.path()).ok())
        .flatten()
        .filter_map(|run| run.ok().map(|run| run.path()))
        .filter(|run| run.file_name().is_some_and(|name| name.to_string_lossy().starts_with("ptc-run-")))
        .collect()
}

/// No runner of a server whose temp directory was `dir` is left (killed processes may take a moment to be
/// gone from /proc), and no scratch directory: the server removed them before it exited.
pub async fn assert_nothing_left(dir: &Path) {
    let left: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "scratch dirs outlived the server: {left:?}");
    let gone = eventually(Duration::from_secs(10), || runners_under(dir).is_empty()).await;
    assert!(gone, "runners outlived the server: {:?}", runners_under(dir));
}
