//! The record of every run: one `info` log line and, with `logging.audit_file`, one JSON line appended when
//! the run ends — kept through a crash of the server, written for runs killed at shutdown, reopened on
//! SIGHUP.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

fn audited_config(audit: &Path, audit_code: bool) -> String {
    format!(
        "{}logging:\n  audit_file: {}\n  audit_code: {audit_code}\n",
        config(&[mock_server("mock", &[])], ""),
        json!(audit.display().to_string())
    )
}

fn audit_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "only whole lines: {text:?}");
    text.lines().map(|line| serde_json::from_str(line).expect("each line is one JSON object")).collect()
}

/// Sends `code` to run without waiting for its result.
fn start_a_run(ptc: &Ptc, code: &str) -> tokio::task::JoinHandle<()> {
    let peer = ptc.client.peer().clone();
    let params = rmcp::model::CallToolRequestParams::new("execute_program")
        .with_arguments(json!({"code": code}).as_object().unwrap().clone());
    tokio::spawn(async move {
        let _ = peer.call_tool(params).await;
    })
}

fn signal(ptc: &Ptc, signal: i32) {
    let pid = ptc.child.id().expect("the server is running") as i32;
    // SAFETY: kill with the pid of a child we own.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

#[apply(integration_test!)]
async fn a_finished_run_is_logged_and_audited_under_one_id_and_survives_a_crash_during_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut ptc = Ptc::start_logging(&audited_config(&audit, false), &[], Some("info")).await;
    let code =
        "r = await mcp__mock__add(a=1, b=2)\ntry:\n    await mcp__mock__fail()\nexcept ToolError:\n    pass\nprint(r)";
    let run = ptc.execute(code).await;
    if run.is_error() && sandbox_unusable(&run.text()).is_none() {
        return;
    }
    run.expect_ok();
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert!(line.get("code").is_none(), "the code only with audit_code: {line}");
    assert_eq!(line["session"], "stdio");
    assert_eq!(line["outcome"], "ok");
    assert_eq!(line["output_bytes"], run.text().len());
    assert_eq!(line["code_sha256"].as_str().unwrap().len(), 64);
    let calls = line["calls"].as_array().unwrap();
    assert_eq!(
        calls.iter().map(|c| json!([c["tool"], c["ok"], c["bytes"].as_u64().unwrap() > 0])).collect::<Vec<_>>(),
        [json!(["mcp__mock__add", true, true]), json!(["mcp__mock__fail", false, false])]
    );
    assert!(calls[1]["error"].as_str().unwrap().contains("returned an error"), "{line}");
    let id = line["run_id"].as_str().unwrap();
    let logged = ptc.log().lines().find(|l| l.contains("run finished")).map(str::to_string).unwrap_or_default();
    for field in [format!("run={id}"), "calls=2".into(), "failed_calls=1".into(), "outcome=\"ok\"".into()] {
        assert!(logged.contains(&field), "{field} in {logged}");
    }
    // The server dies while another run is under way: the finished run's line is there, whole.
    let _running = start_a_run(&ptc, "import asyncio\nawait asyncio.sleep(60)");
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(&ptc, libc::SIGKILL);
    let _ = tokio::time::timeout(Duration::from_secs(10), ptc.child.wait()).await.expect("SIGKILL ends it");
    assert_eq!(audit_lines(&audit), lines);
}

#[apply(integration_test!)]
async fn a_run_killed_by_sigterm_is_audited_as_killed_with_its_code() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let mut ptc = Ptc::start(&audited_config(&audit, true)).await;
    if sandbox_usable(&ptc).await.is_none() {
        return;
    }
    let code = "import asyncio\nprint('started', flush=True)\nawait asyncio.sleep(60)";
    let _running = start_a_run(&ptc, code);
    tokio::time::sleep(Duration::from_secs(1)).await;
    signal(&ptc, libc::SIGTERM);
    let status = tokio::time::timeout(Duration::from_secs(10), ptc.child.wait()).await.expect("it exits within 10 s");
    assert!(status.unwrap().success());
    let lines = audit_lines(&audit);
    assert_eq!(lines.len(), 2, "the probe run and the killed one: {lines:?}");
    assert_eq!(lines[1]["outcome"], "killed");
    assert_eq!(lines[1]["code"], code);
}

#[apply(integration_test!)]
async fn sighup_reopens_the_audit_file_after_the_os_rotated_it() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let ptc = Ptc::start(&audited_config(&audit, false)).await;
    if sandbox_usable(&ptc).await.is_none() {
        return;
    }
    let rotated = dir.path().join("audit.jsonl.1");
    std::fs::rename(&audit, &rotated).unwrap();
    ptc.execute("print('before the hangup')").await.expect_ok();
    signal(&ptc, libc::SIGHUP);
    // The reopen happens on the server's own time: poll with a fresh run until a line lands in the new file.
    let mut reopened = false;
    for _ in 0..100 {
        ptc.execute("print('after')").await.expect_ok();
        if !audit_lines(&audit).is_empty() {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened, "no line in the reopened file (and SIGHUP must not stop the server)");
    assert!(audit_lines(&rotated).len() >= 2, "the probe run and the one before the hangup stay in the old file");
}

/// Runs `print('ok')` once (it is audited too); `None` when the sandbox under test cannot run programs.
async fn sandbox_usable(ptc: &Ptc) -> Option<()> {
    require_backend(ptc).await
}
