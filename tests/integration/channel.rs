//! The channel between the server and a run, under load and abuse: long lines read concurrently, the trace
//! exact under concurrency, runs that close their channel, results the program cannot decode, and everything
//! the server keeps of what a program sends bounded (lines, tool names, arguments, errors, the reply).

use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};

use crate::common::*;

async fn ptc_with_mock(execution: &str) -> Ptc {
    Ptc::start(&config(&[mock_server("mock", &[])], execution)).await
}

/// Runs `execute_program` giving up after `limit` (the client then cancels the request).
async fn execute_within(ptc: &Ptc, code: &str, limit: Duration) -> Option<Run> {
    let arguments: Map<String, Value> = json!({ "code": code }).as_object().cloned().unwrap();
    let params = CallToolRequestParams::new("execute_program").with_arguments(arguments);
    let call = ptc.client.peer().call_tool(params);
    tokio::time::timeout(limit, call).await.ok().map(|result| Run(result.expect("answered at the protocol level")))
}

/// Bytes of a `CallToolResult`'s text block and structured content.
fn reply_sizes(run: &Run) -> (usize, usize) {
    (run.text().len(), serde_json::to_string(&run.structured()).unwrap().len())
}

#[apply(integration_test!)]
async fn concurrent_calls_with_megabyte_arguments_never_corrupt_the_channel() {
    let ptc = ptc_with_mock("").await;
    // Results arrive while the next 2 MB call line is being read: the reader must resume, not lose, it.
    let code = "import asyncio\n\
                sizes = [2_000_000 + i for i in range(8)]\n\
                results = await asyncio.gather(*[mcp__mock__echo(blob='x' * n) for n in sizes])\n\
                print([len(r['blob']) for r in results] == sizes)";
    for attempt in 0..6 {
        let run = ptc.execute(code).await;
        assert_eq!(run.structured()["output"], json!("True\n"), "attempt {attempt}: {}", run.text());
    }
}

#[apply(integration_test!)]
async fn a_call_whose_result_the_program_printed_is_never_reported_as_cancelled() {
    let ptc = Ptc::start(&config(&[mock_server("a", &[]), mock_server("b", &[])], "")).await;
    for attempt in 0..60 {
        let run = ptc.execute("print(await mcp__a__echo(n=1))\nprint(await mcp__b__echo(n=2))").await;
        let text = run.expect_ok();
        assert!(text.contains("{'n': 1}\n{'n': 2}\n[tool calls: 2; "), "attempt {attempt}: {text}");
        let calls = run.structured()["tool_calls"].clone();
        assert!(calls.as_array().unwrap().iter().all(|c| c["ok"] == json!(true)), "attempt {attempt}: {calls}");
    }
}

/// Closes every write-only fd but 0-2 (the channel's private copy of its end towards the server among them)
/// and sleeps. The runner's reader keeps waiting on the other end, so the runner does not end by itself.
const CLOSE_CHANNEL_AND_SLEEP: &str = "import fcntl, os, time\n\
    for fd in range(3, 1024):\n    try:\n        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:\n            \
    os.close(fd)\n    except OSError:\n        pass\n\
    time.sleep(600)";

#[apply(integration_test!)]
async fn a_program_that_closes_its_channel_still_ends_at_its_deadline() {
    let ptc = Ptc::start(&config(&[], "  timeout_seconds: 3\n  pool_size: 0\n")).await;
    let run = execute_within(&ptc, CLOSE_CHANNEL_AND_SLEEP, Duration::from_secs(90)).await;
    let run = run.expect("the run ends at its deadline, not when the program pleases");
    let text = run.expect_error();
    assert!(text.contains("TimeoutError: Execution exceeded 3s limit"), "{text}");
    ptc.execute("print('still usable')").await.expect_ok();
}

#[apply(integration_test!)]
async fn a_program_that_closes_its_channel_still_stops_when_the_client_cancels() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().to_str().unwrap().to_string();
    let ptc = Ptc::start_with_env(&config(&[], "  pool_size: 0\n"), &[("TMPDIR", &tmp_path)]).await;
    let started = execute_within(&ptc, CLOSE_CHANNEL_AND_SLEEP, Duration::from_secs(3)).await;
    assert!(started.is_none(), "the program sleeps for 10 minutes");
    // The client gave up and cancelled: the runner must go, though its channel is closed.
    let gone = eventually(Duration::from_secs(60), || runners_under(tmp.path()).is_empty()).await;
    assert!(gone, "the runner outlived the client's cancel: {:?}", runners_under(tmp.path()));
    ptc.execute("print('still usable')").await.expect_ok();
}

#[apply(integration_test!)]
async fn a_result_the_program_cannot_decode_fails_that_call_at_once_with_a_tool_error() {
    let ptc = ptc_with_mock("  tool_call_timeout_seconds: 600\n  timeout_seconds: 600\n").await;
    // A text block of digits is JSON (a number) past Python's integer-digit limit.
    let code = "try:\n    await mcp__mock__say(text='1' * 200000)\n    print('decoded')\nexcept ToolError as e:\n    \
                print('ToolError:', e)\nprint(await mcp__mock__say(text='fine'))";
    let run = execute_within(&ptc, code, Duration::from_secs(90)).await.expect("the call does not hang");
    let output = run.structured()["output"].as_str().unwrap().to_string();
    let (first, second) = output.split_once('\n').unwrap();
    assert!(
        first.starts_with("ToolError: the result (200")
            && first.contains("could not be decoded in the program: ValueError"),
        "{first}"
    );
    assert_eq!(second, "fine\n");
}

