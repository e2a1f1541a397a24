//! `execute_program` end to end: output formats, errors, limits, budgets, channel integrity and the
//! child's environment.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

async fn ptc_with_mock(execution: &str) -> Ptc {
    Ptc::start(&config(&[mock_server("mock", &[])], execution)).await
}

/// Runs one program, whatever comes of it: the server's first run also waits for the sandbox's check, the
/// first connections and a runner's start, which count against its time limit. Tests of what a program's
/// own time limit does start after it, so that a busy machine does not end them before the program starts.
async fn warm_up(ptc: &Ptc) {
    let _ = ptc.execute("print(1)").await;
}

#[apply(integration_test!)]
async fn printed_output_comes_back_with_the_success_line() {
    let ptc = Ptc::start(&config(&[], "")).await;
    assert_eq!(
        ptc.execute("print('hello')\nprint(6 * 7)").await.expect_ok(),
        "[Script executed successfully]\nhello\n42"
    );
    assert_eq!(ptc.execute("x = 1").await.expect_ok(), "[Script executed successfully]\n(no output)");
}

#[apply(integration_test!)]
async fn emit_returns_a_structured_result_and_the_last_one_wins() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let run = ptc.execute("print('hi')\nemit({'a': 1})\nemit([1, 2])").await;
    assert_eq!(run.expect_ok(), "[Script executed successfully]\nhi\n--- result ---\n[1,2]");
    assert_eq!(
        run.structured(),
        json!({"ok": true, "output": "hi\n", "result": [1, 2], "error": null, "tool_calls": []})
    );
}

#[apply(integration_test!)]
async fn a_traceback_shows_only_program_frames_with_program_line_numbers() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let run = ptc.execute("print('start')\ndef f(x):\n    return 1 / x\nf(0)").await;
    let text = run.expect_error();
    assert_eq!(
        text,
        "[Script execution failed]\nTraceback (most recent call last):\n  File \"<program>\", line 4, in <module>\n    f(0)\n  \
         File \"<program>\", line 3, in f\n    return 1 / x\n           ~~^~~\nZeroDivisionError: division by zero\n\n\
         --- output before the error ---\nstart"
    );
    assert_eq!(run.structured()["ok"], json!(false));
    assert_eq!(run.structured()["output"], json!("start\n"));
}

#[apply(integration_test!)]
async fn a_syntax_error_points_at_the_program_line() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let text = ptc.execute("x = 1\nif x\n  print(x)").await.expect_error();
    assert!(text.contains("File \"<program>\", line 2") && text.contains("SyntaxError"), "{text}");
    assert!(!text.contains("runner"), "{text}");
}

#[apply(integration_test!)]
async fn a_run_that_times_out_keeps_its_output_and_says_which_calls_were_cancelled() {
    let ptc = ptc_with_mock("  timeout_seconds: 5\n").await;
    warm_up(&ptc).await;
    let started = Instant::now();
    let run = ptc
        .execute("print('before')\nimport asyncio\nawait asyncio.gather(mcp__mock__echo(x=1), mcp__mock__hang())")
        .await;
    let text = run.expect_error();
    // The hanging call's own limit (tool_call_timeout_seconds) is 60 s: the run must not wait for it.
    assert!(started.elapsed() < Duration::from_secs(40), "took {:?}", started.elapsed());
    assert!(text.starts_with("[Script execution failed]\nTimeoutError: Execution exceeded 5s limit"), "{text}");
    assert!(text.contains("--- output before the error ---\nbefore"), "{text}");
    assert!(text.contains("[tool calls: 2, 1 failed; "), "{text}");
    assert!(text.contains("  cancelled: mcp__mock__hang (still running when the run ended)"), "{text}");
    let calls = run.structured()["tool_calls"].clone();
    assert_eq!(calls[0]["ok"], json!(true));
    assert_eq!(calls[1]["cancelled"], json!(true));
}

