//! Real third-party peers: the official MCP Python SDK as our client (both protocol eras), and npm/PyPI MCP
//! servers as downstreams. Installed by `ci/test-deps.sh`; without them these tests skip and say why.

use serde_json::{Value, json};

use crate::common::*;

/// Runs tests/clients/sdk_client.py against ptc-mcp on `config_text` and returns its JSON report.
async fn sdk_client(protocol: &str, config_text: &str, code: &str) -> Option<Value> {
    let python = required_path("python-sdk", "PTC_TEST_SDK_PYTHON")?;
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("config.yaml");
    std::fs::write(&config_path, config_text).unwrap();
    let output = tokio::process::Command::new(python)
        .arg(repo_path("tests/clients/sdk_client.py"))
        .args(["--protocol", protocol, "--code", code, "--"])
        .arg(binary())
        .arg("--config")
        .arg(&config_path)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "sdk client failed ({}): {stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_str(&stdout).unwrap())
}

#[apply(integration_test!)]
async fn the_official_python_sdk_works_as_a_2025_era_client() {
    for version in ["2024-11-05", "2025-06-18", "2025-11-25"] {
        let Some(report) =
            sdk_client(version, &config(&[mock_server("mock", &[])], ""), "print(await mcp__mock__echo(v=1))").await
        else {
            return;
        };
        assert_eq!(report["negotiated_version"], json!(version));
        assert_eq!(report["tools"], json!(["list_callable_tools", "inspect_tool", "execute_program"]));
        assert!(report["callable"].as_str().unwrap().contains("mcp__mock__echo"));
        assert_eq!(report["execute"]["is_error"], json!(false));
        assert!(report["execute"]["text"].as_str().unwrap().starts_with("[Script executed successfully]\n{'v': 1}"));
        assert_eq!(report["execute"]["structured"]["ok"], json!(true));
    }
}

#[apply(integration_test!)]
async fn the_official_python_sdk_works_as_a_2026_era_client() {
    let Some(report) = sdk_client("2026-07-28", &config(&[], ""), "print(1)").await else {
        return;
    };
    assert_eq!(report["negotiated_version"], json!("2026-07-28"));
    let wire = report["wire"].as_array().unwrap();
    assert!(wire.iter().any(|m| m.as_str().unwrap().starts_with("server/discover")), "{wire:?}");
    assert_eq!(report["execute"]["text"], json!("[Script executed successfully]\n1"));
}

/// Waits for a third-party server's tool: on a loaded machine it can take longer to start than the 15 s the
/// first program waits.
async fn wait_for_tool(ptc: &Ptc, tool: &str) {
    let names = ptc.wait_for_tools(std::time::Duration::from_secs(120), |names| names.iter().any(|n| n == tool)).await;
    assert!(names.iter().any(|n| n == tool), "{tool} never appeared: {names:?}");
}

#[apply(integration_test!)]
async fn a_program_uses_the_npm_memory_server() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_MEMORY_SERVER") else {
        return;
    };
    let memory_file = tempfile::tempdir().unwrap();
    let entry = format!(
        "  - name: memory\n    command: node\n    args: [{}]\n    env:\n      MEMORY_FILE_PATH: {}\n",
        json!(server),
        json!(memory_file.path().join("memory.jsonl").display().to_string())
    );
    let ptc = Ptc::start(&config(&[entry], "")).await;
    wait_for_tool(&ptc, "mcp__memory__create_entities").await;
    let code = "await mcp__memory__create_entities(entities=[{'name': 'ptc', 'entityType': 'project', 'observations': ['written in Rust']}])\n\
                graph = await mcp__memory__read_graph()\nprint([e['name'] for e in graph['entities']], graph['entities'][0]['observations'])";
    let text = ptc.execute(code).await.expect_ok();
    assert!(
        text.starts_with("[Script executed successfully]\n['ptc'] ['written in Rust']\n[tool calls: 2; "),
        "{text}"
    );
}

#[apply(integration_test!)]
async fn a_program_uses_the_pypi_time_server_which_speaks_the_2026_protocol() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_TIME_SERVER") else {
        return;
    };
    let entry = format!("  - name: time\n    command: {}\n    args: [\"--local-timezone\", \"UTC\"]\n", json!(server));
    let ptc = Ptc::start(&config(&[entry], "")).await;
    wait_for_tool(&ptc, "mcp__time__get_current_time").await;
    let code = "r = await mcp__time__get_current_time(timezone='Europe/Paris')\nprint(r['timezone'], 'datetime' in r)\n\
                c = await mcp__time__convert_time(source_timezone='UTC', time='12:00', target_timezone='Asia/Tokyo')\n\
                print(c['target']['datetime'][11:16])";
    let text = ptc.execute(code).await.expect_ok();
    assert!(text.starts_with("[Script executed successfully]\nEurope/Paris True\n21:00\n"), "{text}");
}
