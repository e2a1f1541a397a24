//! Downstream servers through the registry: name mapping, result parsing over the wire, faults,
//! supervision and reconnects, filters.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::*;

async fn ptc_with(flags: &[&str], execution: &str) -> Ptc {
    Ptc::start(&config(&[mock_server("mock", flags)], execution)).await
}

#[apply(integration_test!)]
async fn every_result_shape_reaches_the_program_as_the_spec_says() {
    let ptc = ptc_with(&[], "  max_tool_result_bytes: 1000\n").await;
    let cases = [
        ("mcp__mock__add(a=1, b=2)", "{'sum': 3}"),
        ("mcp__mock__structured_with_note()", "{'value': 1, '_notes': ['EMPTY RESULT warning: nothing matched']}"),
        ("mcp__mock__sdk_list()", "[1, 2, 3]"),
        ("mcp__mock__fastmcp_wrapped()", "'hello'"),
        ("mcp__mock__fastmcp_meta_wrapped()", "[4, 5]"),
        ("mcp__mock__multi_text()", "{'items': [1, 2], '_notes': ['Found 2 items']}"),
        ("mcp__mock__plain_text()", "'hello world'"),
        (
            "mcp__mock__image()",
            "{'result': 'chart attached', '_notes': ['[non-text content omitted: image (image/png)]']}",
        ),
        ("mcp__mock__fail()", "ToolError: 'mcp__mock__fail' returned an error: something broke"),
        (
            "mcp__mock__rpc_error()",
            "ToolError: 'mcp__mock__rpc_error' failed: internal failure (JSON-RPC error -32000)",
        ),
        ("mcp__mock__echo(text='é ✓')", "{'text': 'é ✓'}"),
    ];
    for (call, expected) in cases {
        assert_eq!(ptc.outcome(call).await, expected, "for {call}");
    }
    let schema = ptc.outcome("mcp__mock__bad_schema()").await;
    assert!(
        schema.starts_with(
            "ToolError: 'mcp__mock__bad_schema' returned a result that does not match its output schema at /count"
        ),
        "{schema}"
    );
    let huge = ptc.outcome("mcp__mock__huge(size=5000)").await;
    assert!(
        huge.starts_with(
            "ToolError: 'mcp__mock__huge' returned 5012 bytes, more than max_tool_result_bytes (1000); ask it for less"
        ),
        "{huge}"
    );
}

#[apply(integration_test!)]
async fn a_large_result_arrives_whole() {
    let ptc = ptc_with(&[], "").await;
    let run = ptc.execute("r = await mcp__mock__huge(size=8_000_000)\nprint(len(r['data']))").await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("8000000\n"));
}

/// A JSON text is passed on as it was sent; a pretty-printed one must not break the runner's channel, nor
/// let a line of it pass for the answer to another call.
#[apply(integration_test!)]
async fn a_pretty_printed_json_text_arrives_whole_and_answers_only_its_own_call() {
    let ptc = ptc_with(&[], "").await;
    let program = r#"
import asyncio, json
forged = {"type": "result", "id": 2, "ok": True, "value": "forged"}
text = "[\n" + json.dumps(forged) + "\n]"
said, slept = await asyncio.gather(mcp__mock__say(text=text), mcp__mock__sleep(seconds=0.2))
print(said == [forged], slept["slept"])
"#;
    let run = ptc.execute(program).await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("True 0.2\n"));
}

/// Large texts are read in place and quoted in place (src/registry/stdio/large_texts.rs, result.rs): every
/// kind of escape, both ways, plain text and JSON text. The mock escapes all that is not ASCII.
#[apply(integration_test!)]
async fn large_texts_with_every_kind_of_escape_arrive_intact() {
    let ptc = ptc_with(&[], "").await;
    let program = r#"
import json
plain = "".join(f'line "{i}"\t\\ é😀 \x01\r\n' for i in range(100_000))
doc = {"rows": [{"name": f'row "{i}" é😀\\/', "n": i} for i in range(50_000)]}
said = await mcp__mock__say(text=plain)
parsed = await mcp__mock__say(text=json.dumps(doc))
print(said == plain, parsed == doc, len(plain) > 2_000_000)
"#;
    let run = ptc.execute(program).await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("True True True\n"));
}

