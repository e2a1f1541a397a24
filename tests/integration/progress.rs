//! Progress for long runs, seen by the official Python SDK client: calls finished so far, never decreasing,
//! each with a message naming the last tool — over stdio (2025 era) and HTTP (2026-07-28, stateless).

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
    assert!(values.iter().all(|v| (1.0..=5.0).contains(v)), "calls finished so far: {values:?}");
    for p in progress {
        let message = p["message"].as_str().unwrap();
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
