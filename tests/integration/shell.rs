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
async fn run_prints_the_output_then_the_rest_of_the_execute_program_text_and_exits_by_outcome() {
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
    // The output as it arrived, then the execute_program text without it.
    assert_eq!(
        without_call_time(&out.stdout),
        "3\n[Script executed successfully]\n--- result ---\n{\"n\":1}\n[tool calls: 1; Ts]\n"
    );
    let failed = shell_in(dir.path(), &["run", "-"], "print('before')\n1/0\n").await;
    assert_eq!(failed.status, Some(1));
    let traceback =
        "before\n[Script execution failed]\nTraceback (most recent call last):\n  File \"<program>\", line 2";
    assert!(failed.stdout.starts_with(traceback), "{}", failed.stdout);
    assert!(failed.stdout.ends_with("ZeroDivisionError: division by zero\n"), "{}", failed.stdout);
    assert_eq!(failed.stdout.matches("before").count(), 1, "{}", failed.stdout);
    // A program that prints nothing gets the whole text; a last line without a newline is ended.
    let silent = shell_in(dir.path(), &["run", "-"], "emit([1])").await;
    assert_eq!(silent.stdout, "[Script executed successfully]\n(no output)\n--- result ---\n[1]\n");
    let unended = shell_in(dir.path(), &["run", "-"], "print('a', end='')").await;
    assert_eq!(unended.stdout, "a\n[Script executed successfully]\n");
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

/// `ptc-mcp ARGS` in `dir` (its config.yaml found there) with the temp directory `tmp`, stdout and stderr piped,
/// in a process group of its own: `interrupt` signals the whole group, as Ctrl-C in a terminal does.
fn interactive_in(dir: &Path, tmp: &Path, args: &[&str]) -> tokio::process::Child {
    tokio::process::Command::new(binary())
        .args(args)
        .current_dir(dir)
        .env_remove("PTC_MCP_CONFIG")
        .env("RUST_LOG", "warn")
        .env("TMPDIR", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Ctrl-C: SIGINT to every process of the terminal's foreground group, here the one `child` leads.
fn interrupt(child: &tokio::process::Child) {
    // SAFETY: kill with the group of a child we own.
    assert_eq!(unsafe { libc::kill(-(child.id().unwrap() as i32), libc::SIGINT) }, 0);
}

/// Reads `from` until what was read holds `needle` (or it ends, or 60 s have passed); returns what was read.
async fn read_until(from: &mut (impl tokio::io::AsyncRead + Unpin), needle: &str) -> String {
    use tokio::io::AsyncReadExt;
    let mut read = Vec::new();
    let reading = async {
        let mut buffer = [0; 4096];
        while !String::from_utf8_lossy(&read).contains(needle) {
            match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read.extend_from_slice(&buffer[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(60), reading).await;
    String::from_utf8_lossy(&read).into_owned()
}

/// The rest of `from`, up to its end.
async fn read_rest(from: &mut (impl tokio::io::AsyncRead + Unpin)) -> String {
    use tokio::io::AsyncReadExt;
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(60), from.read_to_string(&mut rest)).await.expect("it ends").unwrap();
    rest
}

#[apply(integration_test!)]
async fn run_waits_only_for_the_servers_its_program_names_and_says_which_it_waits_for() {
    let slow =
        |delay: &str| mock_server("slow", &["--first-answer-delay", delay]) + "    connect_timeout_seconds: 120\n";
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("mock", &[]), slow("3600")], "")).unwrap();
    std::fs::write(dir.path().join("quick.py"), "print((await mcp__mock__add(a=1, b=2))['sum'])\n").unwrap();
    // Waiting for 'slow' too would take its 120 s: far more than this bound.
    let quick = tokio::time::timeout(Duration::from_secs(60), shell_in(dir.path(), &["run", "quick.py"], "")).await;
    let quick = quick.expect("run did not wait for a server its program does not name");
    if quick.stdout.contains("SandboxError") {
        return skip_for_sandbox(&quick.stdout);
    }
    assert_eq!(quick.status, Some(0), "{}\n{}", quick.stdout, quick.stderr);
    assert_eq!(without_call_time(&quick.stdout), "3\n[Script executed successfully]\n[tool calls: 1; Ts]\n");
    assert!(!quick.stderr.contains("'slow'"), "{}", quick.stderr);

    // A program that names a slow server's tool, or lists the tools, waits for it, and says so.
    std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("mock", &[]), slow("3")], "")).unwrap();
    let programs = [
        ("print((await mcp__slow__add(a=2, b=2))['sum'])\n", "4\n"),
        ("print(len([t for t in list_callable_tools() if t.startswith('mcp__slow__')]) > 0)\n", "True\n"),
    ];
    for (program, printed) in programs {
        let out = shell_in(dir.path(), &["run", "-"], program).await;
        assert_eq!(out.status, Some(0), "{program}{}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.starts_with(printed), "{program}{}", out.stdout);
        let waiting = "ptc-mcp: waiting for server 'slow' (connect_timeout_seconds 120)…\n";
        assert!(out.stderr.contains(waiting), "{program}{}", out.stderr);
    }
}