#[apply(integration_test!)]
async fn cpu_bound_code_is_killed_at_the_deadline() {
    let ptc = Ptc::start(&config(&[], "  timeout_seconds: 5\n")).await;
    warm_up(&ptc).await;
    let text = ptc.execute("print('spinning', flush=True)\nwhile True:\n    pass").await.expect_error();
    // Killed by the server at the deadline, not by the CPU-time limit behind it (which says SIGXCPU).
    assert!(text.contains("TimeoutError: Execution exceeded 5s limit") && text.contains("spinning"), "{text}");
}

#[apply(integration_test!)]
async fn output_over_max_output_bytes_keeps_its_head_and_tail_around_one_marker_line() {
    let ptc = Ptc::start(&config(&[], "  max_output_bytes: 100\n")).await;
    let run = ptc.execute("for i in range(1000):\n    print('line', i)\nprint('summary: done')").await;
    let output = run.structured()["output"].as_str().unwrap().to_string();
    let (head, rest) = output.split_once("[output truncated: ").expect("a truncation marker");
    let (marker, tail) = rest.split_once('\n').expect("the marker is one line");
    assert!(head.starts_with("line 0\nline 1\n") && head.len() <= 51, "{head:?}");
    assert!(tail.ends_with("line 999\nsummary: done\n") && tail.len() <= 50, "{tail:?}");
    let printed: usize = (0..1000).map(|i| format!("line {i}\n").len()).sum::<usize>() + "summary: done\n".len();
    let left_out = printed - head.trim_end_matches('\n').len() - tail.len();
    assert!(marker.starts_with(&format!("{left_out} bytes left out here; ")), "{marker}");
    assert!(marker.contains("max_output_bytes (100)"), "{marker}");
}

#[apply(integration_test!)]
async fn tool_results_are_parsed_json_and_tool_errors_can_be_caught() {
    let ptc = ptc_with_mock("").await;
    let code = "r = await mcp__mock__add(a=2, b=3)\nprint(r['sum'])\ntry:\n    await mcp__mock__fail()\n\
                except ToolError as e:\n    print('caught:', e)\nprint(await mcp__mock__get_item(id='x'))";
    let text = ptc.execute(code).await.expect_ok();
    assert_eq!(
        without_call_time(&text),
        "[Script executed successfully]\n5\ncaught: 'mcp__mock__fail' returned an error: something broke\n{'id': 'x'}\n\
         [tool calls: 3, 1 failed; Ts]\n  failed: mcp__mock__fail (caught): printed above"
    );
}

#[apply(integration_test!)]
async fn positional_arguments_are_a_type_error_naming_the_tool() {
    let ptc = ptc_with_mock("  precheck: false\n").await;
    let text = ptc.execute("await mcp__mock__echo(1)").await.expect_error();
    assert!(
        text.contains(
            "TypeError: mcp__mock__echo() takes keyword arguments only (got 1 positional argument). Signature: \
             mcp__mock__echo(*, message: str = ..., **extra: Any) -> Any"
        ),
        "{text}"
    );
}

#[apply(integration_test!)]
async fn the_tool_call_budget_is_enforced_by_the_server() {
    let ptc = ptc_with_mock("  max_tool_calls: 3\n").await;
    let code = "for i in range(5):\n    try:\n        await mcp__mock__echo(i=i)\n    except ToolError as e:\n        print(i, e)";
    let run = ptc.execute(code).await;
    let text = run.expect_ok();
    assert!(text.contains("3 tool call budget exhausted: a program may make at most 3 tool calls"), "{text}");
    assert!(text.contains("[tool calls: 5, 2 failed; "), "{text}");
    // The summary says why the two failed: one line for the calls refused for the budget.
    assert!(
        text.ends_with(
            "\n  refused: 2 calls: tool call budget exhausted: a program may make at most 3 tool calls \
             (execution.max_tool_calls)"
        ),
        "{text}"
    );
    // Calls past the budget are counted, not listed.
    assert_eq!(run.structured()["tool_calls"].as_array().unwrap().len(), 3);
    assert_eq!(run.structured()["tool_calls_not_listed"], json!(2));
}

