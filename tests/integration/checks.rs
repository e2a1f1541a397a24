//! Calls checked before and while a program runs: the check before running (`execution.precheck`), tool
//! functions with their real signatures, and errors that say what is wrong and how to fix it.

use serde_json::json;

use crate::common::*;

/// A mock that records every request it gets in `state`, so a test can see that no tool was called.
fn recording_mock(state: &std::path::Path) -> String {
    mock_server("mock", &["--state-file", &state.display().to_string(), "--record-requests"])
}

fn tool_calls_received(state: &std::path::Path) -> usize {
    std::fs::read_to_string(state).unwrap_or_default().lines().filter(|l| *l == "request tools/call").count()
}

#[apply(integration_test!)]
async fn a_program_with_mistakes_runs_nothing_and_every_finding_has_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ptc = Ptc::start(&config(&[recording_mock(&state)], "")).await;
    let code = "print('this never runs')\n\
                r = await mcp__mock__ad(a=1, b=2)\n\
                s = await mcp__mock__add(a=1, bb=2)\n\
                t = await mcp__mock__add(a='one', b=2)\n\
                mcp__mock__echo(message='hi')\n\
                u = mcp__mock__add(a=1, b=2)\n\
                print(u['sum'])";
    let run = ptc.execute(code).await;
    let signature = "Signature: mcp__mock__add(*, a: float, b: float) -> AddResult";
    assert_eq!(
        run.expect_error(),
        format!(
            "[Script execution failed]\n\
             line 2: 'mcp__mock__ad' is not a tool; did you mean 'mcp__mock__add'?\n\
             line 3: mcp__mock__add() got an unexpected keyword argument 'bb'. Did you mean 'b'? {signature}\n\
             line 4: mcp__mock__add(a='one'): a string, but the tool expects a number\n\
             line 5: mcp__mock__echo(...) is never awaited, so the call never happens; write await mcp__mock__echo(...)\n\
             line 6: mcp__mock__add(...) is assigned to u but never awaited, so u is a coroutine, not the result; \
             write u = await mcp__mock__add(...)\n\
             (checked before running: nothing ran, no tool was called)"
        )
    );
    assert_eq!(run.structured()["tool_calls"], json!([]));
    assert_eq!(run.structured()["output"], json!(""));
    assert_eq!(tool_calls_received(&state), 0);
}

#[apply(integration_test!)]
async fn concurrent_and_dynamic_programs_pass_the_check() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let code = "import asyncio\n\
                a = await asyncio.gather(*[mcp__mock__add(a=i, b=1) for i in range(3)])\n\
                task = asyncio.create_task(mcp__mock__add(a=5, b=5))\n\
                pending = []\n\
                for i in range(2):\n    pending.append(mcp__mock__echo(i=i))\n\
                b = await asyncio.gather(*pending)\n\
                later = mcp__mock__add(a=2, b=2)\n\
                args = {'a': 1, 'b': 1}\n\
                print([x['sum'] for x in a], (await task)['sum'], b, (await later)['sum'], (await mcp__mock__add(**args))['sum'])";
    let run = ptc.execute(code).await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("[1, 2, 3] 10 [{'i': 0}, {'i': 1}] 4 2\n"));
}

#[apply(integration_test!)]
async fn without_the_check_the_same_mistakes_fail_at_run_time_with_errors_that_teach() {
    let ptc = Ptc::start(
        &config(&[mock_server("mock", &[]), mock_server("broken", &["--fail-start"])], "  precheck: false\n")
            .replace("execution:", "tools:\n  block: ['*hang*']\nexecution:"),
    )
    .await;
    let cases = [
        (
            "print('ran')\nawait mcp__mock__ad(a=1, b=2)",
            "NameError: name 'mcp__mock__ad' is not defined: 'mcp__mock__ad' is not a tool; did you mean 'mcp__mock__add'?",
        ),
        (
            "await mcp__mock__hang()",
            "NameError: name 'mcp__mock__hang' is not defined: 'mcp__mock__hang' is not callable: it is blocked by tools.block",
        ),
        (
            "await mcp__broken__echo()",
            "NameError: name 'mcp__broken__echo' is not defined: 'mcp__broken__echo' is not callable now: its server 'broken' is unavailable: ",
        ),
        (
            "await mcp__mock__add(a=1, bb=2)",
            "TypeError: mcp__mock__add() got an unexpected keyword argument 'bb'. Did you mean 'b'? Signature: mcp__mock__add(*, a: float, b: float) -> AddResult",
        ),
        (
            "r = mcp__mock__add(a=1, b=2)\nprint(r['sum'])",
            "TypeError: 'coroutine' object is not subscriptable (did you forget `await`? a tool call gives a coroutine until awaited: x = await mcp__s__t(...))",
        ),
        (
            "r = mcp__mock__echo()\nr.get('x')",
            "AttributeError: 'coroutine' object has no attribute 'get' (did you forget `await`?",
        ),
    ];
    for (code, expected) in cases {
        let run = ptc.execute(code).await;
        let text = run.expect_error();
        assert!(text.contains(expected), "for {code:?}:\n{text}");
        assert_eq!(run.structured()["tool_calls"], json!([]), "{code}");
    }
    assert!(
        ptc.execute("print('ran')\nawait mcp__mock__ad()")
            .await
            .text()
            .contains("--- output before the error ---\nran")
    );
}