#[apply(integration_test!)]
async fn run_shows_output_as_it_arrives_with_one_runner_and_stops_cleanly_on_ctrl_c() {
    if sandbox_under_test() == "docker" {
        return skip("under docker a runner is a container, not a process to count");
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(dir.path().join("config.yaml"), config(&[], "")).unwrap();
    std::fs::write(dir.path().join("prog.py"), "print('started', flush=True)\nimport time\ntime.sleep(3600)\n")
        .unwrap();
    let mut child = interactive_in(dir.path(), &tmp, &["run", "prog.py"]);
    let mut stdout = child.stdout.take().unwrap();
    let shown = read_until(&mut stdout, "started\n").await;
    assert_eq!(shown, "started\n", "the first line shows while the program runs");
    // One program, one runner: no pool of ready ones beside it.
    let runners = || runners_under(&tmp).len();
    assert!(eventually(Duration::from_secs(30), || runners() == 1).await, "{:?}", runners_under(&tmp));
    assert!(!eventually(Duration::from_secs(5), || runners() > 1).await, "{:?}", runners_under(&tmp));

    interrupt(&child);
    let rest = read_rest(&mut stdout).await;
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it ends").unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    // The text less the output shown above: the line is not shown twice.
    assert!(rest.starts_with("[Script execution failed]\nExecutionError: the client cancelled the run"), "{rest}");
    assert!(!rest.contains("started"), "{rest}");
    assert_nothing_left(&tmp).await;
}

#[apply(integration_test!)]
async fn check_starts_no_runner_for_a_pool() {
    if sandbox_under_test() == "docker" {
        return skip("under docker a runner is a container, not a process to count");
    }
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let slow = mock_server("slow", &["--first-answer-delay", "3600"]);
    std::fs::write(dir.path().join("config.yaml"), config(&[slow], "  pool_size: 2\n")).unwrap();
    let mut child = interactive_in(dir.path(), &tmp, &["check"]);
    let mut stdout = child.stdout.take().unwrap();
    // The sandbox is probed (where a pool would start filling), then check waits for the slow server.
    let probed = read_until(&mut stdout, "\nsandbox ").await;
    assert!(probed.contains("\nsandbox "), "{probed}");
    assert!(!eventually(Duration::from_secs(5), || !runners_under(&tmp).is_empty()).await, "{:?}", runners_under(&tmp));
    interrupt(&child);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it ends").unwrap();
    assert_eq!(status.code(), Some(130));
    assert_nothing_left(&tmp).await;
}

#[apply(integration_test!)]
async fn run_shows_every_line_of_a_flood_once_in_order_however_slowly_stdout_is_read() {
    if sandbox_under_test() == "docker" {
        return skip("under docker a runner is a container: its end is not a process to watch");
    }
    // More lines than stdout's pipe, the queue to it and the runner's channel hold, so the program waits for
    // stdout's reader; and more than max_output_bytes, which cuts only the execute_program text.
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    std::fs::write(dir.path().join("config.yaml"), config(&[], "")).unwrap();
    std::fs::write(dir.path().join("prog.py"), "for i in range(20000):\n    print(f'line {i}')\n").unwrap();
    let mut child = interactive_in(dir.path(), &tmp, &["run", "prog.py"]);
    let mut stdout = child.stdout.take().unwrap();
    let mut shown = read_until(&mut stdout, "line 15000\n").await;
    // The rest fits in the pipes and queues on the way: the program ends while its last lines wait for this
    // reader, which keeps them waiting longer than the runner's last lines are waited for once it has exited.
    assert!(eventually(Duration::from_secs(60), || runners_under(&tmp).is_empty()).await, "the runner ended");
    tokio::time::sleep(Duration::from_secs(1)).await;
    shown.push_str(&read_rest(&mut stdout).await);
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("it ends").unwrap();
    let expected: String = (0..20000).map(|i| format!("line {i}\n")).collect();
    let tail = &shown[shown.len().saturating_sub(300)..];
    assert!(shown == format!("{expected}[Script executed successfully]\n"), "{} bytes, ending: {tail}", shown.len());
    assert_eq!(status.code(), Some(0));
}

#[apply(integration_test!)]
async fn ctrl_c_while_run_waits_for_a_server_stops_at_once_and_shuts_it_down() {
    let dir = tempfile::tempdir().unwrap();
    let (tmp, state) = (dir.path().join("tmp"), dir.path().join("events"));
    std::fs::create_dir(&tmp).unwrap();
    let flags = ["--first-answer-delay", "3600", "--spawn-child", "--state-file", state.to_str().unwrap()];
    std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("slow", &flags)], "")).unwrap();
    std::fs::write(dir.path().join("prog.py"), "print(await mcp__slow__add(a=1, b=2))\n").unwrap();
    let mut child = interactive_in(dir.path(), &tmp, &["run", "prog.py"]);
    let mut stderr = child.stderr.take().unwrap();
    let said = read_until(&mut stderr, "waiting for server 'slow'").await;
    assert!(said.contains("waiting for server 'slow' (connect_timeout_seconds 60)…"), "{said}");
    assert!(eventually(Duration::from_secs(30), || !recorded(&state, "child ").is_empty()).await);
    interrupt(&child);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it ends").unwrap();
    let mut stdout = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).await.unwrap();
    assert_eq!((status.code(), stdout.as_str()), (Some(130), ""), "{}", read_rest(&mut stderr).await);
    assert_group_gone(recorded(&state, "start ")[0], "run").await;
    assert_nothing_left(&tmp).await;
}

