//! The server's side of one run: the protocol loop with the runner. Every line from the runner is
//! untrusted: budgets, limits and the trace are decided here, and what the server keeps of what it reads is
//! bounded whatever the program sends.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptc_backends::protocol::{FromRunner, MAX_PROGRESS_MESSAGE, ProgramError, SessionRun, ToRunner};
use ptc_backends::{ExitInfo, RunnerControl};
use serde_json::value::{RawValue, to_raw_value};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::task::TaskTracker;

use super::approval::{Approval, ApprovalRequest};
use super::attachments::Attachments;
use super::expiry::{Expired, Expiry};
use super::files::File;
use super::output::{Marker, OutputBuffer, clip};
use super::pool::ReadyRunner;
use super::report::{Outcome, RunReport, timed_out};
use super::trace::{Trace, budget_exhausted, shorten};
use super::trim;
use super::{RunProgress, TimeLimit};
use crate::config::ExecutionConfig;
use crate::discovery::{InspectRequest, ListRequest, RequestError};
use crate::lines::{Line, LineReader, ReadError};
use crate::precheck;
use crate::registry::{CallResult, Registry};

/// Messages to the runner waiting to be written; tasks wait when it is full, the loop never does.
const WRITE_QUEUE: usize = 16;
/// Parts of lines to the runner at least this long are written from where they lie; shorter ones are
/// gathered so that one write takes them all.
const WRITE_AS_IS: usize = 64 * 1024;
/// After the runner exits, how long its next line may take to arrive: the runner may have written many lines
/// just before exiting (what the channel holds), and a busy server reads them slower than it wrote.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// However fast lines keep coming after the runner exits, the longest they are read: past it, only a process
/// the program forked (which shares the channel) could still be writing.
const EXIT_DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// Room in a line beyond its payload (call arguments, an emitted value): the envelope, and output chunks
/// (the runner sends at most 64 KiB of output a line, up to six times that once escaped).
const LINE_SLACK: usize = 512 * 1024;
/// The most a program may pass to one call (as JSON), whatever `max_tool_result_bytes` allows for results:
/// a flood of forged calls must not let the server hold gigabytes.
const MAX_ARGUMENT_BYTES: usize = 16 * 1024 * 1024;
/// Tool names come from the catalog; a longer one can only be forged.
const MAX_TOOL_NAME: usize = 1024;
/// How much work (calls waiting for a slot, helper answers being sent) the loop takes on beyond
/// `max_concurrent_calls` before it stops reading the runner until some of it is done: a flood of requests
/// cannot make the server hold more than this many messages.
const QUEUED_WORK: usize = 8;
/// The exception class name as kept.
const MAX_ERROR_KIND: usize = 200;
/// After a session's run, how long the lines still queued for its runner may take to be written: a runner
/// that does not read them by then is not kept.
const HAND_BACK_WAIT: Duration = Duration::from_secs(2);

pub(super) struct RunContext<'a> {
    pub registry: &'a Arc<Registry>,
    pub settings: &'a ExecutionConfig,
    pub code: &'a str,
    /// The run's time limit (which stands still while an approval is awaited), the client's cancel and the
    /// server's shutdown.
    pub expiry: Expiry,
    /// The time limit the expiry counts down, as messages name it.
    pub limit: TimeLimit,
    /// Told each time a tool call finishes or the program calls `progress()`.
    pub progress: Option<watch::Sender<RunProgress>>,
    /// Gets the program's output as it arrives (see `RunOptions::printed`).
    pub printed: Option<mpsc::Sender<String>>,
    /// Which calls need approval, and who is asked.
    pub approval: Option<Approval>,
    /// Where the run's clean-up goes on after its result (waited for at shutdown).
    pub cleanups: &'a TaskTracker,
    /// A session's run: the runner is handed back after a `done`, for the session's next run.
    pub session: Option<SessionRun>,
}

/// How the protocol loop ended.
enum Ending {
    Done(Option<ProgramError>),
    Timeout,
    Cancelled,
    Stopped,
    /// The runner (or the program, through the channel fd) sent something that breaks the protocol.
    Broken(Breach),
    Exited(ExitInfo),
}

