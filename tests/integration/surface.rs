//! What the three tools say to a model that gets something wrong: failure summaries that show each call's
//! arguments once, arguments a tool does not take, near-miss tool names, and the time limit.

use serde_json::json;

use crate::common::*;

async fn ptc_with_mock(execution: &str) -> Ptc {
    Ptc::start(&config(&[mock_server("mock", &[])], execution)).await
}

#[apply(integration_test!)]
async fn failures_alike_share_one_summary_line_with_the_arguments_and_the_mark_caught() {
    let ptc = ptc_with_mock("  max_tool_result_bytes: 1000\n").await;
    let code = "for attempt in range(5):\n    try:\n        await mcp__mock__huge(size=5000)\n    except ToolError:\n        \
                pass\nprint('done')";
    let run = ptc.execute(code).await;
    // Each failure had a line of its own, without the arguments and with the tool named twice: 800 bytes.
    assert_eq!(
        without_call_time(&run.expect_ok()),
        "[Script executed successfully]\ndone\n[tool calls: 5, 5 failed; Ts]\n  \
         failed: mcp__mock__huge {\"size\":5000} (5 calls, caught): returned 5012 bytes, more than \
         max_tool_result_bytes (1000); ask it for less (filter, paginate or limit the query)"
    );
    // The structured content keeps every call, whole.
    let calls = run.structured()["tool_calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 5);
    let error = "'mcp__mock__huge' returned 5012 bytes, more than max_tool_result_bytes (1000); ask it for less \
                 (filter, paginate or limit the query)";
    for call in calls {
        assert_eq!((&call["arguments"], &call["error"]), (&json!({"size": 5000}), &json!(error)));
    }
}

#[apply(integration_test!)]
async fn the_error_of_a_failure_the_program_did_not_catch_is_shown_once() {
    let ptc = ptc_with_mock("").await;
    let text = ptc.execute("print('start')\nawait mcp__mock__fail()").await.expect_error();
    assert_eq!(
        without_call_time(&text),
        "[Script execution failed]\nTraceback (most recent call last):\n  File \"<program>\", line 2, in <module>\n    \
         await mcp__mock__fail()\nToolError: 'mcp__mock__fail' returned an error: something broke\n\n\
         --- output before the error ---\nstart\n[tool calls: 1, 1 failed; Ts]\n  failed: mcp__mock__fail: the error above"
    );
}

#[apply(integration_test!)]
async fn execute_program_refuses_an_argument_it_does_not_take_naming_those_it_does() {
    let ptc = ptc_with_mock("").await;
    let result = ptc.call("execute_program", json!({"code": "print('ran')", "timeout": 300})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(text_block(&result, 0), "execute_program got an unexpected argument 'timeout'; it takes code, session");
    assert_eq!(result.structured_content, None, "the program ran");
}

#[apply(integration_test!)]
async fn inspect_tool_suggests_the_names_a_near_miss_meant_as_a_programs_call_does() {
    let ptc =
        Ptc::start(&format!("{}tools:\n  block: [\"mcp__mock__env\"]\n", config(&[mock_server("mock", &[])], "")))
            .await;
    let inspected = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__ech"})).await;
    assert_eq!(inspected.is_error, Some(true));
    let suggestion = "did you mean 'mcp__mock__echo'?";
    assert_eq!(
        text_block(&inspected, 0),
        format!("[Tool not found] 'mcp__mock__ech' is not a callable tool; {suggestion}")
    );
    // The program's call of the same name gets the same suggestion, from the runner's check.
    let called = ptc.execute("await mcp__mock__ech()").await.expect_error();
    assert!(called.contains(&format!("'mcp__mock__ech' is not a tool; {suggestion}")), "{called}");
    let blocked = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__env"})).await;
    assert_eq!(
        text_block(&blocked, 0),
        "[Tool not found] 'mcp__mock__env' is not callable: it is blocked by tools.block"
    );
    let far = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__nothing_like_it"})).await;
    assert_eq!(
        text_block(&far, 0),
        "[Tool not found] 'mcp__mock__nothing_like_it' is not a callable tool; list_callable_tools gives the exact \
         names"
    );
}

#[apply(integration_test!)]
async fn the_timeout_error_names_its_setting_and_suggests_printing_partial_results() {
    let ptc = Ptc::start(&config(&[], "  timeout_seconds: 5\n")).await;
    // The first run also waits for the sandbox's check and a runner's start: the limit is tested after it.
    let _ = ptc.execute("print(1)").await;
    let text = ptc.execute("print('found 3 so far')\nwhile True:\n    pass").await.expect_error();
    assert_eq!(
        text,
        "[Script execution failed]\nTimeoutError: Execution exceeded 5s limit. The limit is \
         execution.timeout_seconds in ptc-mcp's config; print partial results as the program goes: what it printed \
         before the limit comes back\n\n--- output before the error ---\nfound 3 so far"
    );
}

/// The case seen with the real server-filesystem: a folder read as a file, five times, each failure caught.
#[apply(integration_test!)]
async fn five_reads_of_a_folder_in_server_filesystem_make_one_line_that_shows_the_path() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_FILESYSTEM_SERVER") else {
        return;
    };
    let files = tempfile::tempdir().unwrap();
    let folder = files.path().canonicalize().unwrap().join("reports");
    std::fs::create_dir(&folder).unwrap();
    let root = json!(folder.parent().unwrap().display().to_string());
    let entry = format!("  - name: files\n    command: node\n    args: [{}, {root}]\n", json!(server));
    let ptc = Ptc::start(&config(&[entry], "")).await;
    let read = "mcp__files__read_text_file";
    ptc.wait_for_tools(std::time::Duration::from_secs(60), |names| names.iter().any(|n| n == read)).await;
    let path = json!(folder.display().to_string());
    let code =
        format!("for _ in range(5):\n    try:\n        await {read}(path={path})\n    except ToolError:\n        pass");
    let text = ptc.execute(&code).await.expect_ok();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let line = format!("  failed: {read} {{\"path\":{path}}} (5 calls, caught): returned an error: EISDIR");
    assert!(lines[3].starts_with(&line), "{text}");
}
