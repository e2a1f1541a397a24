//! Errors that show the data: a program that guesses a tool result's shape wrong is answered with where the
//! value came from and its shape, from real results (our mock server, and third-party servers when
//! installed); hints at the sandbox's limits; an uncaught error said once. Also the corpus of misuses in
//! tests/fixtures/misuse.

use serde_json::json;

use crate::common::*;

/// A third-party server's path from `var` (ci/test-deps.sh sets it), if it is installed here.
fn installed(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|path| std::path::Path::new(path).exists())
}

/// A server entry for mcp-server-time (PyPI).
fn time_entry(server: &str) -> String {
    format!("  - name: time\n    command: {}\n    args: [\"--local-timezone\", \"UTC\"]\n", json!(server))
}

/// A server entry for server-filesystem (npm) serving `dir`.
fn files_entry(server: &str, dir: &std::path::Path) -> String {
    let dir = dir.display().to_string();
    format!("  - name: files\n    command: node\n    args: [{}, {}]\n", json!(server), json!(dir))
}

/// A server entry for server-memory (npm) keeping its graph in `dir`.
fn memory_entry(server: &str, dir: &std::path::Path) -> String {
    let file = dir.join("memory.jsonl").display().to_string();
    format!(
        "  - name: memory\n    command: node\n    args: [{}]\n    env:\n      MEMORY_FILE_PATH: {}\n",
        json!(server),
        json!(file)
    )
}

/// Waits until `tool` is listed: a third-party server may take longer to start than a program waits.
async fn wait_for_tool(ptc: &Ptc, tool: &str) -> bool {
    let limit = std::time::Duration::from_secs(120);
    ptc.wait_for_tools(limit, |names| names.iter().any(|n| n == tool)).await.iter().any(|n| n == tool)
}

/// The lines of an answer after its exception's line (`exception` starts it), up to the trace summary.
fn notes_after(text: &str, exception: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().rposition(|l| l.starts_with(exception)).unwrap_or_else(|| panic!("no {exception}: {text}"));
    lines[at + 1..]
        .iter()
        .take_while(|l| !l.is_empty() && !l.starts_with("[tool calls: "))
        .map(|l| l.to_string())
        .collect()
}

#[apply(integration_test!)]
async fn a_key_error_on_a_real_result_shows_the_call_its_keys_and_the_nearest_key() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let text = ptc.execute("r = await mcp__mock__echo(message='hi', count=2)\nprint(r['mesage'])").await.expect_error();
    assert_eq!(
        notes_after(&text, "KeyError: 'mesage'"),
        ["r came from mcp__mock__echo (line 1): a dict {'message': str, 'count': int}", "did you mean r['message']?"],
        "{text}"
    );
    // The program's own dict of the same shape is never taken for the result.
    let text = ptc
        .execute("r = await mcp__mock__echo(message='hi', count=2)\nmine = dict(r)\nprint(mine['mesage'])")
        .await
        .expect_error();
    assert_eq!(notes_after(&text, "KeyError: 'mesage'"), Vec::<String>::new(), "{text}");
}

#[apply(integration_test!)]
async fn a_string_or_a_list_used_as_a_dict_shows_its_start_or_its_first_item() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let text = ptc.execute("r = await mcp__mock__plain_text()\nprint(r['text'])").await.expect_error();
    assert_eq!(
        notes_after(&text, "TypeError: string indices must be integers"),
        ["r came from mcp__mock__plain_text (line 1): a str of 11 chars: 'hello world'"],
        "{text}"
    );
    let code = "r = await mcp__mock__say(text='[\"/data/a\", \"/data/b\"]')\nfor d in r:\n    print(d['path'])";
    let text = ptc.execute(code).await.expect_error();
    assert_eq!(
        notes_after(&text, "TypeError: string indices must be integers"),
        ["d came from mcp__mock__say (line 1), at [0] of its result: a str of 7 chars: '/data/a'"],
        "{text}"
    );
}

