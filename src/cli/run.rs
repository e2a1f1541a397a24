//! `ptc-mcp run FILE|-`: one program through the same engine and sandbox as `execute_program`, with one
//! runner (see [`with_app`]) and only the servers it names waited for. Its output is shown as it arrives;
//! once the run is over follows the `execute_program` text less that output, so nothing shows twice.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::app::App;
use crate::config::{Config, ServerConfig, TraceMode};
use crate::engine::{Caller, Outcome, RunOptions, RunReport};
use crate::naming::{PREFIX, identifier_part};
use crate::precheck::{self, ToolsNamed};

use super::{CONFIG_ERROR, FAILURE, INTERRUPTED, SUCCESS, print_err, print_out, with_app};

/// Servers that connect within this long are waited for without a word; then the others are named.
const QUIET_WAIT: Duration = Duration::from_secs(1);
/// Output chunks (at most 64 KiB each) on their way to stdout; past them the program's output waits.
const PRINTED_QUEUE: usize = 16;
/// How the `execute_program` text of a successful run begins, and what follows when it printed nothing.
const SUCCEEDED: &str = "[Script executed successfully]";
const NOTHING_PRINTED: &str = "\n(no output)";

/// Runs the program in `file` (`-`: stdin), showing its output as it arrives, then the rest of the
/// `execute_program` text. Exit status 0 on success, 1 on a failed run, 2 on a config or sandbox error, 130
/// when SIGINT or SIGTERM stopped it (then the text says what it had done).
pub async fn run(config: &Config, file: &Path) -> u8 {
    let code = match read_program(file) {
        Ok(code) => code,
        Err(e) => {
            print_err(&format!("ptc-mcp: cannot read the program from {}: {e}\n", file.display()));
            return CONFIG_ERROR;
        }
    };
    let servers = servers_named(config, &precheck::tools_named(&code));
    with_app(config, async |app, stop| {
        tokio::select! {
            () = wait_for(app, &servers) => {}
            () = stop.cancelled() => return INTERRUPTED,
        }
        let (printed, arriving) = mpsc::channel(PRINTED_QUEUE);
        let shown = tokio::task::spawn_blocking(move || show_as_it_arrives(arriving));
        let caller = Caller { session: "cli".to_string(), cancel: stop.clone(), ..Caller::default() };
        let options = RunOptions { printed: Some(printed), servers_awaited: true, ..RunOptions::default() };
        let report = app.engine.execute_with(&code, caller, options).await;
        let shown = shown.await.unwrap_or_default();
        let status = match report.outcome {
            Outcome::Ok => SUCCESS,
            Outcome::Sandbox => CONFIG_ERROR,
            Outcome::Cancelled => INTERRUPTED,
            _ => FAILURE,
        };
        print_out(&rest_of_text(report, config.execution.trace, shown));
        status
    })
    .await
}

fn read_program(file: &Path) -> std::io::Result<String> {
    if file == Path::new("-") {
        let mut code = String::new();
        std::io::stdin().read_to_string(&mut code)?;
        Ok(code)
    } else {
        std::fs::read_to_string(file)
    }
}

/// The configured servers whose tools the program names, or all of them when it may reach any tool.
fn servers_named<'c>(config: &'c Config, named: &ToolsNamed) -> Vec<&'c ServerConfig> {
    let names_one_of_its_tools = |server: &ServerConfig| match named {
        ToolsNamed::Any => true,
        ToolsNamed::Only(tools) => {
            let prefix = format!("{PREFIX}{}__", identifier_part(&server.name));
            tools.iter().any(|tool| tool.starts_with(&prefix))
        }
    };
    config.servers.iter().filter(|server| names_one_of_its_tools(server)).collect()
}