/// How the runner (or the program, through the channel fd) broke the protocol.
#[derive(Debug, thiserror::Error)]
enum Breach {
    #[error("an invalid message ({0})")]
    Invalid(serde_json::Error),
    #[error("a message of {len} bytes, more than the {max} bytes a message may have")]
    TooLong { len: usize, max: usize },
    #[error("a second ready message")]
    SecondReady,
    #[error("a tool name of {0} bytes")]
    LongToolName(usize),
    #[error("a progress message of {0} bytes")]
    LongProgressMessage(usize),
    #[error("a progress fraction of {0}, outside 0 to 1")]
    Fraction(f64),
    #[error(transparent)]
    Read(ReadError),
}

/// Why a helper call failed: the program's `ToolError`.
#[derive(Debug, thiserror::Error)]
enum HelperError {
    /// Its arguments, as the MCP tool of the same name judges them.
    #[error("{0}")]
    Arguments(RequestError),
    #[error("unknown helper '{0}'")]
    Unknown(String),
}

/// The most a program may pass to one call: `max_tool_result_bytes`, at most [`MAX_ARGUMENT_BYTES`].
fn max_arguments(settings: &ExecutionConfig) -> usize {
    settings.max_tool_result_bytes.min(MAX_ARGUMENT_BYTES)
}

/// The longest line accepted from the runner: room for the largest call, output, or file `attach()` sends
/// (in base64).
pub(super) fn max_line(settings: &ExecutionConfig) -> usize {
    let file = settings.max_attachment_bytes.div_ceil(3).saturating_mul(4);
    max_arguments(settings).max(settings.max_output_bytes).max(file).saturating_add(LINE_SLACK)
}

