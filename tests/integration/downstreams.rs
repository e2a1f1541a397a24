//! Real downstreams under real load: servers slow to start connect on their first attempt (and are shown as
//! starting meanwhile), large results arrive whole and too-large ones fail at once, results carry their
//! payload once, start-up failures are explained in one line, and no downstream process outlives ptc-mcp.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::common::*;

/// Longer than the 15 s the first list after start-up waits for servers, so that the server is seen starting
/// (with a margin for a loaded machine).
const SLOW_START_SECONDS: u32 = 25;
/// How long a slow server may take to appear: its delay plus its start-up on a loaded machine.
const APPEAR_LIMIT: Duration = Duration::from_secs(120);

/// The lines of a mock's state file (`--state-file`) that start with `prefix`.
fn recorded(state: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(state)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix(prefix).map(str::to_string))
        .collect()
}

/// Checks that server `name` is reported as starting (by `server_status()` and `list_callable_tools`), then
/// waits for `tool` to appear.
async fn assert_starting_then_connected(ptc: &Ptc, name: &str, tool: &str) {
    // The first program waits (at most 15 s after start-up) for servers still starting, then runs at once.
    let status = ptc.execute(&format!("print(server_status()[{name:?}])")).await.expect_ok();
    assert!(status.contains("{'connected': False, 'tools': 0, 'error': 'starting (for "), "{status}");
    let (names, problems) = ptc.list_callable_tools().await;
    assert!(!names.contains(&tool.to_string()), "{names:?}");
    let problems = problems.unwrap_or_default();
    assert!(problems.contains(&format!("- server '{name}' is starting (for ")), "{problems}");
    assert!(problems.contains("s so far)"), "{problems}");
    let names = ptc.wait_for_tools(APPEAR_LIMIT, |names| names.contains(&tool.to_string())).await;
    assert!(names.contains(&tool.to_string()), "{tool} never appeared: {names:?}");
}

#[apply(integration_test!)]
async fn a_2026_era_server_that_starts_slowly_connects_on_its_first_attempt() {
    let Some(time_server) = required_path("third-party-servers", "PTC_TEST_TIME_SERVER") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    // As `sh -c "sleep 12; exec mcp-server-time"` in the issue, counting its starts.
    let script = format!("echo start >> \"$0\"; sleep {SLOW_START_SECONDS}; exec \"$1\" --local-timezone UTC");
    let args = json!(["-c", script, state.display().to_string(), time_server]);
    let entry = format!("  - name: slow\n    command: sh\n    args: {args}\n");
    let ptc = Ptc::start(&config(&[entry], "")).await;
    assert_starting_then_connected(&ptc, "slow", "mcp__slow__get_current_time").await;
    assert_eq!(recorded(&state, "start").len(), 1, "it connected on its first attempt");
    let text = ptc.execute("print((await mcp__slow__get_current_time(timezone='UTC'))['timezone'])").await;
    assert!(text.expect_ok().contains("\nUTC\n"), "{}", text.text());
}

/// A mock of `era` that waits before answering its first message, recording its starts and requests.
async fn slow_mock(era: &str, state: &Path) -> Ptc {
    let delay = SLOW_START_SECONDS.to_string();
    let state = state.display().to_string();
    let flags = ["--era", era, "--first-answer-delay", &delay, "--state-file", &state, "--record-requests"];
    Ptc::start(&config(&[mock_server("slow", &flags)], "")).await
}

#[apply(integration_test!)]
async fn a_2025_era_server_slow_to_answer_its_first_message_connects_on_its_first_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("events");
    let ptc = slow_mock("2025", &state).await;
    assert_starting_then_connected(&ptc, "slow", "mcp__slow__echo").await;
    assert_eq!(ptc.outcome("mcp__slow__echo(v=1)").await, "{'v': 1}");
    assert_eq!(recorded(&state, "start ").len(), 1, "it connected on its first attempt");
    assert_eq!(recorded(&state, "request initialize").len(), 1, "a 2025-era server is initialized");
}

