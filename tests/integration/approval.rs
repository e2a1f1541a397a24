//! Human approval inside programs (`tools.confirm`), with the official Python SDK client as the person:
//! accept lets the call through, decline and cancel raise `ToolError("declined by the user")` — asked with
//! `elicitation/create` in a 2025-era session, and through `input_required` results for a 2026-07-28 client;
//! a client without elicitation and `ptc-mcp run` get a ToolError saying why; the run's time limit stands
//! still while the person thinks, and the wait is bounded by `confirm_timeout_seconds`.

use serde_json::Value;

use crate::common::*;
use crate::http::{HttpPtc, TOKEN, token_keys};

/// The program: one call that needs approval (line 2), one that does not.
const PROGRAM: &str = "try:\n    r = await mcp__mock__add(a=1, b=2)\n    print('sum', r['sum'])\nexcept ToolError as e:\n    print('ToolError:', e)\nprint(await mcp__mock__echo(v=1))";

fn confirm_config(execution: &str, tools: &str) -> String {
    format!(
        "{}tools:\n  confirm: [\"mcp__mock__add\", \"mcp__*__delete*\"]\n{tools}",
        config(&[mock_server("mock", &[])], execution)
    )
}

/// Runs PROGRAM through the SDK client on stdio with `client_args` (e.g. `--elicit accept`); the report.
async fn over_stdio(config_text: &str, client_args: &[&str]) -> Option<Value> {
    run_over_stdio(PROGRAM, config_text, client_args).await
}

/// [`over_stdio`] with another program.
async fn run_over_stdio(code: &str, config_text: &str, client_args: &[&str]) -> Option<Value> {
    let (_dir, server) = stdio_server(config_text);
    let first = ["--protocol", "2025-11-25", "--code", code];
    let args = first.iter().chain(client_args).map(std::ffi::OsString::from);
    sdk_client_report(args.chain(server)).await
}

/// The program's output, or `None` (skipped) when the sandbox cannot run programs.
fn program_output(report: &Value) -> Option<String> {
    let text = report["execute"]["text"].as_str().unwrap_or_default().to_string();
    if text.contains("SandboxError") {
        return sandbox_unusable(&text).and(None);
    }
    assert_eq!(report["execute"]["is_error"], false, "{report}");
    Some(report["execute"]["structured"]["output"].as_str().unwrap().to_string())
}

#[apply(integration_test!)]
async fn an_accepted_call_goes_through_after_the_user_saw_the_tool_its_line_and_arguments() {
    let Some(report) = over_stdio(&confirm_config("", ""), &["--elicit", "accept"]).await else { return };
    let Some(output) = program_output(&report) else { return };
    assert_eq!(output, "sum 3\n{'v': 1}\n");
    let asked = report["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "only the confirmed tool asks: {report}");
    let question = asked[0].as_str().unwrap();
    assert!(question.starts_with("A program wants to call mcp__mock__add (line 2 of the program) with"), "{question}");
    assert!(question.contains("\"a\": 1") && question.ends_with("Allow this call?"), "{question}");
}

#[apply(integration_test!)]
async fn a_declined_or_cancelled_call_raises_tool_error_declined_by_the_user() {
    for answer in ["decline", "cancel"] {
        let Some(report) = over_stdio(&confirm_config("", ""), &["--elicit", answer]).await else { return };
        let Some(output) = program_output(&report) else { return };
        assert_eq!(output, "ToolError: declined by the user\n{'v': 1}\n", "{answer}");
    }
}

#[apply(integration_test!)]
async fn a_client_without_elicitation_is_told_to_enable_it_or_call_the_tool_directly() {
    let Some(report) = over_stdio(&confirm_config("", ""), &[]).await else { return };
    let Some(output) = program_output(&report) else { return };
    assert!(
        output.starts_with(
            "ToolError: 'mcp__mock__add' needs the user's approval (tools.confirm), but this client does \
                            not support MCP elicitation: enable elicitation in the client, or call the tool directly\n"
        ),
        "{output}"
    );
}

#[apply(integration_test!)]
async fn the_time_limit_stands_still_while_the_user_thinks_and_the_wait_is_bounded() {
    // The person takes 8 s; the run may use 5 s: it succeeds, since the wait does not count.
    let slow = confirm_config("  timeout_seconds: 5\n", "");
    let Some(report) = over_stdio(&slow, &["--elicit", "accept", "--elicit-delay", "8"]).await else { return };
    let Some(output) = program_output(&report) else { return };
    assert_eq!(output, "sum 3\n{'v': 1}\n");
    // The wait for the person is bounded by confirm_timeout_seconds.
    let bounded = confirm_config("", "  confirm_timeout_seconds: 1\n");
    let Some(report) = over_stdio(&bounded, &["--elicit", "accept", "--elicit-delay", "30"]).await else { return };
    let Some(output) = program_output(&report) else { return };
    assert!(
        output.starts_with("ToolError: 'mcp__mock__add' was not approved within 1s (tools.confirm_timeout_seconds)"),
        "{output}"
    );
}

#[apply(integration_test!)]
async fn waits_for_approval_extend_a_run_by_confirm_timeout_seconds_at_most_in_all() {
    // A program that always has an approval pending: each wait (1 s, then a ToolError) is within
    // confirm_timeout_seconds, all of them together are not. The run gets 5 s plus 1 s of waits.
    let nagging = "while True:\n    try:\n        await mcp__mock__add(a=1, b=2)\n    except ToolError:\n        pass";
    let config = confirm_config("  timeout_seconds: 5\n", "  confirm_timeout_seconds: 1\n");
    let client = ["--elicit", "accept", "--elicit-delay", "30", "--timeout", "20"];
    let Some(report) = run_over_stdio(nagging, &config, &client).await else { return };
    let text = report["execute"]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(text);
        return;
    }
    assert!(text.starts_with("[Script execution failed]\nTimeoutError: Execution exceeded 5s limit"), "{report}");
    // Each call waited its 1 s, and the run lasted 6 s at most (a client still waiting fails the report).
    let calls = report["execute"]["structured"]["tool_calls"].as_array().unwrap().len();
    assert!((1..=7).contains(&calls), "{calls} calls waited: {report}");
}