/// Runs the program on `runner` to its end; for a session's run that ended with a `done`, also the runner,
/// still up and past the run's lines, for the session's next run.
pub(super) async fn drive(runner: ReadyRunner, cx: RunContext<'_>) -> (RunReport, Option<ReadyRunner>) {
    let ReadyRunner { to_runner, mut reader, mut control } = runner;
    let (lines_tx, lines_rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let writer = tokio::spawn(write_lines(to_runner, lines_rx));
    reader.set_max_len(max_line(cx.settings));
    let mut run = RunState::new(&cx, lines_tx);

    let ending = match cx.expiry.race(send_program(&cx, &run.lines_tx)).await {
        Ok(()) => serve(&mut run, &mut reader, control.as_mut(), &cx).await,
        Err(expired) => expired.into(),
    };

    run.work.abort_all();
    if cx.session.is_some() && matches!(ending, Ending::Done(_)) {
        // Aborted tasks drop their senders once they are gone; then the writer ends after what is queued.
        while run.work.join_next().await.is_some() {}
        let report = run.into_report(ending, cx.settings, cx.limit);
        if let Ok(Ok(Some(to_runner))) = tokio::time::timeout(HAND_BACK_WAIT, writer).await {
            return (report, Some(ReadyRunner { to_runner, reader, control }));
        }
        retire(control, cx.cleanups);
        return (report, None);
    }
    writer.abort();
    retire(control, cx.cleanups);
    (run.into_report(ending, cx.settings, cx.limit), None)
}

/// Kills everything the run started now; reaping it and removing its scratch directory or container take
/// milliseconds that the result does not wait for.
pub(super) fn retire(mut control: Box<dyn RunnerControl>, cleanups: &TaskTracker) {
    control.start_kill();
    cleanups.spawn(async move {
        control.kill().await;
        // Dropping it removes the scratch directory, which a program may have filled with many files: not on
        // the runtime's thread (the stdio server has only one).
        let _ = tokio::task::spawn_blocking(move || drop(control)).await;
    });
}

impl From<Expired> for Ending {
    fn from(expired: Expired) -> Self {
        match expired {
            Expired::Timeout => Ending::Timeout,
            Expired::Cancelled => Ending::Cancelled,
            Expired::Stopped => Ending::Stopped,
        }
    }
}

/// Hands the runner its program, with the tools it may call.
async fn send_program(cx: &RunContext<'_>, lines_tx: &mpsc::Sender<Outgoing>) {
    let catalog = cx.registry.catalog();
    let down = cx.registry.unavailable_prefixes();
    // The runner's check only where the server's cannot prove every tool call sound (src/precheck).
    let runner_checks = cx.settings.precheck && !precheck::proves_sound(cx.code, &catalog).await;
    let program = ToRunner::Run {
        code: cx.code,
        tools: catalog.runner_tools(),
        not_callable: &catalog.refused,
        down: &down,
        precheck: runner_checks,
        progress: cx.progress.is_some(),
        max_output_bytes: cx.settings.max_output_bytes,
        max_attachment_bytes: cx.settings.max_attachment_bytes,
        session: cx.session,
    };
    let _ = lines_tx.send(vec![program.to_line()]).await;
}

/// The protocol loop: serves the runner until the program is done, the run's expiry, or the runner breaks
/// the protocol or exits.
async fn serve(
    run: &mut RunState<'_>,
    reader: &mut LineReader<Pin<Box<dyn AsyncRead + Send>>>,
    control: &mut dyn RunnerControl,
    cx: &RunContext<'_>,
) -> Ending {
    let mut exited: Option<AfterExit> = None;
    let mut channel_open = true;
    // Made once, not at each turn of the loop (two turns a tool call): each would register its timer and
    // wakers again.
    let expired = cx.expiry.expired();
    let exit = control.wait();
    tokio::pin!(expired, exit);
    loop {
        tokio::select! {
            biased;
            expired = &mut expired => break expired.into(),
            Some(_) = run.work.join_next(), if !run.work.is_empty() => {}
            info = &mut exit, if exited.is_none() => {
                if !channel_open {
                    break Ending::Exited(info);
                }
                exited = Some(AfterExit::new(info));
            }
            () = sleep_until_some(exited.as_ref().map(|after| after.grace)), if run.printed_has_room() => {
                break Ending::Exited(exited.take().map(|after| after.info).expect("set with the grace"));
            }
            () = room_in(run.printed.as_ref()), if !run.printed_has_room() => {
                // The runner's last lines wait in the channel for our caller, not for the runner: their grace
                // starts again.
                if let Some(after) = &mut exited {
                    after.grace = tokio::time::Instant::now() + EXIT_GRACE;
                }
            }
            read = reader.next_line(), if channel_open && run.can_take_work() && run.printed_has_room() => match read {
                Ok(Line::Complete(line)) => {
                    if let Some(after) = &mut exited {
                        after.line_read();
                    }
                    let message = FromRunner::parse(line);
                    reader.release();
                    match message {
                        Ok(FromRunner::Done { error }) => break Ending::Done(error),
                        Ok(message) => {
                            if let Err(breach) = run.handle(message) {
                                break Ending::Broken(breach);
                            }
                        }
                        Err(e) => break Ending::Broken(Breach::Invalid(e)),
                    }
                }
                Ok(Line::TooLong { len, .. }) => {
                    break Ending::Broken(Breach::TooLong { len, max: max_line(cx.settings) });
                }
                // The program closed its channel: the run goes on until the interpreter exits (within the
                // deadline and the client's cancel, like everything here).
                Ok(Line::End) => match exited.take() {
                    Some(after) => break Ending::Exited(after.info),
                    None => channel_open = false,
                },
                Err(e) => break Ending::Broken(Breach::Read(e)),
            },
        }
    }
}

/// What the loop keeps while the program runs.
struct RunState<'a> {
    registry: &'a Arc<Registry>,
    settings: &'a ExecutionConfig,
    lines_tx: mpsc::Sender<Outgoing>,
    output: OutputBuffer,
    result: Option<Value>,
    /// An error found by the server (e.g. an emitted value over the limit), reported unless the run fails
    /// otherwise.
    error: Option<String>,
    /// Shared with the call tasks, which record a call's end before its result is handed to the program.
    trace: Arc<Mutex<Trace>>,
    progress: Option<watch::Sender<RunProgress>>,
    printed: Option<mpsc::Sender<String>>,
    approval: Option<Arc<Approval>>,
    expiry: Expiry,
    /// Call tasks and helper answers under way.
    work: JoinSet<()>,
    slots: Arc<Semaphore>,
    /// The image and audio blocks of results, and those `show()` and `attach()` attached (call tasks keep them).
    attachments: Arc<Mutex<Attachments>>,
}