#[apply(integration_test!)]
async fn a_2026_era_server_slow_to_answer_its_first_message_connects_on_its_first_attempt_without_initialize() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("events");
    let ptc = slow_mock("2026", &state).await;
    assert_starting_then_connected(&ptc, "slow", "mcp__slow__echo").await;
    assert_eq!(ptc.outcome("mcp__slow__echo(v=1)").await, "{'v': 1}");
    assert_eq!(recorded(&state, "start ").len(), 1, "it connected on its first attempt");
    assert_eq!(recorded(&state, "request initialize").len(), 0, "a 2026 server is not initialized");
    assert!(!recorded(&state, "request server/discover").is_empty());
}

#[apply(integration_test!)]
async fn a_server_that_never_answers_is_given_up_after_connect_timeout_seconds_and_says_so() {
    let entry = mock_server("mute", &["--first-answer-delay", "3600"]) + "    connect_timeout_seconds: 1\n";
    let ptc = Ptc::start(&config(&[entry], "")).await;
    let expected = "- server 'mute' is unavailable: did not answer within 1s (connect_timeout_seconds)";
    let problems = ptc.wait_for_problems(Duration::from_secs(30), |p| p.contains(expected)).await;
    assert!(problems.contains(expected), "{problems}");
}

#[apply(integration_test!)]
async fn a_20_mb_result_arrives_whole() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let run = ptc.execute("r = await mcp__mock__huge(size=20_000_000)\nprint(len(r['data']))").await;
    assert!(run.expect_ok().contains("\n20000000\n"), "{}", run.text());
}

#[apply(integration_test!)]
async fn a_result_too_large_for_the_connection_fails_at_once_and_the_server_stays_connected() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    let flags = ["--state-file", &state.display().to_string()];
    // The call would wait for an hour if the oversized answer were dropped: the test would time out.
    let execution = "  max_tool_result_bytes: 1000000\n  tool_call_timeout_seconds: 3600\n";
    let ptc = Ptc::start(&config(&[mock_server("mock", &flags)], execution)).await;
    let calls = ["mcp__mock__huge(size=20_000_000)".to_string(), "mcp__mock__echo(still='up')".to_string()];
    let lines = ptc.outcomes(&calls).await;
    assert!(lines[0].starts_with("ToolError: 'mcp__mock__huge' returned 200000"), "{}", lines[0]);
    assert!(
        lines[0].ends_with(
            " bytes, more than max_tool_result_bytes (1000000); ask it for less (filter, paginate or limit the query)"
        ),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], "{'still': 'up'}");
    assert_eq!(recorded(&state, "start ").len(), 1, "the connection survived");
}

#[apply(integration_test!)]
async fn a_filesystem_style_result_carries_its_text_once() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &["--file-style"])], "")).await;
    let calls = [
        r"mcp__mock__file_style(text='line 1\nline 2')".to_string(),
        r#"mcp__mock__file_style(text='{"a": 1}')"#.into(),
    ];
    assert_eq!(ptc.outcomes(&calls).await, [r"{'content': 'line 1\nline 2'}", r#"{'content': '{"a": 1}'}"#]);
}

#[apply(integration_test!)]
async fn server_memory_results_carry_their_payload_once() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_MEMORY_SERVER") else {
        return;
    };
    let memory_file = tempfile::tempdir().unwrap();
    let entry = format!(
        "  - name: memory\n    command: node\n    args: [{}]\n    env:\n      MEMORY_FILE_PATH: {}\n",
        json!(server),
        json!(memory_file.path().join("memory.jsonl").display().to_string())
    );
    let ptc = Ptc::start(&config(&[entry], "")).await;
    let names =
        ptc.wait_for_tools(APPEAR_LIMIT, |names| names.iter().any(|n| n == "mcp__memory__create_entities")).await;
    assert!(names.iter().any(|n| n == "mcp__memory__create_entities"), "{names:?}");
    let calls = [
        "mcp__memory__create_entities(entities=[{'name': 'ptc', 'entityType': 'project', 'observations': ['in Rust']}])",
        "mcp__memory__add_observations(observations=[{'entityName': 'ptc', 'contents': ['fast']}])",
        "mcp__memory__delete_entities(entityNames=['ptc'])",
    ];
    let calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        ptc.outcomes(&calls).await,
        [
            "{'entities': [{'name': 'ptc', 'entityType': 'project', 'observations': ['in Rust']}]}",
            "{'results': [{'entityName': 'ptc', 'addedObservations': ['fast']}]}",
            "{'success': True, 'message': 'Entities deleted successfully'}",
        ]
    );
}

