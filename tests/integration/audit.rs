//! The record of every run: one `info` log line and, with `logging.audit_file`, one JSON line appended when
//! the run ends — kept through a crash of the server, written for runs killed at shutdown, reopened on
//! SIGHUP, whole or not at all, and only to a file that is this user's alone.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

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
    // The line is written by the server's audit thread, just after the answer.
    assert!(eventually(Duration::from_secs(10), || !audit_lines(&audit).is_empty()).await, "no audit line");
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

/// `ptc-mcp run -` on `code` with `config_text`, in a fresh directory; `limit_file_size` sets the server's
/// RLIMIT_FSIZE (SIGXFSZ ignored), so that a write past it comes up short as on a full disk.
async fn run_once(config_text: &str, code: &str, limit_file_size: Option<u64>) -> Output {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.yaml"), config_text).unwrap();
    let mut command = std::process::Command::new(binary());
    command.args(["run", "-"]).current_dir(dir.path()).env_remove("PTC_MCP_CONFIG").env("RUST_LOG", "warn");
    if let Some(bytes) = limit_file_size {
        // SAFETY: only async-signal-safe calls (signal, setrlimit) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let limit = libc::rlimit { rlim_cur: bytes, rlim_max: libc::RLIM_INFINITY };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    let mut child = tokio::process::Command::from(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(code.as_bytes()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(120), child.wait_with_output()).await.expect("the run ends").unwrap()
}

#[apply(integration_test!)]
async fn an_audit_line_that_does_not_fit_is_left_out_whole() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    // Room for the start of a line, not for all of it: the disk fills up in the middle of the write.
    let out = run_once(&audited_config(&audit, false), "print('hello')", Some(100)).await;
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if stdout.contains("SandboxError") {
        let _ = sandbox_unusable(&stdout);
        return;
    }
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(std::fs::read_to_string(&audit).unwrap(), "", "no half line");
    assert!(stderr.contains(&format!("a run's line was left out of the audit file {}", audit.display())), "{stderr}");
}

/// A directory every user may create files in (sticky, like /tmp), owned by `nobody`, as a shared directory
/// an administrator made for them may be; `None` (skipped) when not root, who alone can act as another user.
fn shared_directory(parent: &Path) -> Option<std::path::PathBuf> {
    // SAFETY: geteuid has no preconditions.
    let root = if unsafe { libc::geteuid() } == 0 { Ok(()) } else { Err("acting as another user".to_string()) };
    require("root", root)?;
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = parent.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(&shared, Some(NOBODY), Some(NOBODY)).unwrap();
    Some(shared)
}

const NOBODY: u32 = 65534;

#[apply(integration_test!)]
async fn another_users_symlink_as_the_audit_file_is_refused_at_start_and_its_target_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shared) = shared_directory(dir.path()) else { return };
    let target = dir.path().join("root-only");
    std::fs::write(&target, "root's own\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let audit = shared.join("audit.jsonl");
    std::os::unix::fs::symlink(&target, &audit).unwrap();
    std::os::unix::fs::lchown(&audit, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = run_once(&audited_config(&audit, false), "print('hello')", None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("logging.audit_file: {}: it is a symbolic link", audit.display())), "{stderr}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's own\n");
}

#[apply(integration_test!)]
async fn an_audit_file_another_user_made_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let Some(shared) = shared_directory(dir.path()) else { return };
    let audit = shared.join("audit.jsonl");
    // Made by its owner to read what gets logged (programs, and the secrets in them).
    std::fs::write(&audit, "").unwrap();
    std::fs::set_permissions(&audit, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&audit, Some(NOBODY), Some(NOBODY)).unwrap();
    let out = run_once(&audited_config(&audit, true), "secret = 'hunter2'\nprint(len(secret))", None).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "logging.audit_file: {}: it belongs to uid {NOBODY}, not to this user (uid 0)",
            audit.display()
        )),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&audit).unwrap(), "");
}

/// Runs `print('ok')` once (it is audited too); `None` when the sandbox under test cannot run programs.
async fn sandbox_usable(ptc: &Ptc) -> Option<()> {
    require_backend(ptc).await
}
