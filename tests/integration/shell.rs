//! The shell commands run as a user would: `check`, `tools` and `run`, with their output and exit status,
//! and how they end: quietly when their reader is gone, and always after shutting down what they started.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::common::*;

/// What one command printed, and how it exited.
struct Shell {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `ptc-mcp ARGS` with `config_text` as ./config.yaml in a temp dir (found by the default search),
/// `stdin` on its stdin.
async fn shell(args: &[&str], config_text: &str, stdin: &str) -> Shell {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), config_text).unwrap();
    shell_in(dir.path(), args, stdin).await
}

async fn shell_in(dir: &Path, args: &[&str], stdin: &str) -> Shell {
    let mut child = tokio::process::Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env_remove("PTC_MCP_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the command ends")
        .unwrap();
    Shell {
        status: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[apply(integration_test!)]
async fn check_prints_one_row_per_server_and_exits_0_when_all_is_well() {
    let out = shell(&["check"], &config(&[mock_server("mock", &[])], ""), "").await;
    if out.stdout.contains("unavailable:") {
        return skip_for_sandbox(&out.stdout);
    }
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "config   config.yaml: valid");
    assert!(lines[1].starts_with(&format!("sandbox  {}: ", resolved_sandbox())), "{}", out.stdout);
    assert_eq!(columns(lines[2]), ["server", "status", "tools", "time", "error"]);
    let row = columns(lines[3]);
    assert_eq!(&row[..2], ["mock", "connected"], "{}", out.stdout);
    assert!(row[2].parse::<usize>().unwrap() > 5 && row[3].ends_with('s'), "{}", out.stdout);
    assert_eq!(lines.len(), 4, "{}", out.stdout);
}

#[apply(integration_test!)]
async fn check_names_a_server_that_cannot_start_in_words_and_exits_1() {
    let missing = "  - name: gone\n    command: /nonexistent/mcp-server\n".to_string();
    let out = shell(&["check"], &config(&[mock_server("mock", &[]), missing], ""), "").await;
    assert_eq!(out.status, Some(1), "{}\n{}", out.stdout, out.stderr);
    let gone = out.stdout.lines().find(|l| l.starts_with("gone ")).expect(&out.stdout);
    let row = columns(gone);
    assert_eq!((row[1].as_str(), row[2].as_str()), ("unavailable", "0"), "{gone}");
    assert!(gone.contains("/nonexistent/mcp-server") && gone.contains("No such file"), "{gone}");
    assert!(out.stdout.lines().any(|l| l.starts_with("mock ") && l.contains(" connected ")), "{}", out.stdout);
}

#[apply(integration_test!)]
async fn check_fails_with_status_2_on_a_bad_config() {
    let out = shell(&["check"], "execution:\n  max_tool_calls: 0\n", "").await;
    assert_eq!(out.status, Some(2));
    assert!(out.stderr.contains("execution.max_tool_calls: must be at least 1"), "{}", out.stderr);
    assert_eq!(out.stdout, "");
}

#[apply(integration_test!)]
async fn check_without_a_config_file_says_where_it_looked_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let out = shell_in(dir.path(), &["check"], "").await;
    assert_eq!(out.status, Some(1), "{}\n{}", out.stdout, out.stderr);
    let looked_at = dir.path().canonicalize().unwrap().join("config.yaml");
    let servers = out.stdout.lines().find(|line| line.starts_with("servers ")).expect(&out.stdout);
    assert_eq!(
        servers,
        format!(
            "servers  no servers configured (no config file found at {}; name one with --config PATH or \
             $PTC_MCP_CONFIG)",
            looked_at.display()
        )
    );
    // A config file without servers is a choice: nothing to connect, and nothing wrong.
    let out = shell(&["check"], "servers: []\nexecution:\n  sandbox: none\n", "").await;
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.ends_with("\nservers  no servers configured in config.yaml\n"), "{}", out.stdout);
}

#[apply(integration_test!)]
async fn tools_lists_the_callable_names_one_a_line_or_as_json() {
    let text = config(&[mock_server("mock", &[])], "");
    let out = shell(&["tools"], &text, "").await;
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    let names: Vec<&str> = out.stdout.lines().collect();
    assert!(names.contains(&"mcp__mock__echo") && names.contains(&"mcp__mock__add"), "{}", out.stdout);
    assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted: {names:?}");
    let json = shell(&["tools", "--json"], &text, "").await;
    let listed: Vec<String> = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(listed, names);
}