/// Many servers log every request to stderr. Bytes that are not UTF-8 and lines far longer than a pipe holds
/// neither stop ptc-mcp reading it (the server would block on its next write) nor cost it their size.
#[apply(integration_test!)]
async fn a_server_that_writes_anything_to_stderr_keeps_answering() {
    let ptc =
        Ptc::start(&config(&[mock_server("mock", &["--noisy-stderr"])], "  tool_call_timeout_seconds: 20\n")).await;
    let mut calls = vec!["mcp__mock__stderr(size=300_000)".to_string(); 4];
    calls.push("mcp__mock__echo(still='up')".to_string());
    assert_eq!(ptc.outcomes(&calls).await, ["'written'", "'written'", "'written'", "'written'", "{'still': 'up'}"]);
    let status = ptc.execute("print(server_status()['mock'])").await.expect_ok();
    assert!(status.contains("{'connected': True, "), "{status}");
}

#[apply(integration_test!)]
async fn a_server_that_dies_with_a_traceback_is_explained_in_one_line_with_its_last_stderr_line() {
    let ptc = Ptc::start(&config(&[mock_server("broken", &["--fail-start-traceback"])], "")).await;
    let reason = "exited with status 1: RuntimeError: mock: failing at start with a traceback";
    let problems = ptc.list_callable_tools().await.1.unwrap_or_default();
    assert!(problems.lines().any(|line| line == format!("- server 'broken' is unavailable: {reason}")), "{problems}");
    let status = ptc.execute("print(server_status()['broken']['error'])").await.expect_ok();
    assert!(status.lines().any(|line| line == reason), "{status}");
}

/// How ptc-mcp is told to stop.
enum Stop {
    StdinClosed,
    Signal(libc::c_int),
}

/// Starts ptc-mcp with a downstream that started a child of its own (which ignores SIGTERM), stops ptc-mcp
/// as `stop` says, and checks that no process of the downstream's process group is left.
async fn assert_nothing_outlives_ptc(stop: Stop) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("events");
    let flags = ["--spawn-child", "--state-file", &state.display().to_string()];
    let ptc = Ptc::start(&config(&[mock_server("parent", &flags)], "")).await;
    let names = ptc.wait_for_tools(Duration::from_secs(60), |n| n.contains(&"mcp__parent__echo".to_string())).await;
    assert!(names.contains(&"mcp__parent__echo".to_string()), "{names:?}");
    let leader: i32 = recorded(&state, "start ")[0].parse().unwrap();
    let child: i32 = recorded(&state, "child ")[0].parse().unwrap();
    assert!(is_running(child), "the downstream's child runs");
    let Ptc { client, child: mut ptc_process, dir: _dir } = ptc;
    match stop {
        Stop::StdinClosed => drop(client.cancel().await),
        Stop::Signal(signal) => {
            let pid = ptc_process.id().expect("ptc-mcp runs") as libc::pid_t;
            // SAFETY: plain syscall on our own child.
            assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        }
    }
    let exited = tokio::time::timeout(Duration::from_secs(60), ptc_process.wait()).await;
    assert!(exited.is_ok(), "ptc-mcp did not exit");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut left = group_members(leader);
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = group_members(leader);
    }
    if !left.is_empty() {
        // SAFETY: plain syscall; the group is the one our test downstream made.
        unsafe { libc::kill(-leader, libc::SIGKILL) };
    }
    assert_eq!(left, Vec::<i32>::new(), "processes of the downstream's group outlived ptc-mcp");
}

#[apply(integration_test!)]
async fn no_downstream_process_outlives_ptc_when_its_stdin_closes() {
    assert_nothing_outlives_ptc(Stop::StdinClosed).await;
}

#[apply(integration_test!)]
async fn no_downstream_process_outlives_ptc_on_sigterm() {
    assert_nothing_outlives_ptc(Stop::Signal(libc::SIGTERM)).await;
}

#[apply(integration_test!)]
async fn no_downstream_process_outlives_ptc_on_sigint() {
    assert_nothing_outlives_ptc(Stop::Signal(libc::SIGINT)).await;
}