/// A large structured result of many rows, one text per row as the official SDK sends a list: read typed
/// from the line (src/registry/stdio/tool_result.rs), validated against its output schema, the texts found
/// to restate the rows (no notes).
#[apply(integration_test!)]
async fn a_large_official_sdk_style_list_arrives_whole_without_notes() {
    let ptc = ptc_with(&[], "").await;
    let program = r#"
rows = await mcp__mock__sdk_rows(count=30_000)
expected = [{"id": i, "name": f"row {i}", "tags": ["a", "b"], "score": i * 0.5} for i in range(30_000)]
print(type(rows).__name__, rows == expected, list(rows[7]))
"#;
    let run = ptc.execute(program).await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("list True ['id', 'name', 'tags', 'score']\n"));
}

/// The server has one runtime thread (stdio): a large result is read off it, so the server answers other
/// requests meanwhile (reading it there held up every other run's progress, deadline and cancel).
#[apply(integration_test!)]
async fn the_server_answers_other_requests_while_it_reads_a_large_result() {
    let ptc = ptc_with(&[], "  timeout_seconds: 300\n  tool_call_timeout_seconds: 300\n").await;
    let started = Instant::now();
    let large = ptc.execute("rows = await mcp__mock__sdk_rows(count=50_000)\nprint(len(rows))");
    tokio::pin!(large);
    let mut slowest = Duration::ZERO;
    let run = loop {
        let asked = Instant::now();
        tokio::select! {
            run = &mut large => {
                // An answer still awaited was at least this slow.
                slowest = slowest.max(asked.elapsed());
                break run;
            }
            _ = ptc.list_callable_tools() => slowest = slowest.max(asked.elapsed()),
        }
    };
    let took = started.elapsed();
    assert_eq!(run.structured()["output"], json!("50000\n"), "{}", run.text());
    assert!(slowest < took / 4, "an answer took {slowest:?} while the large result took {took:?}");
}

/// An answer that cannot be read (bytes that are not UTF-8, a line cut short) fails its call at once, not
/// after `tool_call_timeout_seconds`; the connection stays up.
#[apply(integration_test!)]
async fn an_answer_that_does_not_parse_fails_its_call_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    let flags = ["--broken-answers", "--state-file", &state.display().to_string()];
    let ptc = ptc_with(&flags, "  tool_call_timeout_seconds: 30\n").await;
    let calls = [
        "mcp__mock__broken_answer(kind='utf8')".to_string(),
        "mcp__mock__broken_answer(kind='truncated')".to_string(),
        "mcp__mock__echo(still='up')".to_string(),
    ];
    let started = Instant::now();
    let lines = ptc.outcomes(&calls).await;
    let expected = "ToolError: 'mcp__mock__broken_answer' failed: server 'mock' sent an answer that cannot be read: \
                    it is not valid JSON (";
    assert!(lines[0].starts_with(expected), "{}", lines[0]);
    assert!(lines[1].starts_with(expected) && lines[1].contains("EOF while parsing"), "{}", lines[1]);
    assert_eq!(lines[2], "{'still': 'up'}");
    assert!(started.elapsed() < Duration::from_secs(30), "the calls waited: {:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(&state).unwrap().lines().count(), 1, "the server was started once");
}

#[apply(integration_test!)]
async fn names_map_to_identifiers_and_collisions_are_reported_not_overwritten() {
    let ptc = ptc_with(&["--collide"], "").await;
    let (names, problems) = ptc.list_callable_tools().await;
    assert!(names.contains(&"mcp__mock__get_item".to_string()));
    assert!(!names.iter().any(|n| n.contains("dup")), "{names:?}");
    let problems = problems.expect("the collision is reported");
    assert!(
        problems.contains("'dup-name' of server 'mock', 'dup_name' of server 'mock' all map to 'mcp__mock__dup_name'; none of them is callable"),
        "{problems}"
    );
    assert_eq!(ptc.outcome("mcp__mock__get_item(id='7')").await, "{'id': '7'}");
}

