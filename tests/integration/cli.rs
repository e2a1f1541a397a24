//! Start-up and the command line: config errors, running without a config, answering at once.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

#[apply(integration_test!)]
async fn a_bad_config_exits_with_status_2_and_one_line_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "execution:\n  max_tool_calls: 0\n").unwrap();
    let output = tokio::process::Command::new(binary()).arg("--config").arg(&path).output().await.unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("execution.max_tool_calls: must be at least 1"), "{stderr}");
}

#[apply(integration_test!)]
async fn an_unset_variable_is_a_config_error_naming_it_and_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "servers:\n  - name: api\n    command: x\n    env:\n      KEY: ${PTC_TEST_UNSET_VARIABLE}\n")
        .unwrap();
    let output = tokio::process::Command::new(binary())
        .arg("--config")
        .arg(&path)
        .env_remove("PTC_TEST_UNSET_VARIABLE")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("PTC_TEST_UNSET_VARIABLE") && stderr.contains("'api'"), "{stderr}");
}

#[apply(integration_test!)]
async fn the_config_is_found_through_the_environment_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.yaml");
    std::fs::write(&path, "execution:\n  timeout_seconds: -1\n").unwrap();
    let output = tokio::process::Command::new(binary())
        .env("PTC_MCP_CONFIG", &path)
        .current_dir(dir.path())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("execution.timeout_seconds"));
}

#[apply(integration_test!)]
async fn without_any_config_file_the_server_starts_with_no_tools_and_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(binary())
        .current_dir(dir.path())
        .env_remove("PTC_MCP_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = rmcp::ServiceExt::serve((), transport).await.unwrap();
    let result = client.peer().call_tool(rmcp::model::CallToolRequestParams::new("list_callable_tools")).await.unwrap();
    assert_eq!(text_block(&result, 0), "[]");
    let looked_at = dir.path().canonicalize().unwrap().join("config.yaml");
    assert_eq!(
        text_block(&result, 1),
        format!(
            "no servers configured (no config file found at {}; name one with --config PATH or $PTC_MCP_CONFIG)",
            looked_at.display()
        )
    );
    // A config file without servers is a choice: the listing is the original ptc-mcp's alone.
    let empty = Ptc::start(&config(&[], "")).await;
    assert_eq!(empty.list_callable_tools().await, (Vec::new(), None));
}

#[apply(integration_test!)]
async fn help_describes_the_config_search_order() {
    let output = tokio::process::Command::new(binary()).arg("--help").output().await.unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    for expected in ["--config <PATH>", "$PTC_MCP_CONFIG", "./config.yaml", "stdio"] {
        assert!(help.contains(expected), "--help lacks {expected}:\n{help}");
    }
}

#[apply(integration_test!)]
async fn initialize_is_answered_at_once_whatever_the_downstreams_do() {
    let silent = "  - name: silent\n    command: sleep\n    args: [\"1000\"]\n".to_string();
    let failing = mock_server("failing", &["--fail-start"]);
    let started = Instant::now();
    let ptc = Ptc::start(&config(&[silent, failing], "")).await;
    assert!(started.elapsed() < Duration::from_secs(2), "initialize took {:?}", started.elapsed());
    let tools = ptc.client.peer().list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["list_callable_tools", "inspect_tool", "execute_program"]);
}

#[apply(integration_test!)]
async fn the_tool_descriptions_tell_a_model_how_to_use_them() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let tools = ptc.client.peer().list_all_tools().await.unwrap();
    let execute = tools.iter().find(|t| t.name == "execute_program").unwrap();
    let description = execute.description.as_deref().unwrap();
    for point in [
        "mcp__<server>__<tool>",
        "await",
        "keyword arguments",
        "ToolError",
        "print",
        "emit(value)",
        "asyncio.gather",
        "_notes",
    ] {
        assert!(description.contains(point), "execute_program's description lacks {point:?}");
    }
    assert!(description.len() < 1600, "keep it short: {} chars", description.len());
    let inspect = tools.iter().find(|t| t.name == "inspect_tool").unwrap();
    assert_eq!(inspect.input_schema["required"], json!(["tool_name"]));
}

#[apply(integration_test!)]
async fn an_unknown_tool_of_ours_is_a_protocol_error() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let params = rmcp::model::CallToolRequestParams::new("nope");
    let err = ptc.client.peer().call_tool(params).await.unwrap_err();
    assert!(err.to_string().contains("unknown tool 'nope'"), "{err}");
}

#[apply(integration_test!)]
async fn the_example_config_runs_the_seed_scenario_against_the_demo_server() {
    let root = repo_path("");
    let ptc = Ptc::start_from_file(&root.join("config.example.yaml"), &root).await;
    let code = "tickers = ['AMZN', 'MSFT', 'GOOG']\nfor t in tickers:\n    data = await mcp__financial_data__query_financials(\n        \
                ticker=t, statement='income', period='quarter', limit=4)\n    revenues = [q['revenue'] for q in data]\n    \
                print(f\"{t}: \" + ' → '.join(f'${r/1e9:.1f}B' for r in revenues))";
    let text = ptc.execute(code).await.expect_ok();
    assert!(
        text.starts_with("[Script executed successfully]\nAMZN: $170.0B → $166.6B → $163.3B → $160.0B\nMSFT: "),
        "{text}"
    );
    assert!(text.contains("\n[tool calls: 3; "), "{text}");
}

/// `--check-sandbox` prints, after what is in force, what the mode it found guarantees: the README's column.
#[apply(integration_test!)]
async fn check_sandbox_prints_what_the_mode_guarantees() {
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(binary())
        .args(["--check-sandbox", "none"])
        .current_dir(dir.path())
        .env_remove("PTC_MCP_CONFIG")
        .output()
        .await
        .unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("none: available: NO OS ISOLATION"), "{stdout}");
    assert_eq!(lines[1], "what it guarantees here (none, README \"Sandboxes\"):");
    assert!(lines.contains(&"  network: all your user has"), "{stdout}");
    assert!(lines.contains(&"  scratch size: scratch_mb, measured by the server"), "{stdout}");
}
