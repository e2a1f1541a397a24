//! Named sessions: `execute_program(code, session=NAME)` keeps the interpreter (globals, imports, functions,
//! files in its working directory) for the next run with the name, in the same sandbox and limits as any run.
//! A session belongs to its client, its runs are serialised, it is bounded (`execution.sessions.max`,
//! `idle_timeout_seconds`), and one that ended says so, and why, in the next run's text.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;
use crate::http::HttpPtc;

async fn ptc(execution: &str) -> Option<Ptc> {
    let ptc = Ptc::start(&config(&[mock_server("mock", &[])], execution)).await;
    require_backend(&ptc).await.map(|()| ptc)
}

/// Runs `code` in the session `name`.
async fn run_in(ptc: &Ptc, name: &str, code: &str) -> Run {
    Run(ptc.call("execute_program", json!({"code": code, "session": name})).await)
}

/// The last line of a run's text that is about its session (only the trace's summary may follow).
fn session_line(run: &Run) -> String {
    run.text().lines().rev().find(|line| line.starts_with("[session")).unwrap_or_default().to_string()
}

#[apply(integration_test!)]
async fn a_session_keeps_globals_imports_functions_and_files_for_its_next_runs() {
    let Some(ptc) = ptc("").await else { return };
    let first = run_in(
        &ptc,
        "data",
        "import statistics\n\
         rows = (await mcp__mock__echo(values=[3, 1, 2]))['values']\n\
         def total(): return sum(rows)\n\
         open('notes.txt', 'w').write('kept')\n\
         print(len(rows))",
    )
    .await;
    assert_eq!(first.expect_output(), "3\n");
    assert_eq!(session_line(&first), "[session 'data': new]");
    assert_eq!(first.structured()["session"], json!({"name": "data", "new": true, "runs": 1}));
    let second = run_in(&ptc, "data", "rows.append(4)\nprint(total(), statistics.median(rows))").await;
    assert_eq!(second.expect_output(), "10 2.5\n");
    assert_eq!(session_line(&second), "[session 'data': kept, run 2]");
    let third = run_in(&ptc, "data", "print(open('notes.txt').read(), (await mcp__mock__add(a=1, b=2))['sum'])").await;
    assert_eq!(third.expect_output(), "kept 3\n", "files and tool calls work in later runs too");
    assert_eq!(third.structured()["session"], json!({"name": "data", "new": false, "runs": 3}));
    let without = ptc.execute("print('rows' in globals())").await;
    assert_eq!(without.expect_ok(), "[Script executed successfully]\nFalse", "a run without session is as ever");
    assert!(without.structured().get("session").is_none());
}

#[apply(integration_test!)]
async fn sessions_of_one_client_share_nothing_and_a_program_error_keeps_the_session() {
    let Some(ptc) = ptc("").await else { return };
    run_in(&ptc, "a", "x = 'a'\nopen('mine.txt', 'w').write('a')").await.expect_ok();
    let other = run_in(&ptc, "b", "import os\nprint('x' in globals(), os.path.exists('mine.txt'))").await;
    assert_eq!(other.expect_output(), "False False\n");
    let failed = run_in(&ptc, "a", "y = 2\nraise ValueError('boom')").await;
    assert!(failed.expect_error().contains("ValueError: boom"), "{}", failed.text());
    assert_eq!(session_line(&failed), "[session 'a': kept, run 2]");
    let after = run_in(&ptc, "a", "print(x, y)").await;
    assert_eq!(after.expect_output(), "a 2\n", "what ran before the error stays");
}

#[apply(integration_test!)]
async fn runs_on_one_session_wait_for_each_other() {
    let Some(ptc) = ptc("").await else { return };
    run_in(&ptc, "s", "seen = []").await.expect_ok();
    let slow = run_in(&ptc, "s", "import time\ntime.sleep(1)\nseen.append('slow')");
    let quick = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        run_in(&ptc, "s", "seen.append('quick')\nprint(seen)").await
    };
    let (slow, quick) = tokio::join!(slow, quick);
    slow.expect_ok();
    assert_eq!(quick.expect_output(), "['slow', 'quick']\n", "the second run waited for the first");
}