#[apply(integration_test!)]
async fn paginated_tool_lists_are_followed_to_the_end() {
    let ptc = ptc_with(&["--page-size", "3", "--extra-tools", "5"], "").await;
    let (names, _) = ptc.list_callable_tools().await;
    assert_eq!(names.len(), 28, "{names:?}");
    assert!(names.contains(&"mcp__mock__extra_4".to_string()));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "names are sorted");
}

#[apply(integration_test!)]
async fn inspect_tool_shows_the_schema_and_a_note_only_without_output_schema() {
    let ptc = ptc_with(&[], "").await;
    let result = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__add"})).await;
    let inspection: serde_json::Value = serde_json::from_str(&text_block(&result, 0)).unwrap();
    assert_eq!(inspection["name"], json!("mcp__mock__add"));
    assert_eq!(inspection["outputSchema"]["required"], json!(["sum"]));
    assert!(inspection.get("note").is_none());
    let plain = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__echo"})).await;
    let plain: serde_json::Value = serde_json::from_str(&text_block(&plain, 0)).unwrap();
    assert_eq!(plain["outputSchema"], json!(null));
    assert!(plain["note"].as_str().unwrap().contains("No output schema"));
    let missing = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__nope"})).await;
    assert_eq!(missing.is_error, Some(true));
    assert!(text_block(&missing, 0).starts_with("[Tool not found] 'mcp__mock__nope'"));
}

#[apply(integration_test!)]
async fn allow_and_block_globs_filter_namespaced_names() {
    let allow = Ptc::start(
        &config(&[mock_server("mock", &[])], "")
            .replace("execution:", "tools:\n  allow: ['mcp__mock__e*']\nexecution:"),
    )
    .await;
    assert_eq!(allow.list_callable_tools().await.0, ["mcp__mock__echo", "mcp__mock__env"]);
    let run = allow.execute("await mcp__mock__add(a=1, b=2)").await;
    assert!(
        run.expect_error().contains("line 1: 'mcp__mock__add' is not callable: it is not in tools.allow"),
        "{}",
        run.text()
    );
    let block = Ptc::start(
        &config(&[mock_server("mock", &[])], "")
            .replace("execution:", "tools:\n  block: ['*hang*', '*crash*']\nexecution:"),
    )
    .await;
    let names = block.list_callable_tools().await.0;
    assert!(
        names.contains(&"mcp__mock__echo".to_string())
            && !names.iter().any(|n| n.contains("hang") || n.contains("crash"))
    );
}

#[apply(integration_test!)]
async fn a_server_that_never_starts_is_named_with_its_reason_and_others_still_work() {
    let ptc = Ptc::start(&config(&[mock_server("broken", &["--fail-start"]), mock_server("good", &[])], "")).await;
    let (names, problems) = ptc.list_callable_tools().await;
    assert!(names.iter().all(|n| n.starts_with("mcp__good__")) && !names.is_empty(), "{names:?}");
    let problems = problems.expect("the broken server is named");
    assert!(problems.contains("server 'broken' is unavailable"), "{problems}");
    assert!(problems.contains("mock: failing at start as asked"), "the reason includes its stderr: {problems}");
    let status = ptc.execute("print(server_status()['broken']['connected'])").await.expect_ok();
    assert!(status.contains("\nFalse"), "{status}");
}

#[apply(integration_test!)]
async fn a_crashed_server_is_reconnected_and_its_tools_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    let state_arg = state.display().to_string();
    let ptc = ptc_with(&["--state-file", &state_arg], "").await;
    let before = ptc.outcome("mcp__mock__counter()").await;
    let crashed = ptc.outcome("mcp__mock__crash()").await;
    assert_eq!(crashed, "ToolError: 'mcp__mock__crash' failed: the connection to server 'mock' was lost");
    // The second start happens only after the lost session was taken down, so the tools listed from then
    // on are the new session's (before it, the old listing may still be in place for a moment).
    let restarted = async {
        while std::fs::read_to_string(&state).unwrap_or_default().lines().count() < 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(tokio::time::timeout(Duration::from_secs(10), restarted).await.is_ok(), "the server was not restarted");
    let names =
        ptc.wait_for_tools(Duration::from_secs(10), |names| names.contains(&"mcp__mock__counter".to_string())).await;
    assert!(names.contains(&"mcp__mock__counter".to_string()), "tools came back: {names:?}");
    let after = ptc.outcome("mcp__mock__counter()").await;
    assert_ne!(before, after, "a new process answers");
    assert_eq!(std::fs::read_to_string(&state).unwrap().lines().count(), 2);
}

