//! Progress for long runs, seen by the official Python SDK client: calls finished so far, never decreasing,
//! each with a message naming the last tool — over stdio (2025 era) and HTTP (2026-07-28, stateless); the
//! lines a program prints and its `progress()` messages while it runs, within the rate and size bounds
//! whatever it does; and a result the same as without a progress token.

use serde_json::Value;

use crate::common::*;
use crate::http::{HttpPtc, TOKEN, token_keys};

const PROGRAM: &str = "for i in range(4):\n    await mcp__mock__sleep(seconds=0.4)\nprint(await mcp__mock__echo(v=1))";

/// Runs the SDK client with `--progress` and `args`; returns its report.
async fn sdk_report(args: &[std::ffi::OsString]) -> Option<Value> {
    let program = ["--progress", "--code", PROGRAM].map(std::ffi::OsString::from);
    sdk_client_report(program.iter().chain(args)).await
}

fn assert_progress_was_reported(report: &Value) {
    let text = report["execute"]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(text);
        return;
    }
    assert!(text.starts_with("[Script executed successfully]\n{'v': 1}"), "{report}");
    let progress = report["progress"].as_array().unwrap();
    assert!(!progress.is_empty(), "no progress notification: {report}");
    let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "never decreasing, one per change: {values:?}");
    assert!(values.iter().all(|v| (1.0..=6.0).contains(v)), "calls finished so far (and a printed line): {values:?}");
    for p in progress {
        let message = p["message"].as_str().unwrap();
        if message == "{'v': 1}" {
            // The line the program prints last may be streamed before the result.
            continue;
        }
        let expected = format!("{} tool calls finished; last: mcp__mock__", p["progress"].as_f64().unwrap());
        assert!(message.starts_with(&expected), "{message}");
    }
}

#[apply(integration_test!)]
async fn a_2025_client_on_stdio_sees_the_calls_finished_so_far() {
    let (_dir, server) = stdio_server(&config(&[mock_server("mock", &[])], ""));
    let args: Vec<_> = ["--protocol", "2025-11-25"].map(std::ffi::OsString::from).into_iter().chain(server).collect();
    let Some(report) = sdk_report(&args).await else { return };
    assert_progress_was_reported(&report);
}

#[apply(integration_test!)]
async fn a_2026_client_over_http_sees_the_calls_finished_so_far() {
    let keys = format!("{}    max_concurrent_runs: 4\n", token_keys());
    let ptc = HttpPtc::start(&config(&[mock_server("mock", &[])], ""), &keys).await;
    let authorization = format!("Authorization: Bearer {TOKEN}");
    let args =
        ["--protocol", "2026-07-28", "--url", &ptc.url(), "--header", &authorization].map(std::ffi::OsString::from);
    let Some(report) = sdk_report(&args).await else { return };
    assert_eq!(report["negotiated_version"], "2026-07-28");
    assert_progress_was_reported(&report);
}

/// The SDK client's report of `code` over stdio, with `--progress` if `progress`; `None` when skipped.
async fn run_over_stdio(code: &str, progress: bool) -> Option<Value> {
    let (_dir, server) = stdio_server(&config(&[mock_server("mock", &[])], ""));
    let flags: &[&str] = if progress { &["--progress"] } else { &[] };
    let args: Vec<std::ffi::OsString> =
        flags.iter().chain(&["--code", code]).map(std::ffi::OsString::from).chain(server).collect();
    let report = sdk_client_report(&args).await?;
    let text = report["execute"]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        sandbox_unusable(text)?;
    }
    Some(report)
}

fn notifications(report: &Value) -> &Vec<Value> {
    let progress = report["progress"].as_array().unwrap();
    let values: Vec<f64> = progress.iter().map(|p| p["progress"].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "progress grows with each notification: {values:?}");
    progress
}

#[apply(integration_test!)]
async fn printed_lines_arrive_while_the_program_runs() {
    let code = "import time\nprint('first line')\ntime.sleep(1.5)\nprint('second line')";
    let Some(report) = run_over_stdio(code, true).await else { return };
    assert_eq!(report["execute"]["text"], "[Script executed successfully]\nfirst line\nsecond line", "{report}");
    let seconds = report["execute"]["seconds"].as_f64().unwrap();
    let first = notifications(&report).iter().find(|p| p["message"] == "first line").expect("the first line");
    let at = first["at"].as_f64().unwrap();
    assert!(at < seconds - 1.0, "the first line arrived at {at}s, the result at {seconds}s: {report}");
    assert_eq!(first["total"], Value::Null);
}

#[apply(integration_test!)]
async fn progress_calls_are_sent_with_and_without_a_fraction() {
    let code = r#"import time
progress("starting")
time.sleep(0.5)
progress("half way", 0.5)
time.sleep(0.5)
try:
    progress("too far", 1.5)
except ValueError as e:
    print(e)
progress("done", fraction=1)
time.sleep(0.5)"#;
    let Some(report) = run_over_stdio(code, true).await else { return };
    let rule = "progress(): fraction must be from 0 to 1 (the share done), got 1.5";
    assert_eq!(report["execute"]["text"], format!("[Script executed successfully]\n{rule}"), "{report}");
    let sent = notifications(&report);
    let said = |message: &str| sent.iter().find(|p| p["message"].as_str().unwrap().ends_with(message)).cloned();
    let starting = said("starting").expect("starting");
    assert_eq!(starting["total"], Value::Null, "{report}");
    let half = said("half way").expect("half way");
    assert_eq!(half["progress"].as_f64().unwrap() / half["total"].as_f64().unwrap(), 0.5, "{report}");
    let done = said("\ndone").or_else(|| said("done")).expect("done");
    assert_eq!(done["total"], done["progress"], "a fraction of 1: {report}");
    assert!(sent.iter().all(|p| !p["message"].as_str().unwrap().contains("too far")), "{report}");
}