/// Waits for the first connection attempt of each of `servers` (up to its `connect_timeout_seconds`),
/// naming on stderr those that take more than a moment.
async fn wait_for(app: &App, servers: &[&ServerConfig]) {
    if servers.is_empty() {
        return;
    }
    let waited = app.wait_for_these_servers(servers);
    tokio::pin!(waited);
    if tokio::time::timeout(QUIET_WAIT, &mut waited).await.is_ok() {
        return;
    }
    let settled = app.registry.first_attempt_times();
    for server in servers.iter().filter(|server| settled.get(&server.name).is_some_and(Option::is_none)) {
        print_err(&format!(
            "ptc-mcp: waiting for server '{}' (connect_timeout_seconds {})…\n",
            server.name, server.connect_timeout_seconds
        ));
    }
    waited.await;
}

/// What of the program's output was shown as it arrived.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Shown {
    any: bool,
    /// It ended with a newline (or there was none).
    ends_line: bool,
}

/// Writes the program's output to stdout as it arrives, until the run is over.
fn show_as_it_arrives(mut arriving: mpsc::Receiver<String>) -> Shown {
    let mut shown = Shown { any: false, ends_line: true };
    while let Some(chunk) = arriving.blocking_recv() {
        if !chunk.is_empty() {
            print_out(&chunk);
            shown = Shown { any: true, ends_line: chunk.ends_with('\n') };
        }
    }
    shown
}

/// What follows the output shown as it arrived: the `execute_program` text without that output (and, on
/// success, without the `(no output)` line that would stand in for it); all of the text if nothing was shown.
fn rest_of_text(report: RunReport, trace: TraceMode, shown: Shown) -> String {
    if !shown.any {
        return format!("{}\n", report.text(trace));
    }
    let text = RunReport { output: String::new(), ..report }.text(trace);
    let text = match text.strip_prefix(SUCCEEDED).and_then(|rest| rest.strip_prefix(NOTHING_PRINTED)) {
        Some(rest) => format!("{SUCCEEDED}{rest}"),
        None => text,
    };
    let separator = if shown.ends_line { "" } else { "\n" };
    format!("{separator}{text}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: Outcome, output: &str, error: Option<&str>) -> RunReport {
        RunReport { outcome, output: output.into(), error: error.map(String::from), ..RunReport::default() }
    }

    #[test]
    fn after_the_output_shown_comes_the_text_without_it_and_without_a_shown_output_all_of_it() {
        let shown = Shown { any: true, ends_line: true };
        let mut ok = report(Outcome::Ok, "a\nb\n", None);
        ok.result = Some(serde_json::json!([1]));
        assert_eq!(
            rest_of_text(ok, TraceMode::Summary, shown),
            "[Script executed successfully]\n--- result ---\n[1]\n"
        );
        let failed = report(Outcome::Error, "a\n", Some("ValueError: x"));
        assert_eq!(rest_of_text(failed, TraceMode::Summary, shown), "[Script execution failed]\nValueError: x\n");
        let unended = Shown { any: true, ends_line: false };
        let ok = report(Outcome::Ok, "a", None);
        assert_eq!(rest_of_text(ok, TraceMode::Summary, unended), "\n[Script executed successfully]\n");
        let silent = report(Outcome::Ok, "", None);
        let nothing = Shown { any: false, ends_line: true };
        assert_eq!(rest_of_text(silent, TraceMode::Summary, nothing), "[Script executed successfully]\n(no output)\n");
    }

    #[test]
    fn the_servers_waited_for_are_those_whose_tools_the_program_names_or_all() {
        let text =
            "servers:\n  - {name: fs, command: c}\n  - {name: git-hub, command: c}\n  - {name: fs2, command: c}\n";
        let config = Config::parse(text, &|_| None).unwrap();
        let waited = |named: ToolsNamed| -> Vec<String> {
            servers_named(&config, &named).iter().map(|server| server.name.clone()).collect()
        };
        let only = |names: &[&str]| ToolsNamed::Only(names.iter().map(|name| name.to_string()).collect());
        assert_eq!(waited(only(&["mcp__git_hub__log", "mcp__fs__read"])), ["fs", "git-hub"]);
        assert_eq!(waited(only(&["mcp__nope__x"])), Vec::<String>::new());
        assert_eq!(waited(ToolsNamed::Any), ["fs", "git-hub", "fs2"]);
    }
}