#[apply(integration_test!)]
async fn tools_names_a_missing_server_on_stderr() {
    let out = shell(&["tools"], &config(&[mock_server("failing", &["--fail-start"])], ""), "").await;
    assert_eq!((out.status, out.stdout.as_str()), (Some(0), ""));
    assert!(out.stderr.contains("server 'failing' is unavailable"), "{}", out.stderr);
}

#[apply(integration_test!)]
async fn run_prints_exactly_the_execute_program_text_and_exits_by_outcome() {
    let text = config(&[mock_server("mock", &[])], "");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), &text).unwrap();
    std::fs::write(dir.path().join("ok.py"), "r = await mcp__mock__add(a=1, b=2)\nprint(r['sum'])\nemit({'n': 1})\n")
        .unwrap();
    let out = shell_in(dir.path(), &["run", "ok.py"], "").await;
    if out.stdout.contains("SandboxError") {
        return skip_for_sandbox(&out.stdout);
    }
    assert_eq!(out.status, Some(0), "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        without_call_time(&out.stdout),
        "[Script executed successfully]\n3\n--- result ---\n{\"n\":1}\n[tool calls: 1; Ts]\n"
    );
    let failed = shell_in(dir.path(), &["run", "-"], "print('before')\n1/0\n").await;
    assert_eq!(failed.status, Some(1));
    assert!(
        failed
            .stdout
            .starts_with("[Script execution failed]\nTraceback (most recent call last):\n  File \"<program>\", line 2"),
        "{}",
        failed.stdout
    );
    assert!(failed.stdout.ends_with("--- output before the error ---\nbefore\n"), "{}", failed.stdout);
}

#[apply(integration_test!)]
async fn run_exits_2_when_the_sandbox_cannot_run_programs_or_the_file_is_missing() {
    let text = "execution:\n  sandbox: none\n  python: /nonexistent/python3\n";
    let out = shell(&["run", "-"], text, "print(1)").await;
    assert_eq!(out.status, Some(2), "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.starts_with("[Script execution failed]\nSandboxError: "), "{}", out.stdout);
    let missing = shell(&["run", "nope.py"], "", "").await;
    assert_eq!(missing.status, Some(2));
    assert!(missing.stderr.contains("cannot read the program from nope.py"), "{}", missing.stderr);
}

#[apply(integration_test!)]
async fn the_config_comes_from_the_flag_or_the_environment_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("elsewhere.yaml");
    std::fs::write(&path, config(&[mock_server("viaenv", &[])], "")).unwrap();
    let flag = shell_in(dir.path(), &["tools", "--config", path.to_str().unwrap()], "").await;
    assert!(flag.stdout.contains("mcp__viaenv__echo"), "{}{}", flag.stdout, flag.stderr);
    let output = tokio::process::Command::new(binary())
        .arg("tools")
        .env("PTC_MCP_CONFIG", &path)
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("mcp__viaenv__echo"));
}

#[apply(integration_test!)]
async fn tools_finds_by_query_and_lists_signatures_like_list_callable_tools() {
    let text = config(&[mock_server("mock", &[])], "");
    let found = shell(&["tools", "--query", "add two numbers"], &text, "").await;
    assert_eq!(found.status, Some(0), "{}", found.stderr);
    assert_eq!(found.stdout.lines().next(), Some("mcp__mock__add"), "best first: {}", found.stdout);
    let signatures = shell(&["tools", "--query", "mcp__mock__add", "--signatures"], &text, "").await;
    assert_eq!(signatures.status, Some(0), "{}", signatures.stderr);
    assert!(signatures.stdout.contains("\nasync def mcp__mock__add("), "{}", signatures.stdout);
    assert!(signatures.stdout.contains("a: float") || signatures.stdout.contains("a: int"), "{}", signatures.stdout);
    let json = shell(&["tools", "--query", "add", "--json"], &text, "").await;
    let names: Vec<String> = serde_json::from_str(json.stdout.trim()).expect("a JSON array of names");
    assert_eq!(names.first().map(String::as_str), Some("mcp__mock__add"));
}