#[apply(integration_test!)]
async fn concurrent_calls_are_capped_at_max_concurrent_calls() {
    let ptc = ptc_with_mock("  max_concurrent_calls: 2\n").await;
    // The mock reports when each call ran; the most that overlapped at once is what counts, not how long
    // the whole took.
    let code = "import asyncio\nruns = await asyncio.gather(*[mcp__mock__sleep(seconds=1) for _ in range(6)])\n\
                print(max(sum(r['started'] <= s['started'] < r['ended'] for r in runs) for s in runs))";
    let text = ptc.execute(code).await.expect_ok();
    assert_eq!(without_call_time(&text), "[Script executed successfully]\n2\n[tool calls: 6; Ts]");
}

#[apply(integration_test!)]
async fn a_hanging_tool_times_out_and_the_server_stays_usable() {
    let ptc = ptc_with_mock("  tool_call_timeout_seconds: 1\n").await;
    let code = "try:\n    await mcp__mock__hang()\nexcept ToolError as e:\n    print(e)\nprint(await mcp__mock__echo(after=1))";
    let text = ptc.execute(code).await.expect_ok();
    assert!(text.contains("'mcp__mock__hang' timed out after 1s (tool_call_timeout_seconds)"), "{text}");
    assert!(text.contains("{'after': 1}"), "{text}");
}

#[apply(integration_test!)]
async fn helpers_work_inside_programs_with_or_without_await_and_are_not_counted() {
    let ptc = ptc_with_mock("  max_tool_calls: 1\n").await;
    let code = "names = list_callable_tools()\nprint('mcp__mock__echo' in names)\n\
                info = await inspect_tool(tool_name='mcp__mock__add')\nprint(info['outputSchema']['required'])\n\
                print(server_status())\ntry:\n    inspect_tool(tool_name='mcp__mock__nope')\nexcept ToolError as e:\n    print(e)";
    let run = ptc.execute(code).await;
    let text = run.expect_ok();
    assert_eq!(
        text,
        "[Script executed successfully]\nTrue\n['sum']\n{'mock': {'connected': True, 'tools': 23, 'error': None}}\n\
         [Tool not found] 'mcp__mock__nope' is not a callable tool; did you mean 'mcp__mock__env' or \
         'mcp__mock__huge' or 'mcp__mock__hang'?"
    );
    assert_eq!(run.structured()["tool_calls"], json!([]));
}

#[apply(integration_test!)]
async fn the_program_environment_is_empty_and_secrets_never_reach_it() {
    let ptc = Ptc::start_with_env(&config(&[], ""), &[("PTC_TEST_SECRET", "hunter2")]).await;
    // LC_CTYPE is Python's own locale coercion (PEP 538), not something the server passes on.
    let code = "import os, sys\nprint(sorted(set(os.environ) - {'LC_CTYPE'}))\nprint([p for p in sys.path if 'site-packages' in p])";
    let text = ptc.execute(code).await.expect_ok();
    // Scratch as home and temp dir, the user's name (getpass), and where rlimits bound memory, two malloc arenas.
    let env = match sandbox_under_test().as_str() {
        "docker" => "['HOME', 'LOGNAME', 'TMPDIR', 'USER']",
        _ => "['HOME', 'LOGNAME', 'MALLOC_ARENA_MAX', 'TMPDIR', 'USER']",
    };
    assert_eq!(text, format!("[Script executed successfully]\n{env}\n[]"));
}

