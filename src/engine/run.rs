//! The server's side of one run: the protocol loop with the runner. Every line from the runner is
//! untrusted; budgets, limits and the trace are decided here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ptc_backends::ExitInfo;
use ptc_backends::protocol::{FromRunner, ProgramError, ToRunner};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::output::OutputBuffer;
use super::pool::ReadyRunner;
use super::report::RunReport;
use crate::config::ExecutionConfig;
use crate::lines::Line;
use crate::registry::Registry;

/// Messages to the runner waiting to be written; call tasks wait when it is full, the loop never does.
const WRITE_QUEUE: usize = 16;
/// After the runner exits, how long its last lines may take to arrive.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// The longest line accepted from the runner that is not program output or an emitted value.
const MAX_CONTROL_LINE: usize = 64 * 1024 * 1024;

pub(super) struct RunContext<'a> {
    pub registry: &'a Arc<Registry>,
    pub settings: &'a ExecutionConfig,
    pub code: &'a str,
    pub deadline: tokio::time::Instant,
    pub cancel: CancellationToken,
    /// Where the run's clean-up goes on after its result (waited for at shutdown).
    pub cleanups: &'a TaskTracker,
}

/// How the protocol loop ended.
enum Ending {
    Done(Option<ProgramError>),
    Timeout,
    Cancelled,
    /// The runner (or the program, through the channel fd) sent something that breaks the protocol.
    Broken(String),
    Exited(ExitInfo),
}

/// What a finished call task reports back to the loop for the trace (helpers report nothing).
type Finished = Option<(usize, Option<String>, Instant)>;