impl<'a> RunState<'a> {
    fn new(cx: &RunContext<'a>, lines_tx: mpsc::Sender<Outgoing>) -> Self {
        RunState {
            registry: cx.registry,
            settings: cx.settings,
            lines_tx,
            output: OutputBuffer::new(cx.settings.max_output_bytes),
            result: None,
            error: None,
            trace: Arc::default(),
            progress: cx.progress.clone(),
            printed: cx.printed.clone(),
            approval: cx.approval.clone().map(Arc::new),
            expiry: cx.expiry.clone(),
            work: JoinSet::new(),
            slots: Arc::new(Semaphore::new(cx.settings.max_concurrent_calls)),
            attachments: Arc::new(Mutex::new(Attachments::new(
                cx.settings.max_attachments,
                cx.settings.max_attachment_bytes,
            ))),
        }
    }

    fn can_take_work(&self) -> bool {
        self.work.len() < self.settings.max_concurrent_calls + QUEUED_WORK
    }

    /// Whether output the caller reads as it arrives can be passed on now: the runner is read only then, so
    /// a caller that reads slowly holds up the program's output as a pipe would.
    fn printed_has_room(&self) -> bool {
        self.printed.as_ref().is_none_or(|printed| printed.capacity() > 0 || printed.is_closed())
    }

    /// Passes output on to the caller who reads it as it arrives; once that caller is gone, to nobody.
    fn pass_on(&mut self, data: &str) {
        // Never full: the runner is read only while there is room.
        if let Some(printed) = &self.printed
            && printed.try_send(data.to_string()).is_err()
        {
            self.printed = None;
        }
    }

    fn trace(&self) -> std::sync::MutexGuard<'_, Trace> {
        self.trace.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attachments(&self) -> std::sync::MutexGuard<'_, Attachments> {
        self.attachments.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Answers one message from the runner. `Err` means the message breaks the protocol.
    fn handle(&mut self, message: FromRunner) -> Result<(), Breach> {
        match message {
            FromRunner::Output { data } => {
                self.pass_on(&data);
                self.output.push(&data);
            }
            FromRunner::Emit { value } => {
                let size = json_size(&value);
                if size > self.settings.max_output_bytes {
                    self.error = Some(format!(
                        "ExecutionError: emit() got {size} bytes of JSON, more than max_output_bytes ({})",
                        self.settings.max_output_bytes
                    ));
                } else {
                    self.result = Some(value);
                }
            }
            FromRunner::Progress { message, fraction } => self.said(message, fraction)?,
            FromRunner::Call { id, tool, args, line } => self.call(id, tool, args, line)?,
            FromRunner::Helper { id, name, args } => {
                let line = match helper(self.registry, &name, &args) {
                    Ok(value) => ToRunner::success(id, &value).to_line(),
                    Err(error) => ToRunner::failure(id, &error.to_string()).to_line(),
                };
                self.reply(line);
            }
            FromRunner::Show { id, call, blocks } => {
                let answer = self.attachments().show(call, &blocks.0);
                self.answer(id, answer);
            }
            FromRunner::Attach { id, name, mime_type, size, data } => {
                let answer = File::new(name, mime_type).and_then(|file| self.attachments().attach(file, size, data));
                self.answer(id, answer);
            }
            FromRunner::Ready { .. } => return Err(Breach::SecondReady),
            FromRunner::Done { .. } => unreachable!("done ends the loop before handle"),
        }
        Ok(())
    }