#[apply(integration_test!)]
async fn the_working_directory_is_a_fresh_scratch_dir_removed_afterwards() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let code = "import os\nopen('f.txt', 'w').write('x')\nprint(os.getcwd())\nprint(os.listdir('.'))\n\
                print(os.environ['HOME'] == os.getcwd() == os.environ['TMPDIR'])";
    let text = ptc.execute(code).await.expect_ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[2..], ["['f.txt']", "True"]);
    // It is removed just after the result is sent.
    let removed = async {
        while std::path::Path::new(lines[1]).exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(
        tokio::time::timeout(Duration::from_secs(5), removed).await.is_ok(),
        "scratch dir {} survived the run",
        lines[1]
    );
    let second = ptc.execute("import os\nprint(os.getcwd())\nprint(os.listdir('.'))").await.expect_ok();
    assert_eq!(second.lines().nth(2), Some("[]"), "each run gets a fresh scratch dir");
    if !matches!(sandbox_under_test().as_str(), "docker" | "landlock") {
        // docker: the same path, on the tmpfs of a fresh container; landlock: a fork of its zygote mounts a
        // fresh tmpfs of its own at the zygote's scratch path.
        assert_ne!(second.lines().nth(1), Some(lines[1]), "each run gets its own scratch dir");
    }
}

#[apply(integration_test!)]
async fn resource_limits_are_applied() {
    let ptc = Ptc::start(&config(&[], "  limits:\n    memory_mb: 512\n    open_files: 64\n    tasks: 32\n")).await;
    let code = "import resource as r\nfor name in ['RLIMIT_DATA', 'RLIMIT_AS', 'RLIMIT_NOFILE', 'RLIMIT_CORE', 'RLIMIT_FSIZE']:\n    \
                print(name, r.getrlimit(getattr(r, name))[0])";
    let text = ptc.execute(code).await.expect_ok();
    // Private memory at memory_mb, and the address space with room for 32 stacks of 8 MiB and 256 MiB more; a
    // container's cgroup counts memory instead.
    let memory = match sandbox_under_test().as_str() {
        "docker" => "RLIMIT_DATA -1\nRLIMIT_AS -1".to_string(),
        _ => format!("RLIMIT_DATA {}\nRLIMIT_AS {}", 512 << 20, (512 + 32 * 8 + 256) << 20),
    };
    assert_eq!(
        text,
        format!("[Script executed successfully]\n{memory}\nRLIMIT_NOFILE 64\nRLIMIT_CORE 0\nRLIMIT_FSIZE 67108864")
    );
}

#[apply(integration_test!)]
async fn nothing_the_program_started_survives_the_run() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let code = "import subprocess\ntry:\n    print(subprocess.Popen(['/bin/sleep', '1000']).pid)\nexcept OSError as e:\n    print('blocked:', e)";
    let text = ptc.execute(code).await.expect_ok();
    let line = text.lines().nth(1).unwrap();
    if sandbox_under_test() != "none" && line.starts_with("blocked:") {
        return; // A real sandbox does not let it start a process at all (see the escape suite).
    }
    let pid: i32 = line.parse().unwrap_or_else(|_| panic!("no pid in {text}"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!is_running(pid), "the program's child {pid} survived the run");
}

/// A child in a session of its own leaves the run's process group: the run's cgroup still holds it, and kills it
/// with the run. `none` has a cgroup per run where the server may create one (root, or a delegated subtree; see
/// `--check-sandbox none`); without one it kills the process group only, as the README says.
#[apply(integration_test!)]
async fn a_child_in_a_new_session_does_not_survive_the_run() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let code = "import subprocess\ntry:\n    print(subprocess.Popen(['/bin/sleep', '1000'], start_new_session=True).pid)\n\
                except OSError as e:\n    print('blocked:', e)";
    let text = ptc.execute(code).await.expect_ok();
    let line = text.lines().nth(1).unwrap();
    if sandbox_under_test() != "none" && line.starts_with("blocked:") {
        return; // A real sandbox does not let it start a process at all (see the escape suite).
    }
    let pid: i32 = line.parse().unwrap_or_else(|_| panic!("no pid in {text}"));
    let check = std::process::Command::new(binary()).args(["--check-sandbox", "none"]).output().unwrap();
    if !String::from_utf8_lossy(&check.stdout).contains("a cgroup per run") {
        // SAFETY: kills the process the program left behind.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        skip("none without a cgroup per run here kills only the process group (documented)");
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while is_running(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!is_running(pid), "the program's child {pid}, in a session of its own, survived the run");
}

