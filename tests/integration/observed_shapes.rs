//! Signatures that learn: a tool without an output schema shows the shape of its results so far as its
//! return type, until its server's tool list changes.

use std::time::Duration;

use serde_json::json;

use crate::common::*;

async fn python_signature(ptc: &Ptc, tool: &str) -> String {
    text_block(&ptc.call("inspect_tool", json!({"tool_name": tool, "format": "python"})).await, 0)
}

#[apply(integration_test!)]
async fn signatures_show_the_merged_shape_of_results_seen_until_the_tool_list_changes() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    assert!(python_signature(&ptc, "mcp__mock__echo").await.contains("-> Any:  # no output schema"));
    let program = "await mcp__mock__echo(path='a.txt', size=1, token='sk-secret-4242')\n\
                   await mcp__mock__echo(path='b.txt', tags=['x'])\n\
                   await mcp__mock__huge(size=400_000)";
    ptc.execute(program).await.expect_ok();
    let observed = "-> dict:  # observed: {'path': str, 'size'?: int, 'token'?: str, 'tags'?: list[str]}\n";
    let echo = python_signature(&ptc, "mcp__mock__echo").await;
    assert!(echo.contains(observed), "{echo}");
    assert!(!echo.contains("sk-secret") && !echo.contains("a.txt"), "no value is shown: {echo}");
    let listed = ptc.call("list_callable_tools", json!({"query": "echo", "detail": "signatures", "limit": 1})).await;
    assert!(text_block(&listed, 0).contains(observed), "{}", text_block(&listed, 0));
    let huge = python_signature(&ptc, "mcp__mock__huge").await;
    assert!(huge.contains("-> dict:  # observed: {'data': str}\n"), "a large result read off-thread counts: {huge}");

    assert_eq!(ptc.outcome("mcp__mock__add_tool()").await, "'added dynamic_1'");
    let relisted = |names: &[String]| names.contains(&"mcp__mock__dynamic_1".to_string());
    assert!(relisted(&ptc.wait_for_tools(Duration::from_secs(5), relisted).await));
    let after = python_signature(&ptc, "mcp__mock__echo").await;
    assert!(after.contains("-> Any:  # no output schema"), "a new listing forgets: {after}");
}

#[apply(integration_test!)]
async fn failed_calls_teach_no_shape() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    ptc.execute("try:\n    await mcp__mock__fail()\nexcept ToolError:\n    pass").await.expect_ok();
    assert!(python_signature(&ptc, "mcp__mock__fail").await.contains("-> Any:  # no output schema"));
}

#[apply(integration_test!)]
async fn a_reconnect_forgets_the_shapes_seen() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    let ptc = Ptc::start(&config(&[mock_server("mock", &["--state-file", &state.display().to_string()])], "")).await;
    ptc.execute("await mcp__mock__echo(n=1)").await.expect_ok();
    assert!(python_signature(&ptc, "mcp__mock__echo").await.contains("-> dict:  # observed: {'n': int}\n"));
    ptc.outcome("mcp__mock__crash()").await;
    let restarted = || std::fs::read_to_string(&state).unwrap_or_default().lines().count() >= 2;
    assert!(eventually(Duration::from_secs(10), restarted).await, "the server was not restarted");
    // The second start happens after the lost session was taken down: tools listed from then on are new.
    let echo = |names: &[String]| names.contains(&"mcp__mock__echo".to_string());
    assert!(echo(&ptc.wait_for_tools(Duration::from_secs(10), echo).await));
    let after = python_signature(&ptc, "mcp__mock__echo").await;
    assert!(after.contains("-> Any:  # no output schema"), "a new session's listing forgets: {after}");
}