#[apply(integration_test!)]
async fn past_the_cap_the_least_recently_used_idle_session_ends_and_its_next_run_says_so() {
    let Some(ptc) = ptc("  sessions:\n    max: 2\n").await else { return };
    run_in(&ptc, "one", "x = 1").await.expect_ok();
    run_in(&ptc, "two", "x = 2").await.expect_ok();
    run_in(&ptc, "one", "x += 10").await.expect_ok();
    run_in(&ptc, "three", "x = 3").await.expect_ok();
    let kept = run_in(&ptc, "one", "print(x)").await;
    assert_eq!(kept.expect_output(), "11\n", "'two' was the least recently used");
    let evicted = run_in(&ptc, "two", "print('x' in globals())").await;
    assert_eq!(evicted.expect_output(), "False\n");
    assert_eq!(
        session_line(&evicted),
        "[session 'two': new; the earlier session of this name ended (it was the least recently used idle session \
         when another needed room (execution.sessions.max is 2)): its variables and files are gone]"
    );
    assert_eq!(evicted.structured()["session"]["new"], json!(true));
}

#[apply(integration_test!)]
async fn a_new_session_is_refused_when_every_live_one_is_running() {
    let Some(ptc) = ptc("  sessions:\n    max: 1\n").await else { return };
    let busy = run_in(&ptc, "busy", "import time\ntime.sleep(2)");
    let refused = async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        run_in(&ptc, "other", "print(1)").await
    };
    let (busy, refused) = tokio::join!(busy, refused);
    busy.expect_ok();
    assert_eq!(
        refused.expect_error(),
        "[Script execution failed]\nExecutionError: 1 sessions are live (execution.sessions.max) and each is \
         running a program; wait for one to finish, or run without session"
    );
    ptc.execute("print(1)").await.expect_ok();
}

#[apply(integration_test!)]
async fn an_idle_session_ends_after_its_timeout_and_the_next_run_says_why() {
    let Some(ptc) = ptc("  sessions:\n    idle_timeout_seconds: 1\n").await else { return };
    run_in(&ptc, "s", "x = 1").await.expect_ok();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = run_in(&ptc, "s", "print('x' in globals())").await;
    assert_eq!(again.expect_output(), "False\n");
    assert_eq!(
        session_line(&again),
        "[session 's': new; the earlier session of this name ended (it was idle for 1s \
         (execution.sessions.idle_timeout_seconds)): its variables and files are gone]"
    );
    let kept = run_in(&ptc, "s", "x = 2").await;
    assert_eq!(session_line(&kept), "[session 's': kept, run 2]", "said once, then it is the new session");
}

#[apply(integration_test!)]
async fn a_run_past_its_time_limit_or_a_crash_ends_the_session_and_both_answers_say_so() {
    let Some(ptc) = ptc("  timeout_seconds: 3\n").await else { return };
    run_in(&ptc, "s", "x = 1").await.expect_ok();
    let timed_out = run_in(&ptc, "s", "while True: pass").await;
    assert!(timed_out.expect_error().contains("TimeoutError"), "{}", timed_out.text());
    assert_eq!(
        session_line(&timed_out),
        "[session 's' ended: run 2 reached its time limit; the next run with this name starts anew]"
    );
    assert_eq!(timed_out.structured()["session"]["ended"], json!("run 2 reached its time limit"));
    let crashed = run_in(&ptc, "s", "import os\nx = 5\nos._exit(3)").await;
    let text = crashed.expect_error();
    assert!(text.contains("[session 's': new; the earlier session of this name ended (run 2 reached"), "{text}");
    assert!(
        session_line(&crashed)
            .starts_with("[session 's' ended: run 1 ended its interpreter: ExecutionError: the interpreter ended"),
        "{text}"
    );
    let fresh = run_in(&ptc, "s", "print('x' in globals())").await;
    assert_eq!(fresh.expect_output(), "False\n");
    assert!(session_line(&fresh).contains("run 1 ended its interpreter"), "{}", fresh.text());
}