#[apply(integration_test!)]
async fn the_check_names_a_server_that_is_down() {
    let ptc = Ptc::start(&config(&[mock_server("broken", &["--fail-start"])], "")).await;
    let text = ptc.execute("print(await mcp__broken__echo(message='hi'))").await.expect_error();
    assert!(
        text.starts_with(
            "[Script execution failed]\nline 1: 'mcp__broken__echo' is not callable now: its server 'broken' is \
             unavailable: "
        ),
        "{text}"
    );
}

#[apply(integration_test!)]
async fn tool_functions_carry_their_signature_and_help_prints_it() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let code = "import inspect\nprint(inspect.signature(mcp__mock__add))\nhelp(mcp__mock__add)";
    let run = ptc.execute(code).await;
    run.expect_ok();
    let inspect = ptc.call("inspect_tool", json!({"tool_name": "mcp__mock__add", "format": "python"})).await;
    assert_eq!(
        run.structured()["output"].as_str().unwrap(),
        format!("(*, a: float, b: float) -> AddResult\n{}", text_block(&inspect, 0))
    );
}

/// The server parses a program before the runner does (src/precheck): one nested as deeply as its length
/// allows gets an answer, and the server goes on serving.
#[apply(integration_test!)]
async fn a_program_nested_as_deeply_as_it_can_be_leaves_the_server_serving() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    for (open, close) in [("-", ""), ("[", "]"), ("not ", ""), ("1 + ", "")] {
        let depth = (63 * 1024) / (open.len() + close.len());
        let code =
            format!("print(await mcp__mock__add(a=1, b=2))\nx = {}1{}\n", open.repeat(depth), close.repeat(depth));
        // Whether Python runs or refuses it does not matter here: the run ends with an answer.
        ptc.execute(&code).await;
    }
    let run = ptc.execute("print((await mcp__mock__add(a=1, b=2))['sum'])").await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("3\n"));
}

/// Python reads identifiers NFKC-normalised: `ｍcp__mock__add` (a fullwidth m) and `ｂb` are the tool and the
/// keyword `bb` to it. The check judges the names Python uses, so a mistake spelled that way runs nothing.
#[apply(integration_test!)]
async fn a_tool_spelled_with_compatibility_characters_is_checked_by_the_name_python_reads() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let ptc = Ptc::start(&config(&[recording_mock(&state)], "")).await;
    let cases = [
        ("await \u{ff4d}cp__mock__add(a=1, bb=2)", "line 1: mcp__mock__add() got an unexpected keyword argument 'bb'"),
        (
            "print(await mcp__mock__add(a=1, b=2))\nawait mcp\u{ff3f}_mock__add(a=1, \u{ff42}b=2)",
            "line 2: mcp__mock__add() got an unexpected keyword argument 'bb'",
        ),
        ("r = \u{1d426}cp__mock__add(a=1, b=2)\nprint(r['sum'])", "line 1: mcp__mock__add(...) is assigned to r"),
    ];
    for (code, finding) in cases {
        let text = ptc.execute(code).await.expect_error();
        assert!(text.starts_with(&format!("[Script execution failed]\n{finding}")), "for {code:?}:\n{text}");
        assert!(text.ends_with("(checked before running: nothing ran, no tool was called)"), "{text}");
    }
    assert_eq!(tool_calls_received(&state), 0);
    // The same names called soundly are the tool, as Python reads them.
    let run = ptc.execute("print((await \u{ff4d}cp__mock__add(\u{ff41}=1, b=2))['sum'])").await;
    run.expect_ok();
    assert_eq!(run.structured()["output"], json!("3\n"));
}