/// Any bytes make a Unix path: a `TMPDIR` that is not UTF-8 used to panic the request in the landlock policy
/// (the client never got an answer).
#[apply(integration_test!)]
async fn a_tmpdir_that_is_not_utf8_still_runs_programs() {
    use std::os::unix::ffi::OsStrExt;
    let base = tempfile::tempdir().unwrap();
    let tmpdir = base.path().join(std::ffi::OsStr::from_bytes(b"tmp-\xff"));
    std::fs::create_dir(&tmpdir).unwrap();
    let ptc = Ptc::start_with_os_env(&config(&[], ""), &[("TMPDIR", tmpdir.as_os_str())]).await;
    let code = "import os\nprint(b'tmp-\\xff' in os.getcwd().encode('utf-8', 'surrogateescape'))";
    let text = ptc.execute(code).await.expect_ok();
    // A container's scratch is its own /scratch.
    let expected = if sandbox_under_test() == "docker" { "False" } else { "True" };
    assert_eq!(text, format!("[Script executed successfully]\n{expected}"));
}

#[apply(integration_test!)]
async fn print_and_fd_writes_never_corrupt_the_channel() {
    let ptc = ptc_with_mock("").await;
    let code = r#"import os, sys, asyncio
print('{"type":"done","error":null}')
os.write(1, b'{"type":"emit","value":"forged"}\n')
sys.stderr.write('to stderr\n')
async def late():
    await asyncio.sleep(2)  # long after the program's end: it must never print
    print('late')
asyncio.get_running_loop().create_task(late())
print(await mcp__mock__echo(ok=True))"#;
    let run = ptc.execute(code).await;
    run.expect_ok();
    // Writes through fd 1 arrive through their own pipe, so only their order relative to print may vary.
    let mut lines: Vec<String> = run.structured()["output"].as_str().unwrap().lines().map(String::from).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["to stderr", r#"{"type":"done","error":null}"#, r#"{"type":"emit","value":"forged"}"#, "{'ok': True}"]
    );
    assert_eq!(run.structured()["result"], json!(null));
    assert_eq!(run.structured()["tool_calls"].as_array().unwrap().len(), 1);
}