#[apply(integration_test!)]
async fn a_2026_client_is_asked_through_input_required_results_and_the_run_resumes() {
    let ptc = HttpPtc::start(&confirm_config("", ""), &format!("{}    max_concurrent_runs: 4\n", token_keys())).await;
    let twice = format!("{PROGRAM}\n{PROGRAM}");
    let (url, authorization) = (ptc.url(), format!("Authorization: Bearer {TOKEN}"));
    for (answer, expected) in [
        ("accept", "sum 3\n{'v': 1}\nsum 3\n{'v': 1}\n"),
        ("decline", "ToolError: declined by the user\n{'v': 1}\nToolError: declined by the user\n{'v': 1}\n"),
        ("cancel", "ToolError: declined by the user\n{'v': 1}\nToolError: declined by the user\n{'v': 1}\n"),
    ] {
        let program = ["--protocol", "2026-07-28", "--elicit", answer, "--progress", "--code", &twice];
        let server = ["--url", &url, "--header", &authorization];
        let Some(report) = sdk_client_report(program.into_iter().chain(server)).await else { return };
        let Some(output) = program_output(&report) else { return };
        assert_eq!(output, expected, "{answer}: {report}");
        let asked = report["elicitations"].as_array().unwrap();
        assert_eq!(asked.len(), 2, "one question per call, across three requests: {report}");
        assert!(asked[1].as_str().unwrap().contains("mcp__mock__add (line 8 of the program)"), "{report}");
        let progress: Vec<f64> =
            report["progress"].as_array().unwrap().iter().map(|p| p["progress"].as_f64().unwrap()).collect();
        assert!(progress.windows(2).all(|w| w[0] < w[1]), "increasing across the requests: {progress:?}");
    }
}

#[apply(integration_test!)]
async fn a_2026_client_cannot_resume_with_a_state_it_was_not_given() {
    let ptc = HttpPtc::start(&confirm_config("", ""), &format!("{}    max_concurrent_runs: 4\n", token_keys())).await;
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute_program","arguments":{"code":"print(1)"},"requestState":"0123456789abcdef0123456789abcdef","inputResponses":{"approval":{"action":"accept"}},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let bearer = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "execute_program"),
    ];
    let (status, response) = crate::http::raw(ptc.port(), "/mcp", &headers, call).await;
    assert_eq!(status, 200, "{response}");
    assert!(
        response.contains("\"isError\":true") && response.contains("requestState names no run waiting"),
        "{response}"
    );
}

#[apply(integration_test!)]
async fn a_parked_run_whose_client_never_comes_back_frees_its_slot_when_its_time_is_up() {
    // One run slot. A 2026 client's run asks for approval, is parked, and its client never comes back; the
    // program keeps asking. Another client's run gets the slot once the parked run's time is up (1 s to
    // answer and a short margin), long before the parked run's own limit (30 s).
    let token = "approval-test-token-0123456789";
    let http = format!("    token: {token}\n    max_concurrent_runs: 1\n");
    let config = confirm_config("  timeout_seconds: 30\n", "  confirm_timeout_seconds: 1\n");
    let ptc = HttpPtc::start(&config, &http).await;
    let call = |id: u32, code: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "execute_program", "arguments": {"code": code},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let authorization = format!("Bearer {token}");
    let headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "execute_program"),
        ("Authorization", authorization.as_str()),
    ];
    let nagging = "while True:\n    try:\n        await mcp__mock__add(a=1, b=2)\n    except ToolError:\n        pass";
    let (status, parked) = crate::http::raw(ptc.port(), "/mcp", &headers, &call(1, nagging)).await;
    if parked.contains("SandboxError") {
        let _ = sandbox_unusable(&parked);
        return;
    }
    assert!(status == 200 && parked.contains("requestState"), "{parked}");
    let started = std::time::Instant::now();
    let (status, second) = crate::http::raw(ptc.port(), "/mcp", &headers, &call(2, "print('second')")).await;
    assert!(status == 200 && second.contains("[Script executed successfully]\\nsecond"), "{second}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the slot freed after {:?}", started.elapsed());
}

#[apply(integration_test!)]
async fn ptc_mcp_run_cannot_ask_anyone_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), confirm_config("", "")).unwrap();
    std::fs::write(dir.path().join("p.py"), PROGRAM).unwrap();
    let out =
        tokio::process::Command::new(binary()).args(["run", "p.py"]).current_dir(dir.path()).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if stdout.contains("SandboxError") {
        let _ = sandbox_unusable(&stdout);
        return;
    }
    assert!(
        stdout.contains(
            "ToolError: 'mcp__mock__add' needs the user's approval (tools.confirm), and nobody can be asked here"
        ),
        "{stdout}"
    );
}