/// `value` without what depends on the machine's speed: call durations.
fn without_durations(mut value: Value) -> Value {
    for call in value["tool_calls"].as_array_mut().into_iter().flatten() {
        call.as_object_mut().unwrap().remove("duration");
    }
    value
}

#[apply(integration_test!)]
async fn without_a_token_nothing_is_sent_and_with_one_the_result_is_the_same() {
    let code = r#"import time
for i in range(3):
    print(f"line {i}", await mcp__mock__echo(v=i))
    progress(f"step {i}", (i + 1) / 3)
    time.sleep(0.3)
emit({"steps": 3})
print("x" * 70000)"#;
    let Some(with) = run_over_stdio(code, true).await else { return };
    let Some(without) = run_over_stdio(code, false).await else { return };
    assert!(!notifications(&with).is_empty(), "{with}");
    assert_eq!(without["progress"], serde_json::json!([]), "no token, no notification: {without}");
    let text = |report: &Value| without_call_time(report["execute"]["text"].as_str().unwrap());
    assert!(text(&with).contains("[output truncated: "), "{with}");
    assert_eq!(text(&with), text(&without));
    let structured = |report: &Value| without_durations(report["execute"]["structured"].clone());
    assert_eq!(structured(&with), structured(&without));
    assert_eq!(with["execute"]["content"], without["execute"]["content"]);
}

#[apply(integration_test!)]
async fn a_flood_of_output_and_progress_calls_stays_within_the_rate_and_size_bounds() {
    let ptc = HttpPtc::start(&config(&[], "  timeout_seconds: 120\n"), &token_keys()).await;
    let server = ptc.pid() as i32;
    let before = peak_rss_kib(server);
    // 100 MiB of lines as fast as the program can print them, then 200 000 progress() calls.
    let code = r#"import sys
line = "y" * 1023 + "\n"
for i in range(100 * 1024):
    sys.stdout.write(line)
for i in range(200_000):
    progress(f"step {i}", i / 200_000)
print("the end")"#;
    let authorization = format!("Authorization: Bearer {TOKEN}");
    let args = ["--progress", "--timeout", "150", "--code", code, "--url", &ptc.url(), "--header", &authorization];
    let Some(report) = sdk_client_report(args).await else { return };
    let text = report["execute"]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(text);
        return;
    }
    assert!(text.starts_with("[Script executed successfully]\nyyy") && text.ends_with("\nthe end"), "{text:.300}");
    let grew_mib = (peak_rss_kib(server) - before) / 1024;
    let seconds = report["execute"]["seconds"].as_f64().unwrap();
    let sent = notifications(&report);
    let bytes: usize = sent.iter().map(|p| p["message"].as_str().unwrap().len()).sum();
    eprintln!(
        "100 MiB printed and 200 000 progress() calls in {seconds:.1}s: {} notifications, {bytes} bytes of \
         messages; the server's peak RSS grew by {grew_mib} MiB",
        sent.len()
    );
    assert!(sent.len() as f64 <= seconds * 4.0 + 2.0, "{} notifications in {seconds:.1}s", sent.len());
    assert!(sent.iter().all(|p| p["message"].as_str().unwrap().len() <= 2048), "a message over 2 KiB");
    assert!(sent.iter().any(|p| p["message"].as_str().unwrap().contains(" lines left out]\nyyy")), "{sent:?}");
    assert!(grew_mib < 64, "the server's peak RSS grew by {grew_mib} MiB");
}

#[apply(integration_test!)]
async fn a_forged_progress_line_outside_the_rules_stops_the_run_and_is_not_sent() {
    let code = r#"import os, json, time
line = (json.dumps({"type": "progress", "message": "forged", "fraction": 2}) + "\n").encode()
for fd in range(3, 64):
    try:
        os.write(fd, line)
    except OSError:
        pass
time.sleep(1)"#;
    let Some(report) = run_over_stdio(code, true).await else { return };
    let text = report["execute"]["text"].as_str().unwrap();
    assert!(
        text.contains("the program corrupted its channel to the server (a progress fraction of 2, outside 0 to 1)"),
        "{report}"
    );
    assert!(notifications(&report).iter().all(|p| p["message"] != "forged"), "{report}");
}

#[apply(integration_test!)]
async fn a_run_parked_for_approval_streams_its_lines_to_the_request_waiting_for_it() {
    let confirm = format!("{}tools:\n  confirm: [\"mcp__mock__add\"]\n", config(&[mock_server("mock", &[])], ""));
    let ptc = HttpPtc::start(&confirm, &format!("{}    max_concurrent_runs: 4\n", token_keys())).await;
    let code = r#"import time
print("before approval")
time.sleep(1)
r = await mcp__mock__add(a=1, b=2)
print("after approval", r["sum"])
time.sleep(1)"#;
    let (url, authorization) = (ptc.url(), format!("Authorization: Bearer {TOKEN}"));
    let args = ["--protocol", "2026-07-28", "--elicit", "accept", "--progress", "--code", code, "--url", &url];
    let Some(report) = sdk_client_report(args.into_iter().chain(["--header", &authorization])).await else { return };
    let text = report["execute"]["text"].as_str().unwrap_or_default();
    if text.contains("SandboxError") {
        let _ = sandbox_unusable(text);
        return;
    }
    assert_eq!(report["execute"]["structured"]["output"], "before approval\nafter approval 3\n", "{report}");
    let messages: Vec<&str> = notifications(&report).iter().map(|p| p["message"].as_str().unwrap()).collect();
    assert!(messages.contains(&"before approval"), "the first request: {report}");
    assert!(messages.contains(&"after approval 3"), "the request that resumed the run: {report}");
}