#[apply(integration_test!)]
async fn a_huge_error_message_is_cut_to_max_output_bytes_keeping_its_head_and_tail() {
    let ptc = Ptc::start(&config(&[], "  max_output_bytes: 65536\n")).await;
    let run = ptc.execute("print('before')\nraise ValueError('x' * (50 << 20) + 'END')").await;
    let text = run.expect_error();
    assert!(text.starts_with("[Script execution failed]\nTraceback (most recent call last):\n"), "{}", &text[..200]);
    assert!(text.contains("\n--- output before the error ---\nbefore"), "{}", &text[text.len() - 300..]);
    assert!(text.contains("xxxEND\n") || text.contains("xxxEND"), "the end of the error survives");
    let (text_bytes, structured_bytes) = reply_sizes(&run);
    assert!(text_bytes <= 65536 + 4096, "text block of {text_bytes} bytes");
    assert!(structured_bytes <= 65536 + 40 * 1024, "structured content of {structured_bytes} bytes");
}

#[apply(integration_test!)]
async fn forged_calls_with_huge_tool_names_cannot_grow_the_reply() {
    let ptc = ptc_with_mock("  max_output_bytes: 65536\n").await;
    // Ten forged calls whose tool names are 16 MiB each, written straight to the channel's fd.
    let code = r#"import os, json
name = "mcp__mock__" + "n" * (16 << 20)
for fd in range(3, 64):
    try:
        for i in range(10):
            os.write(fd, (json.dumps({"type": "call", "id": 1000 + i, "tool": name, "args": {}}) + "\n").encode())
    except OSError:
        pass
import time
time.sleep(1)"#;
    let run = ptc.execute(code).await;
    let (text_bytes, structured_bytes) = reply_sizes(&run);
    assert!(text_bytes <= 65536 + 4096, "text block of {text_bytes} bytes");
    assert!(structured_bytes <= 65536 + 40 * 1024, "structured content of {structured_bytes} bytes");
    ptc.execute("print('still usable')").await.expect_ok();
}

#[apply(integration_test!)]
async fn a_flood_of_forged_call_lines_keeps_the_server_memory_bounded() {
    let ptc = ptc_with_mock("  max_tool_calls: 100\n  timeout_seconds: 10\n").await;
    let server = ptc.child.id().expect("the server runs") as i32;
    let before = peak_rss_kib(server);
    // 100 calls (the budget) that never answer, each carrying 16 MB of arguments, then more.
    let code = r#"import os, json
line = (json.dumps({"type": "call", "id": 1000, "tool": "mcp__mock__hang", "args": {"blob": "x" * 16_000_000}}) + "\n").encode()
for fd in range(3, 64):
    try:
        for i in range(150):
            os.write(fd, line)
    except OSError:
        pass
print("flooded")"#;
    let run = execute_within(&ptc, code, Duration::from_secs(120)).await.expect("the run ends");
    let grew_mib = (peak_rss_kib(server) - before) / 1024;
    eprintln!("the server's peak RSS grew by {grew_mib} MiB under the flood");
    // The loop stops reading while max_concurrent_calls (8) + 8 messages are in hand: ~16 × 16 MB at most,
    // with the parse. Without the bound the server held all 100 (1.6 GB and then some).
    assert!(grew_mib < 700, "the server's peak RSS grew by {grew_mib} MiB: {}", run.text());
    ptc.execute("print('still usable')").await.expect_ok();
}

#[apply(integration_test!)]
async fn forged_calls_with_long_tool_names_cannot_grow_the_server() {
    let ptc = ptc_with_mock("  max_tool_calls: 100\n").await;
    let server = ptc.child.id().expect("the server runs") as i32;
    let before = peak_rss_kib(server);
    // 150 calls, each naming a 10 MB tool: a trace that kept every name (even past the budget) held 1.5 GB.
    let code = r#"import os, json
line = (json.dumps({"type": "call", "id": 1000, "tool": "mcp__mock__" + "n" * 10_000_000, "args": {}}) + "\n").encode()
for fd in range(3, 64):
    try:
        for i in range(150):
            os.write(fd, line)
    except OSError:
        pass
print("flooded")"#;
    let run = execute_within(&ptc, code, Duration::from_secs(120)).await.expect("the run ends");
    let grew_mib = (peak_rss_kib(server) - before) / 1024;
    assert!(grew_mib < 300, "the server's peak RSS grew by {grew_mib} MiB: {}", run.text());
    let text = run.expect_error();
    assert_corrupted_channel(&text, "a tool name of 10000011 bytes)");
    ptc.execute("print('still usable')").await.expect_ok();
}

#[apply(integration_test!)]
async fn arguments_larger_than_max_tool_result_bytes_fail_the_call_before_it_is_sent() {
    let ptc = ptc_with_mock("  max_tool_result_bytes: 100000\n").await;
    let code = "try:\n    await mcp__mock__echo(blob='x' * 200000)\nexcept ToolError as e:\n    print('ToolError:', e)\n\
                print(await mcp__mock__echo(n=1))";
    let run = ptc.execute(code).await;
    let output = run.structured()["output"].as_str().unwrap().to_string();
    assert!(
        output.starts_with(
            "ToolError: 'mcp__mock__echo' was given 200011 bytes of arguments, more than the 100000 a program may pass \
             to a call (max_tool_result_bytes, at most 16 MiB)"
        ),
        "{output}"
    );
    // Had it been sent, the echo would have failed on its result's size instead.
    assert!(output.ends_with("{'n': 1}\n"), "{output}");
}