    /// The program's `progress()`: checked here too (the runner checks it, a forged line need not), then
    /// passed on to the client's reporter, which sends the latest.
    fn said(&mut self, message: String, fraction: Option<f64>) -> Result<(), Breach> {
        if message.len() > MAX_PROGRESS_MESSAGE {
            return Err(Breach::LongProgressMessage(message.len()));
        }
        if let Some(fraction) = fraction.filter(|fraction| !(0.0..=1.0).contains(fraction)) {
            return Err(Breach::Fraction(fraction));
        }
        if let Some(progress) = &self.progress {
            progress.send_modify(|p| {
                p.said += 1;
                p.message = message;
                p.fraction = fraction;
            });
        }
        Ok(())
    }

    fn call(&mut self, id: u64, tool: String, args: Map<String, Value>, line: Option<u32>) -> Result<(), Breach> {
        if tool.len() > MAX_TOOL_NAME {
            return Err(Breach::LongToolName(tool.len()));
        }
        let mut trace = self.trace();
        if trace.calls().len() >= self.settings.max_tool_calls {
            trace.count_over_budget(self.settings.max_tool_calls);
            drop(trace);
            let error = budget_exhausted(self.settings.max_tool_calls);
            self.reply(ToRunner::failure(id, &error).to_line());
            return Ok(());
        }
        let size = json_size(&args);
        let index = trace.start(&tool, &args, size);
        if size > max_arguments(self.settings) {
            let error = format!(
                "'{tool}' was given {size} bytes of arguments, more than the {} a program may pass to a call \
                 (max_tool_result_bytes, at most 16 MiB); pass a reference (a path, an id) instead of the data",
                max_arguments(self.settings)
            );
            trace.finish(index, Err(&error), Instant::now());
            drop(trace);
            report_progress(self.progress.as_ref(), &tool);
            self.reply(ToRunner::failure(id, &error).to_line());
            return Ok(());
        }
        drop(trace);
        let (registry, trace, slots, lines_tx) =
            (Arc::clone(self.registry), Arc::clone(&self.trace), Arc::clone(&self.slots), self.lines_tx.clone());
        let progress = self.progress.clone();
        let approval = self.approval.clone().filter(|approval| approval.needed_for(&tool));
        let expiry = self.expiry.clone();
        let attachments = Arc::clone(&self.attachments);
        let (timeout, max_result) = (self.settings.tool_call_timeout(), self.settings.max_tool_result_bytes);
        self.work.spawn(async move {
            let approved = match &approval {
                Some(approval) => {
                    let request = ApprovalRequest { tool: tool.clone(), arguments: args.clone(), line };
                    // The run's time limit stands still while a person decides.
                    let _paused = expiry.pause();
                    approval.ask(&request).await
                }
                None => Ok(()),
            };
            let result = match approved {
                Ok(()) => {
                    let _slot = slots.acquire_owned().await;
                    registry.call(&tool, args, timeout, max_result).await.map_err(|error| error.to_string())
                }
                // Its words are the program's ToolError.
                Err(refused) => Err(refused.to_string()),
            };
            // The result is moved into its line, not copied: a large one is held once while it is sent.
            let (line, ended) = match result {
                Ok(CallResult { value, media }) => {
                    // Kept before the program can see the result, so that show() finds them.
                    let placeholders = if media.is_empty() {
                        Vec::new()
                    } else {
                        attachments.lock().unwrap_or_else(|e| e.into_inner()).keep(id, media)
                    };
                    let len = value.get().len();
                    (ToRunner::success_parts(id, value, &placeholders).into(), Ok(len))
                }
                Err(error) => (vec![ToRunner::failure(id, &error).to_line()], Err(error)),
            };
            let large = matches!(ended, Ok(len) if len >= trim::AFTER_BYTES);
            // Recorded before the program can see the result: a call it got an answer to is never reported
            // as cancelled.
            let ended = ended.as_ref().copied().map_err(String::as_str);
            trace.lock().unwrap_or_else(|e| e.into_inner()).finish(index, ended, Instant::now());
            report_progress(progress.as_ref(), &tool);
            let _ = lines_tx.send(line).await;
            if large {
                trim::schedule();
            }
        });
        Ok(())
    }

