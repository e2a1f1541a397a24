//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`) against `serve --http`: every
//! server scenario of its active suite passes except those listed, with the reason, in
//! tests/conformance/expected-failures.yaml (the suite itself fails if a listed one starts passing). The suite
//! sends no headers of its own: it reaches the server through a proxy that adds the token.

use std::time::Duration;

use crate::common::*;
use crate::http::{HttpPtc, TokenProxy, token_keys};

#[apply(integration_test!)]
async fn the_official_conformance_suite_passes_every_scenario_that_applies_to_a_tools_only_server() {
    let Some(suite) = required_path("conformance", "PTC_TEST_CONFORMANCE") else { return };
    let Some(node) = required_path("conformance", "PTC_TEST_CONFORMANCE_NODE") else { return };
    let ptc = HttpPtc::start(&config(&[], ""), &format!("{}    max_concurrent_runs: 8\n", token_keys())).await;
    let proxy = TokenProxy::start(ptc.port()).await;
    let results = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(node)
        .arg(suite)
        .args(["server", "--url", &format!("http://127.0.0.1:{}/mcp", proxy.port), "--expected-failures"])
        .arg(repo_path("tests/conformance/expected-failures.yaml"))
        .arg("--output-dir")
        .arg(results.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(600), run).await.expect("the suite finishes").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout.split("=== SUMMARY ===").nth(1).unwrap_or(&stdout);
    println!("conformance suite:{summary}");
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    for scenario in ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"] {
        assert!(summary.contains(&format!("✓ {scenario}:")), "{scenario} did not pass:{summary}");
    }
}