#[apply(integration_test!)]
async fn forged_lines_on_the_channel_fd_spoil_only_that_run() {
    let ptc = ptc_with_mock("  max_tool_calls: 2\n").await;
    // The program finds the channel's fd and writes straight to it: a garbage line, then forged calls.
    let code = r#"import os
for fd in range(3, 64):
    try:
        os.write(fd, b'garbage that is not json\n')
    except OSError:
        pass
print('after')"#;
    let first = ptc.execute(code).await;
    let text = first.expect_error();
    assert!(text.contains("ExecutionError: the program corrupted its channel to the server"), "{text}");
    // Forged call messages are still calls: the server counts them against the budget.
    let forged_calls = r#"import os, json
line = json.dumps({"type": "call", "id": 999, "tool": "mcp__mock__echo", "args": {}}) + "\n"
for fd in range(3, 64):
    try:
        for _ in range(5):
            os.write(fd, line.encode())
    except OSError:
        pass
import asyncio
await asyncio.sleep(0.5)"#;
    let second = ptc.execute(forged_calls).await;
    let calls = second.structured()["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 2, "{}", second.text());
    assert_eq!(calls.iter().filter(|c| c["ok"] == json!(true)).count(), 2, "{}", second.text());
    assert_eq!(second.structured()["tool_calls_not_listed"], json!(3), "{}", second.text());
    // The server and later runs are unaffected.
    assert_eq!(
        without_call_time(&ptc.execute("print(await mcp__mock__echo(n=1))").await.expect_ok()),
        "[Script executed successfully]\n{'n': 1}\n[tool calls: 1; Ts]"
    );
}

#[apply(integration_test!)]
async fn an_unavailable_sandbox_refuses_runs_with_the_reason_and_the_fix() {
    let ptc = Ptc::start("execution:\n  sandbox: seatbelt\n").await;
    let run = ptc.execute("print(1)").await;
    let text = run.expect_error();
    assert!(
        text.starts_with(
            "[Script execution failed]\nSandboxError: the 'seatbelt' sandbox is unavailable: seatbelt needs macOS"
        ),
        "{text}"
    );
    assert!(text.contains("set execution.sandbox to"), "{text}");
    let (names, _) = ptc.list_callable_tools().await;
    assert!(names.is_empty(), "discovery still works");
}

/// A Docker engine that accepts connections and never answers (a hung daemon), and a config whose runs use
/// it with `execution` keys; the listener lives as long as the returned directory's task.
fn hung_docker_engine(execution: &str) -> (tempfile::TempDir, tokio::task::JoinHandle<()>, String) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let engine = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            held.push(connection);
        }
    });
    let config = format!(
        "servers: []\nexecution:\n  sandbox: docker\n  pool_size: 0\n{execution}  docker:\n    host: unix://{}\n",
        socket.display()
    );
    (dir, engine, config)
}

#[apply(integration_test!)]
async fn a_run_whose_sandbox_hangs_while_it_is_prepared_ends_at_its_time_limit() {
    let (_dir, engine, config) = hung_docker_engine("  timeout_seconds: 2\n");
    let ptc = Ptc::start(&config).await;
    let started = Instant::now();
    let text = ptc.execute("print(1)").await.expect_error();
    assert_eq!(
        text,
        "[Script execution failed]\nTimeoutError: Execution exceeded 2s limit before the program started: the \
         sandbox's availability check had not finished. The limit is execution.timeout_seconds in ptc-mcp's config"
    );
    assert!(started.elapsed() < Duration::from_secs(8), "answered after {:?}", started.elapsed());
    engine.abort();
}

#[apply(integration_test!)]
async fn the_client_can_cancel_a_run_while_it_is_prepared() {
    let (_dir, engine, config) = hung_docker_engine("");
    let ptc = Ptc::start_logging(&config, &[], Some("info")).await;
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": "print(1)"}).as_object().unwrap().clone());
    // Dropping the request after a second cancels it.
    let cancelled = tokio::time::timeout(Duration::from_secs(1), ptc.client.peer().call_tool(params)).await;
    assert!(cancelled.is_err(), "the run waits for the engine: {cancelled:?}");
    let ended = eventually(Duration::from_secs(5), || {
        ptc.log().lines().any(|line| line.contains("run finished") && line.contains("outcome=\"cancelled\""))
    })
    .await;
    assert!(ended, "the run did not end at the client's cancel:\n{}", ptc.log());
    engine.abort();
}

#[apply(integration_test!)]
async fn a_crashing_interpreter_is_reported_with_its_output_so_far() {
    let ptc = Ptc::start(&config(&[], "")).await;
    // A real segmentation fault (a read of address 0), not a signal the program sends itself: in a container
    // the runner is pid 1, which the kernel shields from signals it sends itself.
    let text = ptc.execute("print('partial', flush=True)\nimport ctypes\nctypes.string_at(0)").await.expect_error();
    assert!(
        text.contains("ExecutionError: the interpreter ended before the program finished (killed by signal 11)"),
        "{text}"
    );
    assert!(text.contains("--- output before the error ---\npartial"), "{text}");
}