#[apply(integration_test!)]
async fn an_uncaught_tool_error_is_said_once() {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], "")).await;
    let text = ptc.execute("await mcp__mock__fail()").await.expect_error();
    assert_eq!(text.matches("something broke").count(), 1, "{text}");
    assert!(
        without_call_time(&text).ends_with(
            "ToolError: 'mcp__mock__fail' returned an error: something broke\n[tool calls: 1, 1 failed; Ts]\n  \
             failed: mcp__mock__fail: the error above"
        ),
        "{text}"
    );
    // A caught failure is not above: its line keeps the message.
    let run = ptc
        .execute("try:\n    await mcp__mock__fail()\nexcept ToolError:\n    pass\nawait mcp__mock__rpc_error()")
        .await;
    let text = run.expect_error();
    assert!(text.contains("\n  failed: mcp__mock__fail (caught): returned an error: something broke"), "{text}");
    assert!(text.ends_with("\n  failed: mcp__mock__rpc_error: the error above"), "{text}");
    assert_eq!(run.structured()["tool_calls"][1]["error"].as_str().map(|e| e.contains("internal failure")), Some(true));
}

#[apply(integration_test!)]
async fn host_files_and_modules_outside_the_sandbox_get_a_hint() {
    let ptc = Ptc::start(&config(&[], "")).await;
    let host_file = "(not visible here: programs see only their working directory; read host files through a tool)";
    let text = ptc.execute("open('/nonexistent-ptc-host/data.csv')").await.expect_error();
    assert_eq!(notes_after(&text, "FileNotFoundError: "), [host_file], "{text}");
    if sandbox_under_test() != "none" {
        // A host file that exists: the sandbox hides it (the server's own config, next to its working directory).
        let config = ptc.dir.path().join("config.yaml").display().to_string();
        let text = ptc.execute(&format!("open({})", json!(config))).await.expect_error();
        assert!(text.ends_with(&format!("\n{host_file}")), "{text}");
    }
    let text = ptc.execute("open('mine.csv')").await.expect_error();
    assert!(text.ends_with("No such file or directory: 'mine.csv'"), "{text}");
    let text = ptc.execute("import numpy as np").await.expect_error();
    assert_eq!(
        notes_after(&text, "ModuleNotFoundError: "),
        ["(only the standard library is available here)"],
        "{text}"
    );
    let caught = "try:\n    import numpy\nexcept ImportError as e:\n    print(repr(e))";
    assert_eq!(
        ptc.execute(caught).await.expect_ok(),
        "[Script executed successfully]\nModuleNotFoundError(\"No module named 'numpy'\")"
    );
}

#[apply(integration_test!)]
async fn a_key_error_on_the_time_servers_result_shows_its_keys_and_the_nested_one() {
    let Some(server) = required_path("third-party-servers", "PTC_TEST_TIME_SERVER") else {
        return;
    };
    let ptc = Ptc::start(&config(&[time_entry(&server)], "")).await;
    assert!(wait_for_tool(&ptc, "mcp__time__convert_time").await);
    let code = "r = await mcp__time__convert_time(source_timezone='Europe/Paris', time='12:00', \
                target_timezone='Asia/Tokyo')\nprint(r['target_time'])";
    let text = ptc.execute(code).await.expect_error();
    let zone = "{'timezone': str, 'datetime': str, 'day_of_week': str, 'is_dst': bool}";
    assert_eq!(
        notes_after(&text, "KeyError: 'target_time'"),
        [
            format!(
                "r came from mcp__time__convert_time (line 1): a dict {{'source': {zone}, 'target': {zone}, \
                 'time_difference': str}}"
            ),
            "did you mean r['target']?".to_string()
        ],
        "{text}"
    );
}