    /// Answers a `show` or an `attach`: its value, or the program's `ToolError`.
    fn answer(&mut self, id: u64, answer: Result<Value, impl std::fmt::Display>) {
        let line = match answer.map(|value| to_raw_value(&value).expect("answers serialise")) {
            Ok(value) => ToRunner::success(id, &value).to_line(),
            Err(error) => ToRunner::failure(id, &error.to_string()).to_line(),
        };
        self.reply(line);
    }

    /// Sends a line to the runner without making the loop wait for the write queue.
    fn reply(&mut self, line: Vec<u8>) {
        let lines_tx = self.lines_tx.clone();
        self.work.spawn(async move {
            let _ = lines_tx.send(vec![line]).await;
        });
    }

    fn into_report(self, ending: Ending, settings: &ExecutionConfig, limit: TimeLimit) -> RunReport {
        let mut trace = std::mem::take(&mut *self.trace());
        // Call tasks are aborted by now, but one may still hold a clone of the Arc: take the blocks out.
        let (attachments, files) = std::mem::replace(&mut *self.attachments(), Attachments::new(0, 0)).into_parts();
        let cancelled = trace.cancel_in_flight();
        let in_flight = if cancelled > 0 {
            format!("; {cancelled} tool call(s) still running were cancelled")
        } else {
            String::new()
        };
        let budget = settings.max_output_bytes;
        let outcome = match (&ending, &self.error) {
            (Ending::Done(None), None) => Outcome::Ok,
            (Ending::Timeout, _) => Outcome::Timeout,
            (Ending::Cancelled, _) => Outcome::Cancelled,
            (Ending::Stopped, _) => Outcome::Killed,
            _ => Outcome::Error,
        };
        let error = match ending {
            Ending::Done(None) => self.error,
            Ending::Done(Some(error)) if error.message.trim().is_empty() => Some(shorten(&error.kind, MAX_ERROR_KIND)),
            // Half the budget at most, so that what the program printed before it keeps the other half.
            Ending::Done(Some(error)) => Some(clip(&error.message, budget / 2, budget, Marker::Error)),
            Ending::Timeout => Some(timed_out(limit, &in_flight)),
            Ending::Cancelled => Some(format!("ExecutionError: the client cancelled the run{in_flight}")),
            Ending::Stopped => {
                Some(format!("ExecutionError: the server is shutting down; the run was stopped{in_flight}"))
            }
            Ending::Broken(why) => Some(format!(
                "ExecutionError: the program corrupted its channel to the server ({why}); the run was stopped{in_flight}"
            )),
            Ending::Exited(info) => {
                Some(format!("ExecutionError: the interpreter ended before the program finished ({info}){in_flight}"))
            }
        };
        // The error and the emitted value come first; the output gets what is left of the budget, so that the
        // reply stays within max_output_bytes and a small margin whatever the program does.
        let taken = error.as_ref().map_or(0, String::len) + self.result.as_ref().map_or(0, json_size);
        let output = self.output.finish(budget.saturating_sub(taken));
        RunReport { outcome, output, result: self.result, error, trace, attachments, files, session: None }
    }
}

/// Counts one more finished call, of `tool`, for the client's progress.
fn report_progress(progress: Option<&watch::Sender<RunProgress>>, tool: &str) {
    if let Some(progress) = progress {
        progress.send_modify(|p| {
            p.finished += 1;
            p.last_tool = tool.to_string();
        });
    }
}

/// The size of a value as compact JSON, counted without building the text.
fn json_size<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

/// The introspection helpers available inside programs (not counted against budgets); they take the
/// arguments of the MCP tools of the same names.
fn helper(registry: &Registry, name: &str, args: &Map<String, Value>) -> Result<Box<RawValue>, HelperError> {
    let value = match name {
        "list_callable_tools" => {
            ListRequest::parse(args).map_err(HelperError::Arguments)?.list(&registry.catalog()).into_value()
        }
        "inspect_tool" => InspectRequest::parse(args)
            .and_then(|request| request.inspect(&registry.catalog()))
            .map_err(HelperError::Arguments)?
            .into_value(),
        "server_status" => serde_json::to_value(registry.statuses()).expect("statuses serialise"),
        other => return Err(HelperError::Unknown(shorten(other, MAX_TOOL_NAME))),
    };
    Ok(to_raw_value(&value).expect("helper values serialise"))
}