#[apply(integration_test!)]
async fn an_interpreter_that_dies_while_idle_is_noticed_by_the_next_run() {
    let Some(ptc) = ptc("").await else { return };
    run_in(&ptc, "s", "import os, threading\nthreading.Timer(0.3, lambda: os._exit(1)).start()").await.expect_ok();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let next = run_in(&ptc, "s", "print(1)").await;
    assert_eq!(next.expect_output(), "1\n");
    assert_eq!(
        session_line(&next),
        "[session 's': new; the earlier session of this name ended (its interpreter ended while idle after run 1): \
         its variables and files are gone]"
    );
}

#[apply(integration_test!)]
async fn each_session_run_gets_one_run_of_cpu_time_within_the_session_s_bound() {
    let Some(ptc) = ptc("  timeout_seconds: 10\n").await else { return };
    let code = "import resource\n\
                used = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])\n\
                soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n\
                print(hard, 0 < soft - used <= 12)";
    for _ in 0..2 {
        let run = run_in(&ptc, "s", code).await;
        assert_eq!(run.expect_output(), "161 True\n", "16 runs' worth over its life (16 x 10 s + 1)");
    }
}

#[apply(integration_test!)]
async fn bad_names_and_sessions_turned_off_are_refused_saying_why() {
    let Some(on) = ptc("").await else { return };
    let long = "x".repeat(65);
    for (name, shown) in [("", "\"\""), ("a/b", "\"a/b\""), (long.as_str(), long.as_str())] {
        let run = Run(on.call("execute_program", json!({"code": "print(1)", "session": name})).await);
        let text = run.expect_error();
        assert!(text.starts_with("execute_program: session must be 1 to 64 characters of A-Z"), "{text}");
        assert!(text.contains(shown), "{text}");
    }
    let run = Run(on.call("execute_program", json!({"code": "print(1)", "session": 7})).await);
    assert_eq!(run.expect_error(), "execute_program: session must be a string (a name of your choice)");
    let Some(off) = ptc("  sessions:\n    max: 0\n").await else { return };
    let run = run_in(&off, "s", "print(1)").await;
    assert_eq!(
        run.expect_error(),
        "execute_program: sessions are off here (execution.sessions.max is 0); run without session"
    );
    let tools = off.client.peer().list_all_tools().await.unwrap();
    let execute = tools.iter().find(|tool| tool.name == "execute_program").unwrap();
    assert!(execute.input_schema["properties"].get("session").is_none(), "not offered when off");
}

#[apply(integration_test!)]
async fn another_http_client_cannot_reach_a_session_by_its_name() {
    let ptc = HttpPtc::start(&config(&[], ""), &crate::http::token_keys()).await;
    let (alice, bob) = (ptc.client().await, ptc.client().await);
    let call = |client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, code: &str| {
        let arguments = json!({"code": code, "session": "shared"}).as_object().cloned().unwrap();
        let params = rmcp::model::CallToolRequestParams::new("execute_program").with_arguments(arguments);
        let peer = client.peer().clone();
        async move { peer.call_tool(params).await.expect("the call is answered") }
    };
    let first = call(&alice, "secret = 'alice'").await;
    if first.is_error == Some(true) && text_block(&first, 0).contains("SandboxError") {
        let _ = sandbox_unusable(&text_block(&first, 0));
        return;
    }
    let theirs = call(&bob, "print(globals().get('secret'))").await;
    let structured: Value = theirs.structured_content.clone().unwrap();
    assert_eq!(structured["output"], json!("None\n"), "bob's 'shared' is his own");
    assert_eq!(structured["session"]["new"], json!(true));
    let mine = call(&alice, "print(secret)").await;
    assert_eq!(mine.structured_content.unwrap()["output"], json!("alice\n"));
}