/// A pseudo-terminal: the end a command writes to (as its stderr), and the end that reads what it wrote.
fn terminal() -> (OwnedFd, std::fs::File) {
    let (mut reader, mut writer) = (0, 0);
    // SAFETY: openpty fills in two fresh fds, which are then owned here.
    let opened =
        unsafe { libc::openpty(&mut reader, &mut writer, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: as above.
    unsafe { (OwnedFd::from_raw_fd(writer), std::fs::File::from(OwnedFd::from_raw_fd(reader))) }
}

/// What `ptc-mcp run -` (with `program` on stdin) writes to stderr when that is a terminal, with `rust_log`.
async fn run_on_a_terminal(dir: &Path, program: &str, rust_log: Option<&str>) -> String {
    let (writer, mut reader) = terminal();
    let mut command = tokio::process::Command::new(binary());
    command
        .args(["run", "-"])
        .current_dir(dir)
        .env_remove("PTC_MCP_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(writer))
        .kill_on_drop(true);
    if let Some(level) = rust_log {
        command.env("RUST_LOG", level);
    }
    let mut child = command.spawn().unwrap();
    // Only the child holds the terminal's writing end now: reading ends (EIO) once it has exited.
    drop(command);
    let mut input = child.stdin.take().unwrap();
    input.write_all(program.as_bytes()).await.unwrap();
    drop(input);
    let read = tokio::task::spawn_blocking(move || {
        let mut written = Vec::new();
        let _ = std::io::Read::read_to_end(&mut reader, &mut written);
        String::from_utf8_lossy(&written).into_owned()
    });
    tokio::time::timeout(Duration::from_secs(120), child.wait()).await.expect("run ends").unwrap();
    tokio::time::timeout(Duration::from_secs(30), read).await.expect("the terminal is read").unwrap()
}

#[apply(integration_test!)]
async fn run_logs_only_warnings_on_a_terminal_unless_rust_log_says_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), config(&[mock_server("mock", &[])], "")).unwrap();
    let program = "print(await mcp__mock__add(a=1, b=2))\n";
    let quiet = run_on_a_terminal(dir.path(), program, None).await;
    assert!(!quiet.contains(" INFO "), "{quiet}");
    let told = run_on_a_terminal(dir.path(), program, Some("info")).await;
    assert!(told.contains(" INFO ptc_mcp::engine::record: run finished"), "{told}");
    // Not a terminal: the log is a record, at info as before.
    std::fs::write(dir.path().join("prog.py"), program).unwrap();
    let piped = tokio::process::Command::new(binary())
        .args(["run", "prog.py"])
        .current_dir(dir.path())
        .env_remove("PTC_MCP_CONFIG")
        .env_remove("RUST_LOG")
        .output();
    let piped = tokio::time::timeout(Duration::from_secs(120), piped).await.expect("run ends").unwrap();
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.contains(" INFO ptc_mcp::engine::record: run finished"), "{stderr}");
}

#[apply(integration_test!)]
async fn serve_http_takes_a_port_alone_or_after_localhost_and_names_the_forms_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), format!("serve:\n  http:\n{}", crate::http::token_keys())).unwrap();
    for form in ["PORT", "localhost:PORT"] {
        let port = crate::http::free_port();
        let address = form.replace("PORT", &port.to_string());
        let mut child = tokio::process::Command::new(binary())
            .args(["serve", "--http", &address])
            .current_dir(dir.path())
            .env_remove("PTC_MCP_CONFIG")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let listening =
            eventually(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await;
        // SAFETY: kill with the pid of a child we own.
        unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it stops").unwrap();
        let stderr = read_rest(child.stderr.as_mut().unwrap()).await;
        assert!(listening, "--http {address} did not listen on 127.0.0.1:{port}: {stderr}");
        assert_eq!(status.code(), Some(0), "--http {address}: {stderr}");
    }
    for wrong in ["localhost", "example.com:8765", "70000"] {
        let out = shell_in(dir.path(), &["serve", "--http", wrong], "").await;
        assert_eq!(out.status, Some(2), "{wrong}: {}", out.stderr);
        let forms = "give PORT (on 127.0.0.1), localhost:PORT, or ADDR:PORT with an IP address";
        assert!(out.stderr.contains(&format!("'{wrong}' is not an address to listen on: {forms}")), "{}", out.stderr);
    }
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
    let nothing = shell(&["tools", "--query", "weather forecast"], &text, "").await;
    assert_eq!((nothing.status, nothing.stdout.as_str()), (Some(0), ""), "{}", nothing.stderr);
    assert!(nothing.stderr.contains("ptc-mcp: no tool matches 'weather forecast' ("), "{}", nothing.stderr);
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