#[apply(integration_test!)]
async fn a_filesystem_result_used_as_text_suggests_its_content_key() {
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("notes.txt"), "one\ntwo\n").unwrap();
    let Some(server) = required_path("third-party-servers", "PTC_TEST_FILESYSTEM_SERVER") else {
        return;
    };
    let ptc = Ptc::start(&config(&[files_entry(&server, files.path())], "")).await;
    assert!(wait_for_tool(&ptc, "mcp__files__read_text_file").await);
    let path = json!(files.path().join("notes.txt").display().to_string());
    let text = ptc
        .execute(&format!("r = await mcp__files__read_text_file(path={path})\nprint(len(r.splitlines()))"))
        .await
        .expect_error();
    assert_eq!(
        notes_after(&text, "AttributeError: 'dict' object has no attribute 'splitlines'"),
        [
            "r came from mcp__files__read_text_file (line 1): a dict {'content': str}",
            "did you mean r['content'].splitlines?"
        ],
        "{text}"
    );
}

/// One program of tests/fixtures/misuse.
struct Misuse {
    name: String,
    servers: Vec<String>,
    needs: Vec<String>,
    code: String,
}

fn misuses() -> Vec<Misuse> {
    let dir = repo_path("tests/fixtures/misuse");
    let mut found: Vec<Misuse> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "py"))
        .map(|path| {
            let code = std::fs::read_to_string(&path).unwrap();
            let header = |key: &str| -> Vec<String> {
                code.lines().filter_map(|l| l.strip_prefix(key)).map(|v| v.trim().to_string()).collect()
            };
            Misuse {
                name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                servers: header("# servers:").join(" ").split_whitespace().map(str::to_string).collect(),
                needs: header("# needs:"),
                code,
            }
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

#[apply(integration_test!)]
async fn the_misuse_corpus_is_answered_with_the_fact_each_program_needs() {
    let corpus = misuses();
    assert!(corpus.len() >= 20 && corpus.iter().all(|m| !m.needs.is_empty() && !m.servers.is_empty()));
    let files = tempfile::tempdir().unwrap();
    std::fs::write(files.path().join("notes.txt"), "one\ntwo\n").unwrap();
    std::fs::create_dir(files.path().join("sub")).unwrap();
    let memory = tempfile::tempdir().unwrap();
    let mut entries = vec![("mock", Some(mock_server("mock", &[])), "mcp__mock__echo")];
    entries.push(("time", installed("PTC_TEST_TIME_SERVER").map(|s| time_entry(&s)), "mcp__time__convert_time"));
    let files_server = installed("PTC_TEST_FILESYSTEM_SERVER");
    entries.push(("files", files_server.map(|s| files_entry(&s, files.path())), "mcp__files__read_text_file"));
    let memory_server = installed("PTC_TEST_MEMORY_SERVER");
    entries.push(("memory", memory_server.map(|s| memory_entry(&s, memory.path())), "mcp__memory__read_graph"));
    let servers: Vec<String> = entries.iter().filter_map(|(_, entry, _)| entry.clone()).collect();
    let ptc = Ptc::start(&config(&servers, "")).await;
    let mut available = Vec::new();
    for (name, entry, tool) in &entries {
        if entry.is_some() && wait_for_tool(&ptc, tool).await {
            available.push(name.to_string());
        }
    }
    let (mut answered, mut missed, mut skipped) = (0, Vec::new(), Vec::new());
    for misuse in &corpus {
        if !misuse.servers.iter().all(|s| available.contains(s)) {
            skipped.push(misuse.name.clone());
            continue;
        }
        let code = misuse.code.replace("{FILES}", &files.path().display().to_string());
        let text = ptc.execute(&code).await.expect_error();
        let lacking: Vec<&String> = misuse.needs.iter().filter(|need| !text.contains(need.as_str())).collect();
        if lacking.is_empty() {
            answered += 1;
        } else {
            missed.push(format!("{}: lacks {lacking:?} in:\n{text}", misuse.name));
        }
    }
    eprintln!(
        "misuse corpus: {answered} of {} answered with the needed fact ({} skipped for servers not installed: {skipped:?})",
        corpus.len() - skipped.len(),
        skipped.len()
    );
    assert!(missed.is_empty(), "{}", missed.join("\n\n"));
}
