//! `serve --http`'s probes and metrics: `/healthz` and `/readyz` without a token, `/metrics` only with it;
//! the counts moving with runs and tool calls; and a SIGTERM that turns readiness off first while a run in
//! flight finishes within `drain_seconds`.

use std::time::Duration;

use crate::common::*;
use crate::http::{HttpPtc, TOKEN, execute, raw_request, text, token_keys};

/// `GET path` (with the token if `authorized`): the status and the body.
pub async fn get(ptc: &HttpPtc, path: &str, authorized: bool) -> (u16, String) {
    let bearer = format!("Bearer {TOKEN}");
    let headers: &[(&str, &str)] = if authorized { &[("Authorization", &bearer)] } else { &[] };
    let (status, response) = raw_request(ptc.port(), "GET", path, headers, "").await;
    (status, response.split_once("\r\n\r\n").map(|(_, body)| body.to_string()).unwrap_or_default())
}

/// Polls `GET path` until its status is `status` (within a minute); the last body.
pub async fn until_status(ptc: &HttpPtc, path: &str, status: u16) -> Result<String, (u16, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (got, body) = get(ptc, path, false).await;
        if got == status {
            return Ok(body);
        }
        if tokio::time::Instant::now() > deadline {
            return Err((got, body));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The value of the sample `series` (name and labels, as written) in a `/metrics` text.
pub fn sample(metrics: &str, series: &str) -> Option<u64> {
    metrics.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until readiness says the sandbox was checked; `None` (skipped) when it cannot run programs here.
pub async fn ready(ptc: &HttpPtc) -> Option<()> {
    match until_status(ptc, "/readyz", 200).await {
        Ok(body) => {
            assert_eq!(body, "ok\n");
            Some(())
        }
        Err((503, body)) if body == "not ready: the sandbox cannot run programs\n" => sandbox_unusable(&body),
        Err((status, body)) => panic!("/readyz never became ready: {status} {body}"),
    }
}

#[apply(integration_test!)]
async fn probes_need_no_token_and_say_nothing_while_metrics_need_the_token() {
    let ptc = HttpPtc::start(&config(&[mock_server("secret-name", &[])], ""), &token_keys()).await;
    assert_eq!(get(&ptc, "/healthz", false).await, (200, "ok\n".to_string()));
    let foreign = [("Origin", "https://evil.example"), ("Host", "evil.example")];
    let (status, response) = raw_request(ptc.port(), "HEAD", "/healthz", &foreign, "").await;
    assert_eq!(status, 200, "{response}");
    assert!(response.ends_with("\r\n\r\n"), "no body for HEAD: {response}");
    let (status, response) = raw_request(ptc.port(), "POST", "/readyz", &[], "").await;
    assert_eq!(status, 405, "{response}");
    assert!(response.to_ascii_lowercase().contains("allow: get, head"), "{response}");
    let Some(()) = ready(&ptc).await else { return };

    for (what, authorized) in [("no token", false), ("a wrong token", true)] {
        let bearer = if authorized { "Bearer wrong" } else { "" };
        let headers: &[(&str, &str)] = if authorized { &[("Authorization", bearer)] } else { &[] };
        let (status, response) = raw_request(ptc.port(), "GET", "/metrics", headers, "").await;
        assert_eq!(status, 401, "{what}: {response}");
        assert!(!response.contains("ptc_"), "{what}: {response}");
    }
    let bearer = format!("Bearer {TOKEN}");
    let (status, response) = raw_request(ptc.port(), "GET", "/metrics", &[("Authorization", &bearer)], "").await;
    assert_eq!(status, 200, "{response}");
    assert!(response.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"), "{response}");
    for family in [
        "# TYPE ptc_runs_total counter",
        "# TYPE ptc_run_duration_seconds histogram",
        "# TYPE ptc_tool_calls_total counter",
        "# TYPE ptc_pool_runners gauge",
        "# TYPE ptc_http_sessions gauge",
        "# TYPE ptc_http_connections gauge",
        "# TYPE ptc_program_sessions gauge",
    ] {
        assert!(response.contains(family), "{family}: {response}");
    }
    assert_eq!(sample(&response, r#"ptc_tool_calls_total{server="secret-name",outcome="ok"}"#), Some(0));
    assert!(sample(&response, "ptc_http_connections") >= Some(1), "the scrape's own at least: {response}");
    let (status, response) = raw_request(ptc.port(), "GET", "/metricsz", &[("Authorization", &bearer)], "").await;
    assert_eq!(status, 404, "{response}");
}

#[apply(integration_test!)]
async fn metrics_count_runs_by_outcome_and_tool_calls_by_server() {
    let ptc = HttpPtc::start(&config(&[mock_server("mock", &[])], ""), &token_keys()).await;
    let Some(()) = ready(&ptc).await else { return };
    let client = ptc.client().await;
    let ok = execute(&client, "print(await mcp__mock__echo(v=1))").await;
    if text(&ok).contains("SandboxError") {
        let _ = sandbox_unusable(&text(&ok));
        return;
    }
    assert_eq!(ok.is_error, Some(false), "{}", text(&ok));
    let caught = "try:\n    await mcp__mock__fail()\nexcept Exception:\n    print('caught')";
    let caught = text(&execute(&client, caught).await);
    assert!(caught.starts_with("[Script executed successfully]\ncaught\n[tool calls: 1, 1 failed"), "{caught}");
    let failed = execute(&client, "raise ValueError('no')").await;
    assert_eq!(failed.is_error, Some(true), "{}", text(&failed));

    let (status, metrics) = get(&ptc, "/metrics", true).await;
    assert_eq!(status, 200, "{metrics}");
    let expected = [
        (r#"ptc_runs_total{outcome="ok"}"#, 2),
        (r#"ptc_runs_total{outcome="error"}"#, 1),
        (r#"ptc_runs_total{outcome="timeout"}"#, 0),
        ("ptc_run_duration_seconds_count", 3),
        (r#"ptc_run_duration_seconds_bucket{le="+Inf"}"#, 3),
        (r#"ptc_tool_calls_total{server="mock",outcome="ok"}"#, 1),
        (r#"ptc_tool_calls_total{server="mock",outcome="error"}"#, 1),
        (r#"ptc_tool_calls_total{server="mock",outcome="cancelled"}"#, 0),
        ("ptc_http_sessions", 1),
        ("ptc_program_sessions", 0),
    ];
    for (series, value) in expected {
        assert_eq!(sample(&metrics, series), Some(value), "{series}:\n{metrics}");
    }
    // The pool refills to its size (2) after the runs.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let metrics = get(&ptc, "/metrics", true).await.1;
        if sample(&metrics, r#"ptc_pool_runners{state="ready"}"#) == Some(2) {
            assert_eq!(sample(&metrics, r#"ptc_pool_runners{state="starting"}"#), Some(0), "{metrics}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the pool never showed 2 ready runners:\n{metrics}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(serde_json::json!({"code": "x = 1", "session": "s"}).as_object().cloned().unwrap());
    let kept = client.peer().call_tool(params).await.unwrap();
    assert_eq!(kept.is_error, Some(false), "{}", text(&kept));
    let metrics = get(&ptc, "/metrics", true).await.1;
    assert_eq!(sample(&metrics, "ptc_program_sessions"), Some(1), "{metrics}");
}

#[apply(integration_test!)]
async fn sigterm_turns_readiness_off_first_and_a_run_in_flight_finishes_within_the_drain() {
    let execution = "  pool_size: 0\n";
    let keys = format!("{}    drain_seconds: 60\n", token_keys());
    let mut ptc = HttpPtc::start(&config(&[], execution), &keys).await;
    let Some(()) = ready(&ptc).await else { return };
    let client = ptc.client().await;
    let code = "import asyncio\nawait asyncio.sleep(4)\nprint('finished')";
    let run = tokio::spawn(async move { text(&execute(&client, code).await) });
    // Under docker a runner is a container, not a process of this machine: the run is given a moment.
    if sandbox_under_test() == "docker" {
        tokio::time::sleep(Duration::from_secs(2)).await;
    } else if !eventually(Duration::from_secs(30), || !runners_under(&ptc.tmp()).is_empty()).await {
        let _ = sandbox_unusable("no runner started for the run");
        return;
    }
    ptc.signal(libc::SIGTERM);
    assert_eq!(until_status(&ptc, "/readyz", 503).await, Ok("not ready: stopping\n".to_string()));
    assert_eq!(get(&ptc, "/healthz", false).await, (200, "ok\n".to_string()), "alive while it drains");
    assert!(!run.is_finished(), "readiness went off before the run ended");
    let result = tokio::time::timeout(Duration::from_secs(30), run).await.expect("the run ends").unwrap();
    assert_eq!(result, "[Script executed successfully]\nfinished");
    // Once no run is in flight, the server stops without waiting out the rest of the drain.
    assert!(ptc.exited_within(Duration::from_secs(20)).await.success());
}