pub(super) async fn drive(runner: ReadyRunner, cx: RunContext<'_>) -> RunReport {
    let ReadyRunner { to_runner, mut reader, mut control } = runner;
    let (lines_tx, lines_rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let writer = tokio::spawn(write_lines(to_runner, lines_rx));
    reader.set_max_len(MAX_CONTROL_LINE.max(cx.settings.max_output_bytes * 2));

    let mut report = RunReport::default();
    let mut output = OutputBuffer::new(cx.settings.max_output_bytes);
    let mut calls: JoinSet<Finished> = JoinSet::new();
    let semaphore = Arc::new(Semaphore::new(cx.settings.max_concurrent_calls));
    let mut exited: Option<(ExitInfo, tokio::time::Instant)> = None;

    let tools = cx.registry.catalog().names();
    let run = ToRunner::Run { code: cx.code, tools: &tools, max_output_bytes: cx.settings.max_output_bytes };
    let _ = lines_tx.send(run.to_line()).await;
    let ending = loop {
        tokio::select! {
            biased;
            () = cx.cancel.cancelled() => break Ending::Cancelled,
            () = tokio::time::sleep_until(cx.deadline) => break Ending::Timeout,
            Some(joined) = calls.join_next(), if !calls.is_empty() => {
                if let Ok(Some((index, error, ended))) = joined {
                    report.trace.finish(index, error, ended);
                }
            }
            info = control.wait(), if exited.is_none() => {
                exited = Some((info, tokio::time::Instant::now() + EXIT_GRACE));
            }
            () = sleep_until_some(exited.as_ref().map(|(_, grace)| *grace)) => {
                break Ending::Exited(exited.take().map(|(info, _)| info).expect("set with the grace"));
            }
            read = reader.next_line() => match read {
                Ok(Line::Complete(line)) => match FromRunner::parse(line) {
                    Ok(FromRunner::Done { error }) => break Ending::Done(error),
                    Ok(message) => {
                        if let Err(why) = handle(message, &cx, &mut report, &mut output, &mut calls, &semaphore, &lines_tx) {
                            break Ending::Broken(why);
                        }
                    }
                    Err(e) => break Ending::Broken(format!("an invalid message ({e})")),
                },
                Ok(Line::End) => break Ending::Exited(control.wait().await),
                Ok(Line::TooLong { len, .. }) => break Ending::Broken(format!("a message of {len} bytes, over the limit")),
                Err(e) => break Ending::Broken(e.to_string()),
            },
        }
    };

    calls.abort_all();
    let cancelled = report.trace.cancel_in_flight();
    writer.abort();
    // Everything the run started is killed now; reaping it and removing its scratch directory or container
    // take milliseconds that the result does not wait for.
    control.start_kill();
    cx.cleanups.spawn(async move { control.kill().await });
    report.output = output.finish();
    let in_flight =
        if cancelled > 0 { format!("; {cancelled} tool call(s) still running were cancelled") } else { String::new() };
    let error = match ending {
        Ending::Done(None) => report.error.take(),
        Ending::Done(Some(error)) if error.message.trim().is_empty() => Some(error.kind),
        Ending::Done(Some(error)) => Some(error.message),
        Ending::Timeout => {
            Some(format!("TimeoutError: Execution exceeded {}s limit{in_flight}", cx.settings.timeout_seconds))
        }
        Ending::Cancelled => Some(format!("ExecutionError: the client cancelled the run{in_flight}")),
        Ending::Broken(why) => Some(format!(
            "ExecutionError: the program corrupted its channel to the server ({why}); the run was stopped{in_flight}"
        )),
        Ending::Exited(info) => {
            Some(format!("ExecutionError: the interpreter ended before the program finished ({info}){in_flight}"))
        }
    };
    report.error = error;
    report
}

/// Answers one message from the runner. `Err` means the message breaks the protocol.
fn handle(
    message: FromRunner,
    cx: &RunContext<'_>,
    report: &mut RunReport,
    output: &mut OutputBuffer,
    calls: &mut JoinSet<Finished>,
    semaphore: &Arc<Semaphore>,
    lines_tx: &mpsc::Sender<Vec<u8>>,
) -> Result<(), String> {
    match message {
        FromRunner::Output { data } => output.push(&data),
        FromRunner::Emit { value } => {
            let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > cx.settings.max_output_bytes {
                report.error = Some(format!(
                    "ExecutionError: emit() got {size} bytes of JSON, more than max_output_bytes ({})",
                    cx.settings.max_output_bytes
                ));
            } else {
                report.result = Some(value);
            }
        }
        FromRunner::Call { id, tool, args } => {
            let index = report.trace.start(&tool, &args);
            let lines_tx = lines_tx.clone();
            if report.trace.calls().len() > cx.settings.max_tool_calls {
                let error = format!(
                    "tool call budget exhausted: a program may make at most {} tool calls (execution.max_tool_calls)",
                    cx.settings.max_tool_calls
                );
                calls.spawn(async move {
                    let ended = Instant::now();
                    let _ = lines_tx.send(ToRunner::failure(id, &error).to_line()).await;
                    Some((index, Some(error), ended))
                });
                return Ok(());
            }
            let registry = Arc::clone(cx.registry);
            let semaphore = Arc::clone(semaphore);
            let timeout = cx.settings.tool_call_timeout();
            let max_result = cx.settings.max_tool_result_bytes;
            calls.spawn(async move {
                let _permit = semaphore.acquire_owned().await;
                let result = registry.call(&tool, args, timeout, max_result).await;
                let ended = Instant::now();
                let line = match &result {
                    Ok(value) => ToRunner::success(id, value).to_line(),
                    Err(error) => ToRunner::failure(id, error).to_line(),
                };
                let _ = lines_tx.send(line).await;
                Some((index, result.err(), ended))
            });
        }
        FromRunner::Helper { id, name, args } => {
            let line = match helper(cx.registry, &name, &args) {
                Ok(value) => ToRunner::success(id, &value).to_line(),
                Err(error) => ToRunner::failure(id, &error).to_line(),
            };
            let lines_tx = lines_tx.clone();
            calls.spawn(async move {
                let _ = lines_tx.send(line).await;
                None
            });
        }
        FromRunner::Ready { .. } => return Err("a second ready message".to_string()),
        FromRunner::Done { .. } => unreachable!("done ends the loop before handle"),
    }
    Ok(())
}

/// The introspection helpers available inside programs (not counted against budgets).
fn helper(registry: &Registry, name: &str, args: &Map<String, Value>) -> Result<Box<RawValue>, String> {
    let value = match name {
        "list_callable_tools" => Value::from(registry.catalog().names()),
        "inspect_tool" => match args.get("tool_name") {
            Some(Value::String(tool)) => registry.inspect(tool)?,
            _ => return Err("inspect_tool() needs tool_name=<a name from list_callable_tools()>".to_string()),
        },
        "server_status" => serde_json::to_value(registry.statuses()).expect("statuses serialise"),
        other => return Err(format!("unknown helper '{other}'")),
    };
    Ok(to_raw_value(&value).expect("helper values serialise"))
}

async fn write_lines(mut to_runner: std::pin::Pin<Box<dyn AsyncWrite + Send>>, mut lines: mpsc::Receiver<Vec<u8>>) {
    while let Some(mut batch) = lines.recv().await {
        // Whatever else is ready goes out in the same write; a lone line (a big result) is written as it is.
        while let Ok(more) = lines.try_recv() {
            batch.extend_from_slice(&more);
        }
        if to_runner.write_all(&batch).await.is_err() || to_runner.flush().await.is_err() {
            return;
        }
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