/// A pipe whose reader is gone, as `| head -1` leaves one: writing to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills in two fresh fds, which are then owned here.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: as above.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(reader);
    Stdio::from(writer)
}

/// `ptc-mcp ARGS` in `dir` (its config.yaml found there), with stdout closed as `closed_pipe` makes it and the
/// temp directory `tmp`. (Spawn it: `output()` would pipe stdout anew.)
fn command_in(dir: &Path, tmp: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(binary());
    command
        .args(args)
        .current_dir(dir)
        .env_remove("PTC_MCP_CONFIG")
        .env("RUST_LOG", "warn")
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The pids a mock server with `--state-file` recorded after `prefix` (`start `, `child `).
fn recorded(state: &Path, prefix: &str) -> Vec<i32> {
    let text = std::fs::read_to_string(state).unwrap_or_default();
    text.lines().filter_map(|line| line.strip_prefix(prefix)?.parse().ok()).collect()
}

/// Waits until no process of the group `leader` led is left, killing what is left after 10 s.
async fn assert_group_gone(leader: i32, what: &str) {
    let gone = eventually(Duration::from_secs(10), || group_members(leader).is_empty()).await;
    let left = group_members(leader);
    if !gone {
        // SAFETY: plain syscall; the group is the one our test downstream made.
        unsafe { libc::kill(-leader, libc::SIGKILL) };
    }
    assert!(gone, "{what}: processes of the downstream's group outlived ptc-mcp: {left:?}");
}

#[apply(integration_test!)]
async fn every_command_ends_quietly_when_its_reader_is_gone_and_still_shuts_down() {
    for args in [&["tools"][..], &["check"], &["run", "prog.py"]] {
        let what = args.join(" ");
        let dir = tempfile::tempdir().unwrap();
        let (tmp, state) = (dir.path().join("tmp"), dir.path().join("events"));
        std::fs::create_dir(&tmp).unwrap();
        let flags = ["--spawn-child", "--state-file", state.to_str().unwrap()];
        std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("mock", &flags)], "")).unwrap();
        std::fs::write(dir.path().join("prog.py"), "print(await mcp__mock__add(a=1, b=2))\n").unwrap();
        let child = command_in(dir.path(), &tmp, args).spawn().unwrap();
        let out = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
            .await
            .expect("the command ends")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(0..=2)), "{what}: {}\n{stderr}", out.status);
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        assert_group_gone(recorded(&state, "start ")[0], &what).await;
        assert_nothing_left(&tmp).await;
    }
}

#[apply(integration_test!)]
async fn check_sandbox_cleans_up_after_its_probe_when_its_reader_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(dir.path().join("config.yaml"), "").unwrap();
    // landlock's probe starts a confined interpreter in a scratch directory of its own.
    let child = command_in(dir.path(), &tmp, &["--check-sandbox", "landlock"]).spawn().unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.expect("it ends").unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_nothing_left(&tmp).await;
}

#[apply(integration_test!)]
async fn ctrl_c_while_a_command_waits_for_servers_shuts_them_down() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, state) = (dir.path().join("tmp"), dir.path().join("events"));
    std::fs::create_dir(&tmp).unwrap();
    let flags = ["--first-answer-delay", "30", "--spawn-child", "--state-file", state.to_str().unwrap()];
    std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("slow", &flags)], "")).unwrap();
    let mut child = command_in(dir.path(), &tmp, &["tools"]).spawn().unwrap();
    // The server is up (and slow to answer) once it has started its child.
    assert!(eventually(Duration::from_secs(30), || !recorded(&state, "child ").is_empty()).await);
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it ends").unwrap();
    let leader = recorded(&state, "start ")[0];
    let code = status.code();
    assert_group_gone(leader, "tools").await;
    assert_eq!(code, Some(130), "{status}");
}

fn columns(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

/// The sandbox under test as `check` names it (`auto` resolved).
fn resolved_sandbox() -> String {
    match sandbox_under_test().as_str() {
        "auto" => "landlock".to_string(),
        other => other.to_string(),
    }
}

fn skip_for_sandbox(why: &str) {
    let _ = sandbox_unusable(why);
}