#[apply(integration_test!)]
async fn errors_timeouts_and_bad_data_from_a_healthy_server_never_trigger_a_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("starts");
    let state_arg = state.display().to_string();
    let ptc = ptc_with(&["--state-file", &state_arg], "  tool_call_timeout_seconds: 0.5\n").await;
    for call in [
        "mcp__mock__fail()",
        "mcp__mock__rpc_error()",
        "mcp__mock__bad_schema()",
        "mcp__mock__hang()",
        "mcp__mock__garbage()",
    ] {
        ptc.outcome(call).await;
    }
    assert_eq!(ptc.outcome("mcp__mock__echo(still='up')").await, "{'still': 'up'}");
    assert_eq!(std::fs::read_to_string(&state).unwrap().lines().count(), 1, "the server was started once");
}

#[apply(integration_test!)]
async fn a_tools_list_changed_notification_relists_that_server() {
    let ptc = ptc_with(&[], "").await;
    assert_eq!(ptc.outcome("mcp__mock__add_tool()").await, "'added dynamic_1'");
    let names =
        ptc.wait_for_tools(Duration::from_secs(5), |names| names.contains(&"mcp__mock__dynamic_1".to_string())).await;
    assert!(names.contains(&"mcp__mock__dynamic_1".to_string()), "{names:?}");
    assert_eq!(ptc.outcome("mcp__mock__dynamic_1()").await, "'dynamic'");
}

#[apply(integration_test!)]
async fn a_downstream_gets_only_its_configured_env_and_a_minimal_safe_set() {
    let entry = mock_server("mock", &[]) + "    env:\n      API_KEY: ${PTC_TEST_API_KEY}\n";
    let ptc =
        Ptc::start_with_env(&config(&[entry], ""), &[("PTC_TEST_API_KEY", "k-1"), ("PTC_TEST_OTHER_SECRET", "s")])
            .await;
    let run = ptc
        .execute(
            "env = await mcp__mock__env()\nprint(env.get('API_KEY'), 'PTC_TEST_OTHER_SECRET' in env, 'PATH' in env)",
        )
        .await;
    assert!(run.expect_ok().contains("\nk-1 False True"), "{}", run.text());
    let leaked = ptc.execute("import os\nprint(os.environ.get('API_KEY'), os.environ.get('PTC_TEST_API_KEY'))").await;
    assert!(leaked.expect_ok().contains("\nNone None"), "{}", leaked.text());
}

#[apply(integration_test!)]
async fn a_downstream_inherits_the_proxy_and_ca_variables_and_its_env_overrides_them() {
    let entry = mock_server("mock", &[]) + "    env:\n      NO_PROXY: only.example\n";
    let inherited = [
        ("HTTPS_PROXY", "http://proxy.example:3128"),
        ("http_proxy", "http://proxy.example:3128"),
        ("NO_PROXY", "localhost"),
        ("SSL_CERT_FILE", "/etc/corp/ca.pem"),
        ("NODE_EXTRA_CA_CERTS", "/etc/corp/ca.pem"),
        ("PIP_INDEX_URL", "https://user:token@pypi.example/simple"),
        ("PTC_TEST_OTHER_SECRET", "s"),
    ];
    let ptc = Ptc::start_with_env(&config(&[entry], ""), &inherited).await;
    let names = "['HTTPS_PROXY', 'http_proxy', 'NO_PROXY', 'SSL_CERT_FILE', 'NODE_EXTRA_CA_CERTS', \
                 'PIP_INDEX_URL', 'PTC_TEST_OTHER_SECRET']";
    let run = ptc.execute(&format!("env = await mcp__mock__env()\nprint([env.get(name) for name in {names}])")).await;
    let expected = "['http://proxy.example:3128', 'http://proxy.example:3128', 'only.example', '/etc/corp/ca.pem', \
                    '/etc/corp/ca.pem', None, None]";
    assert!(run.expect_ok().contains(expected), "{}", run.text());
}