/// A line to the runner, in the parts it was built in (see [`ToRunner::success_parts`]).
type Outgoing = Vec<Vec<u8>>;

/// Writes the lines until every sender is gone; then the stream, unless a write failed.
async fn write_lines(
    mut to_runner: Pin<Box<dyn AsyncWrite + Send>>,
    mut lines: mpsc::Receiver<Outgoing>,
) -> Option<Pin<Box<dyn AsyncWrite + Send>>> {
    while let Some(mut parts) = lines.recv().await {
        // Whatever else is ready goes out with it.
        while let Ok(more) = lines.try_recv() {
            parts.extend(more);
        }
        for chunk in gather(parts) {
            to_runner.write_all(&chunk).await.ok()?;
        }
        to_runner.flush().await.ok()?;
    }
    Some(to_runner)
}

/// The parts to write, each short run of them joined into one buffer; a long part (a large result) is
/// left as it is.
fn gather(parts: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut chunks: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
    for part in parts {
        match chunks.last_mut() {
            Some(last) if last.len() < WRITE_AS_IS && part.len() < WRITE_AS_IS => last.extend_from_slice(&part),
            _ => chunks.push(part),
        }
    }
    chunks
}

/// Resolves once `printed` has room (or is closed).
async fn room_in(printed: Option<&mpsc::Sender<String>>) {
    if let Some(printed) = printed {
        let _ = printed.reserve().await;
    }
}

/// The runner has exited: how long the loop still reads what it wrote before.
struct AfterExit {
    info: ExitInfo,
    /// When the loop stops waiting for the next line.
    grace: tokio::time::Instant,
    /// The latest `grace` may become.
    limit: tokio::time::Instant,
}

impl AfterExit {
    fn new(info: ExitInfo) -> AfterExit {
        let now = tokio::time::Instant::now();
        AfterExit { info, grace: now + EXIT_GRACE, limit: now + EXIT_DRAIN_LIMIT }
    }

    /// A line arrived: the next one gets its grace, within the limit.
    fn line_read(&mut self) {
        self.grace = (tokio::time::Instant::now() + EXIT_GRACE).min(self.limit);
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Lines that keep coming after the runner exited are read (each gets its grace), up to the limit.
    #[tokio::test(start_paused = true)]
    async fn lines_after_the_exit_are_read_while_they_come_but_only_up_to_the_limit() {
        let start = tokio::time::Instant::now();
        let mut after = AfterExit::new(ExitInfo::Code(0));
        assert_eq!(after.grace, start + EXIT_GRACE);
        tokio::time::advance(EXIT_GRACE / 2).await;
        after.line_read();
        assert_eq!(after.grace, start + EXIT_GRACE / 2 + EXIT_GRACE, "a line read gives the next its grace");
        while tokio::time::Instant::now() < start + EXIT_DRAIN_LIMIT {
            tokio::time::advance(EXIT_GRACE / 2).await;
            after.line_read();
        }
        assert_eq!(after.grace, start + EXIT_DRAIN_LIMIT, "a writer that never stops is read no longer");
    }

    #[test]
    fn short_parts_are_gathered_into_one_write_and_long_ones_written_as_they_are() {
        let long = vec![b'x'; WRITE_AS_IS];
        let parts = vec![b"a".to_vec(), b"b".to_vec(), long.clone(), b"c".to_vec(), b"d".to_vec()];
        assert_eq!(gather(parts), [b"ab".to_vec(), long, b"cd".to_vec()]);
        assert_eq!(gather(vec![b"lone".to_vec()]), [b"lone".to_vec()]);
    }

    #[test]
    fn json_sizes_are_counted_like_the_compact_text() {
        let value = json!({"a": [1, "é", null], "b": {"c": true}});
        assert_eq!(json_size(&value), serde_json::to_vec(&value).unwrap().len());
    }
}
