//! Real third-party peers: the official MCP Python SDK as our client (both protocol eras), and npm/PyPI MCP
//! servers as downstreams. Installed by `ci/test-deps.sh`; without them these tests skip and say why.

use serde_json::{Value, json};

use crate::common::*;

/// Runs tests/clients/sdk_client.py against ptc-mcp on `config_text` and returns its JSON report.
async fn sdk_client(protocol: &str, config_text: &str, code: &str) -> Option<Value> {
    sdk_client_listing(protocol, config_text, code, &json!({})).await
}

/// [`sdk_client`], with `list_args` as the arguments of its `list_callable_tools` call.
async fn sdk_client_listing(protocol: &str, config_text: &str, code: &str, list_args: &Value) -> Option<Value> {
    let (_dir, server) = stdio_server(config_text);
    let list_args = list_args.to_string();
    let args = ["--protocol", protocol, "--code", code, "--list-args", &list_args].map(std::ffi::OsString::from);
    sdk_client_report(args.into_iter().chain(server)).await
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

#[apply(integration_test!)]
async fn the_official_python_sdk_searches_for_signatures_and_receives_shown_images_and_audio() {
    let code = "r = await mcp__mock__media(n=1, size=16)\nshow(r)\nprint(r['result'])";
    let list_args = json!({"query": "media", "detail": "signatures", "limit": 1});
    let Some(report) =
        sdk_client_listing("2025-11-25", &config(&[mock_server("mock", &["--media"])], ""), code, &list_args).await
    else {
        return;
    };
    assert_eq!(report["errors"], json!({}));
    assert!(
        report["callable"].as_str().unwrap().starts_with("async def mcp__mock__media(\n    *,\n    n: int = ...,"),
        "{}",
        report["callable"]
    );
    assert_eq!(
        report["execute"]["content"],
        json!([{"type": "text"}, {"type": "image", "mime_type": "image/png", "bytes": 16},
               {"type": "audio", "mime_type": "audio/wav", "bytes": 16}])
    );
    assert!(report["execute"]["text"].as_str().unwrap().starts_with("[Script executed successfully]\nmedia #1\n"));
}

/// server-everything's stdio entry.
async fn everything() -> Option<Ptc> {
    let server = required_path("third-party-servers", "PTC_TEST_EVERYTHING_SERVER")?;
    let entry = format!("  - name: everything\n    command: node\n    args: [{}]\n", json!(server));
    let ptc = Ptc::start(&config(&[entry], "")).await;
    wait_for_tool(&ptc, "mcp__everything__get_tiny_image").await;
    Some(ptc)
}

#[apply(integration_test!)]
async fn a_program_shows_the_image_server_everything_returns() {
    let Some(ptc) = everything().await else {
        return;
    };
    let run =
        ptc.execute("r = await mcp__everything__get_tiny_image()\nshow(r['_notes'][0])\nprint(r['_notes'])").await;
    run.expect_ok();
    assert_eq!(run.0.content.len(), 2, "{:?}", run.0.content);
    let rmcp::model::ContentBlock::Image(image) = &run.0.content[1] else { panic!("{:?}", run.0.content[1]) };
    assert_eq!(image.mime_type, "image/png");
    assert!(image.data.starts_with("iVBORw0KGgo"), "a PNG, base64");
    assert!(run.structured()["output"].as_str().unwrap().contains("[non-text content omitted: image (image/png)]"));
}

#[apply(integration_test!)]
async fn the_check_reads_server_everythings_real_schemas() {
    let Some(ptc) = everything().await else {
        return;
    };
    let text = ptc
        .execute("await mcp__everything__get_annotated_message(messageType='eror', includeImage='yes')")
        .await
        .expect_error();
    assert_eq!(
        text,
        "[Script execution failed]\n\
         line 1: mcp__everything__get_annotated_message(messageType='eror'): not one of 'error', 'success', 'debug'; \
         did you mean 'error'?\n\
         line 1: mcp__everything__get_annotated_message(includeImage='yes'): a string, but the tool expects a boolean\n\
         (checked before running: nothing ran, no tool was called)"
    );
    let signature = ptc
        .call("list_callable_tools", json!({"query": "get_annotated_message", "detail": "signatures", "limit": 1}))
        .await;
    assert_eq!(
        text_block(&signature, 0),
        "async def mcp__everything__get_annotated_message(\n    *,\n    messageType: Literal[\"error\", \"success\", \
         \"debug\"],  # Type of message to demonstrate different annotation patterns\n    includeImage: bool = False,  \
         # Whether to include an example image\n) -> Any:  # no output schema: inspect the result\n    \
         \"\"\"Demonstrates how annotations can be used to provide metadata about content.\"\"\"\n"
    );
}

const TASK_ONLY: &str = "mcp__everything__simulate_research_query";
const TASK_ONLY_WHY: &str = "its server runs it only as an MCP task (execution.taskSupport: required), and ptc-mcp \
                             calls downstream tools directly; call it from an MCP client";

/// `list_callable_tools` leaves server-everything's task-only tool out, and says so in a block of its own.
async fn assert_task_only_tool_left_out(ptc: &Ptc) {
    let listing = ptc.call("list_callable_tools", json!({})).await;
    assert!(!text_block(&listing, 0).contains(TASK_ONLY), "{listing:?}");
    assert!(text_block(&listing, 0).contains("mcp__everything__get_sum"), "{listing:?}");
    let note = text_block(&listing, 1);
    assert_eq!(
        note,
        format!(
            "Not callable from programs, because their servers run them only as MCP tasks (execution.taskSupport: \
             required) and ptc-mcp calls downstream tools directly: {TASK_ONLY}"
        )
    );
    let inspected = ptc.call("inspect_tool", json!({"tool_name": TASK_ONLY})).await;
    assert_eq!(text_block(&inspected, 0), format!("[Tool not found] '{TASK_ONLY}' is not callable: {TASK_ONLY_WHY}"));
}

#[apply(integration_test!)]
async fn a_tool_server_everything_runs_only_as_a_task_is_never_listed_and_says_why() {
    let Some(ptc) = everything().await else {
        return;
    };
    assert_task_only_tool_left_out(&ptc).await;
    let run = ptc.execute(&format!("await {TASK_ONLY}(topic='tides')")).await;
    assert_eq!(
        run.expect_error(),
        format!(
            "[Script execution failed]\nline 1: '{TASK_ONLY}' is not callable: {TASK_ONLY_WHY}\n(checked before \
             running: nothing ran, no tool was called)"
        )
    );
}

#[apply(integration_test!)]
async fn over_http_a_tool_that_runs_only_as_a_task_is_left_out_from_its_first_refusal() {
    // rmcp reads an HTTP server's listing and drops `execution`: the server's refusal of a direct call says it.
    let Some(server) = required_path("third-party-servers", "PTC_TEST_EVERYTHING_SERVER") else { return };
    let port = crate::http::free_port();
    let _everything = tokio::process::Command::new("node")
        .args([server.as_str(), "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let listening =
        eventually(std::time::Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(listening.await, "server-everything never listened on {port}");
    let entry = format!("  - name: everything\n    transport: http\n    url: http://127.0.0.1:{port}/mcp\n");
    let ptc = Ptc::start(&config(&[entry], "")).await;
    wait_for_tool(&ptc, TASK_ONLY).await;
    let run =
        ptc.execute(&format!("try:\n    await {TASK_ONLY}(topic='tides')\nexcept ToolError as e:\n    print(e)")).await;
    if run.text().contains("SandboxError") && sandbox_unusable(&run.text()).is_none() {
        return;
    }
    let output = run.structured()["output"].as_str().unwrap().to_string();
    assert_eq!(output, format!("'{TASK_ONLY}' is not callable: {TASK_ONLY_WHY}; it is no longer listed\n"));
    assert_task_only_tool_left_out(&ptc).await;
}

#[apply(integration_test!)]
async fn a_program_shows_the_audio_server_filesystem_reads() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_FILESYSTEM_SERVER") else {
        return;
    };
    let files = tempfile::tempdir().unwrap();
    // A valid, silent, 8-sample WAV file.
    let mut wav = b"RIFF".to_vec();
    wav.extend(36u32.wrapping_add(8).to_le_bytes());
    wav.extend(b"WAVEfmt ");
    wav.extend([16, 0, 0, 0, 1, 0, 1, 0]);
    wav.extend(8000u32.to_le_bytes());
    wav.extend(8000u32.to_le_bytes());
    wav.extend([1, 0, 8, 0]);
    wav.extend(b"data");
    wav.extend(8u32.to_le_bytes());
    wav.extend([128; 8]);
    std::fs::write(files.path().join("beep.wav"), &wav).unwrap();
    let dir = files.path().display().to_string();
    let entry = format!("  - name: files\n    command: node\n    args: [{}, {}]\n", json!(server), json!(dir));
    let ptc = Ptc::start(&config(&[entry], "")).await;
    wait_for_tool(&ptc, "mcp__files__read_media_file").await;
    let code = format!("r = await mcp__files__read_media_file(path={})\nshow(r)", json!(format!("{dir}/beep.wav")));
    let run = ptc.execute(&code).await;
    run.expect_ok();
    let kinds: Vec<String> = run
        .0
        .content
        .iter()
        .map(|b| match b {
            rmcp::model::ContentBlock::Audio(audio) => format!("audio {}", audio.mime_type),
            rmcp::model::ContentBlock::Text(_) => "text".to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["text", "audio audio/wav"]);
}
